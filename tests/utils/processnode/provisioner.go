package processnode

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Provisioner is the provisioner name of the node's StorageClass.
const Provisioner = "processnode.example.com/hostpath"

// selectedNode is the annotation the scheduler puts on a claim of a
// WaitForFirstConsumer class once it has chosen the node of its first pod.
const selectedNode = "volume.kubernetes.io/selected-node"

// provisioner is a dynamic provisioner for the node's StorageClass, as an
// external provisioner works: for each pending claim of the class it makes a
// PersistentVolume whose claimRef names the claim, once the scheduler has
// placed the claim's first pod on this node (the PV controller binds the
// two), backed by a directory of the node; when a claim is deleted and its
// volume's reclaim policy is Delete, it deletes the volume and its directory.
// The volume is bound once, so nothing ever reports a lost claim.
type provisioner struct {
	n     *Node
	class string
}

// claimPath is where a provisioned claim's data lives.
func (n *Node) claimPath(uid string) string { return filepath.Join(n.opts.Dir, "claims", uid) }

func (p *provisioner) start(ctx context.Context) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:    metav1.ObjectMeta{Name: p.class},
		Provisioner:   Provisioner,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete),
		// The scheduler picks the node first and names it on the claim:
		// a pod never waits on a claim that is not bound yet.
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowVolumeExpansion: ptr.To(true),
	}
	if p.n.opts.DefaultStorageClass {
		sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	}
	if _, err := p.n.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("storage class %s: %w", p.class, err)
	}
	factory := informers.NewSharedInformerFactory(p.n.client, 30*time.Second)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	volumes := factory.Core().V1().PersistentVolumes().Informer()
	_, _ = claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.provision(ctx, obj.(*corev1.PersistentVolumeClaim)) },
		UpdateFunc: func(_, obj any) {
			p.provision(ctx, obj.(*corev1.PersistentVolumeClaim))
			p.resize(ctx, obj.(*corev1.PersistentVolumeClaim))
		},
	})
	_, _ = volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.reclaim(ctx, obj.(*corev1.PersistentVolume)) },
		UpdateFunc: func(_, obj any) { p.reclaim(ctx, obj.(*corev1.PersistentVolume)) },
	})
	factory.Start(ctx.Done())
	return nil
}

// provision makes the volume of a pending claim of the class.
func (p *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) {
	class := ptr.Deref(pvc.Spec.StorageClassName, "")
	if class == "" && p.n.opts.DefaultStorageClass {
		class = p.class // the admission plugin fills it in; an old claim may lack it
	}
	if class != p.class || pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || !pvc.DeletionTimestamp.IsZero() ||
		pvc.Annotations[selectedNode] != p.n.opts.Name {
		return
	}
	path := p.n.claimPath(string(pvc.UID))
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	notSized, err := makeVolume(ctx, path, size.Value())
	if err != nil {
		p.n.log.Error(err, "provisioning", "claim", pvc.Namespace+"/"+pvc.Name)
		return
	}
	if notSized != nil {
		p.n.log.Info("volume size not enforced: a plain directory instead", "claim", pvc.Namespace+"/"+pvc.Name, "error", notSized.Error())
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID),
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              p.class,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			// The data is on this node only.
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{p.n.opts.Name}}},
			}}}},
		},
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.n.client.CoreV1().PersistentVolumes().Create(cctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		p.n.log.Error(err, "provisioning", "claim", pvc.Namespace+"/"+pvc.Name)
		return
	}
	p.n.log.Info("provisioned", "claim", pvc.Namespace+"/"+pvc.Name, "volume", pv.Name, "path", path)
}

// reclaim deletes a released volume of the class whose policy is Delete,
// with its data: deleting the claim was the user's request to delete it.
func (p *provisioner) reclaim(ctx context.Context, pv *corev1.PersistentVolume) {
	if pv.Annotations["pv.kubernetes.io/provisioned-by"] != Provisioner || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.Local == nil {
		return
	}
	if err := removeVolume(ctx, pv.Spec.Local.Path); err != nil {
		p.n.log.Error(err, "deleting a released volume's data", "volume", pv.Name)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.n.client.CoreV1().PersistentVolumes().Delete(cctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		p.n.log.Error(err, "deleting a released volume", "volume", pv.Name)
		return
	}
	p.n.log.Info("deleted a released volume and its data", "volume", pv.Name, "claim", pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name)
}

// resize grows a bound claim's volume when its request went up, online (the
// class allows expansion), as an external resizer does: the filesystem, then
// the volume's capacity, then the claim's.
func (p *provisioner) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim) {
	want, have := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
	if pvc.Status.Phase != corev1.ClaimBound || ptr.Deref(pvc.Spec.StorageClassName, "") != p.class || want.Cmp(have) <= 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	key := pvc.Namespace + "/" + pvc.Name
	pv, err := p.n.client.CoreV1().PersistentVolumes().Get(cctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Annotations["pv.kubernetes.io/provisioned-by"] != Provisioner || pv.Spec.Local == nil {
		return
	}
	if err := growVolume(cctx, pv.Spec.Local.Path, want.Value()); err != nil {
		// Online growth needs CAP_SYS_RESOURCE, which a sandboxed root may
		// lack: the claim says it waits, as a kubelet's would, and why.
		for _, c := range pvc.Status.Conditions {
			if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending {
				return
			}
		}
		p.n.log.Error(err, "growing a volume", "claim", key, "to", want.String())
		cur := pvc.DeepCopy()
		cur.Status.Conditions = append(cur.Status.Conditions, corev1.PersistentVolumeClaimCondition{
			Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
			Reason: "OnlineResizeFailed", Message: "the process node could not grow the mounted filesystem: " + err.Error()})
		_, _ = p.n.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(cctx, cur, metav1.UpdateOptions{})
		return
	}
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
	if _, err := p.n.client.CoreV1().PersistentVolumes().Update(cctx, pv, metav1.UpdateOptions{}); err != nil {
		p.n.log.Error(err, "growing a volume", "claim", key)
		return
	}
	cur := pvc.DeepCopy()
	cur.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
	cur.Status.Conditions = nil
	if _, err := p.n.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(cctx, cur, metav1.UpdateOptions{}); err != nil {
		p.n.log.Error(err, "growing a volume", "claim", key)
		return
	}
	p.n.log.Info("grew a volume", "claim", key, "from", have.String(), "to", want.String())
}
