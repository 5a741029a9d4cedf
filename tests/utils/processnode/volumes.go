package processnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// volumeDirs makes each of the pod's volumes a directory and returns them by
// volume name. A PersistentVolumeClaim's directory is keyed by the claim's
// UID, so it outlives the pod (a new pod of the same StatefulSet ordinal finds
// its data) and a claim deleted and made again starts empty, as a new volume
// would. ConfigMap, Secret and downward API volumes are written as the kubelet
// writes them (files behind a ..data link swapped atomically) and are kept up
// to date by refresh.
func (w *podWorker) volumeDirs(ctx context.Context) (map[string]string, error) {
	dirs := map[string]string{}
	for _, v := range w.pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		switch {
		case v.PersistentVolumeClaim != nil:
			pvc, err := w.node.client.CoreV1().PersistentVolumeClaims(w.pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: claim %s: %w", v.Name, v.PersistentVolumeClaim.ClaimName, err)
			}
			dir = w.node.claimPath(string(pvc.UID))
			// A volume of the node's own provisioner, or any local or
			// hostPath volume, is its path.
			if pvc.Spec.VolumeName != "" {
				pv, err := w.node.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("volume %s: claim %s: %w", v.Name, v.PersistentVolumeClaim.ClaimName, err)
				}
				switch {
				case pv.Spec.Local != nil:
					dir = pv.Spec.Local.Path
				case pv.Spec.HostPath != nil:
					dir = pv.Spec.HostPath.Path
				}
			}
		case v.EmptyDir != nil:
		case v.HostPath != nil:
			dirs[v.Name] = v.HostPath.Path
			continue
		case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
			if err := w.writeProjected(ctx, v, dir); err != nil {
				return nil, err
			}
			dirs[v.Name] = dir
			continue
		default:
			return nil, fmt.Errorf("volume %s: this kind of volume is not supported by the process node", v.Name)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := w.applyFSGroup(dir); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		dirs[v.Name] = dir
	}
	return dirs, nil
}

// applyFSGroup gives a writable volume to the pod's fsGroup as the kubelet
// does (group-owned, group-writable, setgid), when its root does not have
// that group yet (fsGroupChangePolicy OnRootMismatch; Always is treated the
// same here).
func (w *podWorker) applyFSGroup(dir string) error {
	sc := w.pod.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil {
		return nil
	}
	gid := int(*sc.FSGroup)
	var st syscallStat
	if err := statOwner(dir, &st); err != nil {
		return err
	}
	if st.gid == gid {
		return nil
	}
	return filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		mode := info.Mode() | 0o060
		if info.IsDir() {
			mode |= os.ModeSetgid | 0o010
		}
		return os.Chmod(p, mode)
	})
}

// projection is the content of a ConfigMap, Secret, downward API or
// projected volume: path -> content and mode.
type projection struct {
	files map[string][]byte
	modes map[string]os.FileMode
}

// fileMode is a volume's or item's mode, or def when it sets none.
func fileMode(m *int32, def os.FileMode) os.FileMode {
	if m != nil {
		return os.FileMode(*m)
	}
	return def
}

// addKeys adds a ConfigMap's or Secret's data: every key as a file of its
// name, or, when items are listed, only those keys at their paths.
func (p *projection) addKeys(data map[string][]byte, items []corev1.KeyToPath, def os.FileMode) error {
	if len(items) == 0 {
		for k, d := range data {
			p.files[k], p.modes[k] = d, def
		}
		return nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %s not found", it.Key)
		}
		p.files[it.Path], p.modes[it.Path] = d, fileMode(it.Mode, def)
	}
	return nil
}

// projectedFiles computes the files of a ConfigMap, Secret, downward API or
// projected volume: path -> content and mode. A missing optional source
// gives no files; a missing required one is an error (the pod waits).
func (w *podWorker) projectedFiles(ctx context.Context, v corev1.Volume) (map[string][]byte, map[string]os.FileMode, error) {
	p := &projection{files: map[string][]byte{}, modes: map[string]os.FileMode{}}
	var err error
	switch {
	case v.ConfigMap != nil:
		err = w.projectSource(ctx, p, false, v.ConfigMap.Name, v.ConfigMap.Optional, v.ConfigMap.Items, fileMode(v.ConfigMap.DefaultMode, 0o644))
	case v.Secret != nil:
		err = w.projectSource(ctx, p, true, v.Secret.SecretName, v.Secret.Optional, v.Secret.Items, fileMode(v.Secret.DefaultMode, 0o644))
	case v.DownwardAPI != nil:
		err = w.projectDownwardAPI(p, v.DownwardAPI.Items, fileMode(v.DownwardAPI.DefaultMode, 0o644))
	case v.Projected != nil:
		err = w.projectSources(ctx, p, v.Projected.Sources, fileMode(v.Projected.DefaultMode, 0o644))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("volume %s: %w", v.Name, err)
	}
	return p.files, p.modes, nil
}

// projectSources adds the sources of a projected volume, in order, up to
// the first that fails.
func (w *podWorker) projectSources(ctx context.Context, p *projection, sources []corev1.VolumeProjection, def os.FileMode) error {
	for _, s := range sources {
		var err error
		switch {
		case s.ConfigMap != nil:
			err = w.projectSource(ctx, p, false, s.ConfigMap.Name, s.ConfigMap.Optional, s.ConfigMap.Items, def)
		case s.Secret != nil:
			err = w.projectSource(ctx, p, true, s.Secret.Name, s.Secret.Optional, s.Secret.Items, def)
		case s.DownwardAPI != nil:
			err = w.projectDownwardAPI(p, s.DownwardAPI.Items, def)
		case s.ServiceAccountToken != nil:
			var tok string
			tok, err = w.token(ctx, s.ServiceAccountToken)
			p.files[s.ServiceAccountToken.Path], p.modes[s.ServiceAccountToken.Path] = []byte(tok), def
		default:
			err = fmt.Errorf("only configMap, secret, downwardAPI and serviceAccountToken projections are supported")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// projectSource adds a ConfigMap's or a Secret's keys (a missing optional
// one adds nothing).
func (w *podWorker) projectSource(ctx context.Context, p *projection, secret bool, name string, opt *bool, items []corev1.KeyToPath, def os.FileMode) error {
	data, ok, err := w.sourceData(ctx, secret, name, opt)
	if err != nil || !ok {
		return err
	}
	return p.addKeys(data, items, def)
}

// sourceData reads a ConfigMap's data (binary data too) or a Secret's
// data. ok is false for a missing optional source, which provides nothing.
func (w *podWorker) sourceData(ctx context.Context, secret bool, name string, opt *bool) (map[string][]byte, bool, error) {
	kind, data, err := "configmap", map[string][]byte{}, error(nil)
	if secret {
		kind = "secret"
		var s *corev1.Secret
		if s, err = w.node.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			data = s.Data
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = w.node.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
		}
	}
	if apierrors.IsNotFound(err) && optional(opt) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return data, true, nil
}

// projectDownwardAPI adds downward API files (fields of the pod only).
func (w *podWorker) projectDownwardAPI(p *projection, items []corev1.DownwardAPIVolumeFile, def os.FileMode) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downward API file %s: only fieldRef is supported", it.Path)
		}
		val, err := w.fieldRef(it.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		p.files[it.Path], p.modes[it.Path] = []byte(val), fileMode(it.Mode, def)
	}
	return nil
}

// writeProjected writes a ConfigMap/Secret/downward API volume the way the
// kubelet's atomic writer does: the files go into a new timestamped
// directory, then the ..data link is swapped to it, so a reader never sees a
// half-updated set; each file name is a link through ..data. Nothing is
// written when the content is unchanged.
func (w *podWorker) writeProjected(ctx context.Context, v corev1.Volume, dir string) error {
	files, modes, err := w.projectedFiles(ctx, v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if same(dir, files, modes) {
		return nil
	}
	gid := -1
	if sc := w.pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		gid = int(*sc.FSGroup)
	}
	ts := "..data_" + strconv.FormatInt(time.Now().UnixNano(), 10)
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	if err := writeFiles(filepath.Join(dir, ts), names, files, modes, gid); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := swapDataLink(dir, ts); err != nil {
		return err
	}
	if err := linkTopLevel(dir, names); err != nil {
		return err
	}
	if old != "" && old != ts {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// writeFiles writes the named files under dir with their modes, group-owned
// by gid unless it is -1.
func writeFiles(dir string, names []string, files map[string][]byte, modes map[string]os.FileMode, gid int) error {
	for _, p := range names {
		f := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, files[p], modes[p]); err != nil {
			return err
		}
		if err := os.Chmod(f, modes[p]); err != nil { // umask
			return err
		}
		if gid >= 0 {
			if err := os.Chown(f, -1, gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// swapDataLink points dir/..data at ts in one rename.
func swapDataLink(dir, ts string) error {
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "..data"))
}

// linkTopLevel makes each top-level name of the files a link through
// ..data; names no longer present go.
func linkTopLevel(dir string, names []string) error {
	top := map[string]bool{}
	for _, p := range names {
		top[splitFirst(p)] = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n := e.Name(); n[0] != '.' && !top[n] {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	for t := range top {
		link := filepath.Join(dir, t)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", t), link); err != nil {
			return err
		}
	}
	return nil
}

func splitFirst(p string) string {
	for i := range len(p) {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return p
}

// same reports whether dir's ..data already holds exactly these files.
func same(dir string, files map[string][]byte, modes map[string]os.FileMode) bool {
	data := filepath.Join(dir, "..data")
	if _, err := os.Stat(data); err != nil {
		return false
	}
	n := 0
	err := filepath.Walk(data+"/", func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(data, p)
		want, ok := files[rel]
		got, rerr := os.ReadFile(p)
		if !ok || rerr != nil || !bytes.Equal(got, want) || info.Mode().Perm() != modes[rel].Perm() {
			return fmt.Errorf("differs")
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}

// refreshVolumes rewrites the pod's ConfigMap, Secret and downward API
// volumes when their sources changed, as the kubelet's periodic sync does.
func (w *podWorker) refreshVolumes(ctx context.Context) {
	for _, v := range w.pod.Spec.Volumes {
		if v.ConfigMap == nil && v.Secret == nil && v.DownwardAPI == nil && v.Projected == nil {
			continue
		}
		err := w.writeProjected(ctx, v, filepath.Join(w.dir, "volumes", v.Name))
		msg := ""
		if err != nil && ctx.Err() == nil {
			msg = err.Error()
		}
		if w.refreshErr[v.Name] != msg { // each new error once, not every sync
			w.refreshErr[v.Name] = msg
			if msg != "" {
				w.node.log.Info("refreshing volume", "pod", w.key, "volume", v.Name, "error", msg)
			}
		}
	}
}

// token is the pod's service account token for a projection, bound to the
// pod, requested through the TokenRequest API as the kubelet does and
// requested again when 80% of its lifetime has passed.
func (w *podWorker) token(ctx context.Context, p *corev1.ServiceAccountTokenProjection) (string, error) {
	key := p.Audience
	if t, ok := w.tokens[key]; ok && time.Now().Before(t.renew) {
		return t.value, nil
	}
	exp := int64(3600)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod.Name, UID: w.pod.UID}}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	got, err := w.node.client.CoreV1().ServiceAccounts(w.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s: %w", sa, err)
	}
	w.tokens[key] = saToken{value: got.Status.Token, renew: time.Now().Add(time.Duration(exp) * time.Second * 8 / 10)}
	return got.Status.Token, nil
}

type saToken struct {
	value string
	renew time.Time
}
