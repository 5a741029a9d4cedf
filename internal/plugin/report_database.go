package plugin

import (
	"context"
	"fmt"
	"path"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// The labels the operator sets (internal/controller/labels_annotations.go,
// backup_job.go, database_lease.go).
const (
	reportInstanceLabel = "app.kubernetes.io/instance"
	reportNameLabel     = "app.kubernetes.io/name"
	reportDatabaseLabel = "database.example.com/database"
	// reportJobAppName is app.kubernetes.io/name on backup and restore
	// Jobs and pods (controller.JobAppName).
	reportJobAppName = "database-job"
	// reportLeaseSuffix names a Database's primary Lease: <name>-primary.
	reportLeaseSuffix = "-primary"
)

// reportKind lists the objects of one kind in a namespace.
type reportKind struct {
	dir  string
	list func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error)
}

// reportOwnedKinds are the kinds of the objects a Database owns, written
// under objects/<dir>/ (Secrets apart: they are redacted).
var reportOwnedKinds = []reportKind{
	{"statefulsets", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.AppsV1().StatefulSets(ns).List(ctx, o)
	}},
	{"services", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.CoreV1().Services(ns).List(ctx, o)
	}},
	{"configmaps", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.CoreV1().ConfigMaps(ns).List(ctx, o)
	}},
	{"persistentvolumeclaims", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.CoreV1().PersistentVolumeClaims(ns).List(ctx, o)
	}},
	{"poddisruptionbudgets", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.PolicyV1().PodDisruptionBudgets(ns).List(ctx, o)
	}},
	{"networkpolicies", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.NetworkingV1().NetworkPolicies(ns).List(ctx, o)
	}},
	{"serviceaccounts", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.CoreV1().ServiceAccounts(ns).List(ctx, o)
	}},
	{"roles", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.RbacV1().Roles(ns).List(ctx, o)
	}},
	{"rolebindings", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.RbacV1().RoleBindings(ns).List(ctx, o)
	}},
	{"leases", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.CoordinationV1().Leases(ns).List(ctx, o)
	}},
}

var (
	reportJobs = reportKind{"jobs", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.BatchV1().Jobs(ns).List(ctx, o)
	}}
	reportPods = reportKind{"pods", func(ctx context.Context, k kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return k.CoreV1().Pods(ns).List(ctx, o)
	}}
)

// databaseSelectors select a Database's Jobs and pods: the instance label
// the operator sets on all, and the labels of the chart's backup Jobs.
func databaseSelectors(name string) []string {
	return []string{
		reportInstanceLabel + "=" + name,
		reportNameLabel + "=" + reportJobAppName + "," + reportDatabaseLabel + "=" + name,
	}
}

// collectDatabase collects the Database name of the namespace, its Backups,
// the objects it owns, its Jobs, pods, their logs, and the Events. Only a
// Database that cannot be read is an error.
func (r *report) collectDatabase(ctx context.Context, name string) error {
	db, err := r.c.database(ctx, name)
	if err != nil {
		return err
	}
	ns := r.c.Namespace
	r.summary.Database = name
	r.addObject(path.Join("database", name+".yaml"), db)
	r.collectBackups(ctx, name)
	r.readSecrets(ctx, ns, func(s *corev1.Secret) bool { return s.Labels[reportInstanceLabel] == name })
	for _, kind := range reportOwnedKinds {
		r.listObjects(ctx, path.Join("objects", kind.dir), kind, ns, reportInstanceLabel+"="+name)
	}
	r.collectLease(ctx, name+reportLeaseSuffix)
	r.listObjects(ctx, "jobs", reportJobs, ns, databaseSelectors(name)...)
	pods := r.listObjects(ctx, "pods", reportPods, ns, databaseSelectors(name)...)
	r.collectEvents(ctx, ns, "events.yaml")
	for _, p := range pods {
		if pod, ok := p.(*corev1.Pod); ok {
			r.collectLogs(ctx, pod, "logs")
		}
	}
	return nil
}

// collectBackups writes the Backups of the Database name.
func (r *report) collectBackups(ctx context.Context, name string) {
	list, err := r.c.DB.ExampleV1().Backups(r.c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.note("Backups in namespace "+r.c.Namespace, err)
		return
	}
	for i := range list.Items {
		if b := &list.Items[i]; b.Spec.Database.Name == name {
			r.addObject(path.Join("backups", b.Name+".yaml"), b)
		}
	}
}

// readSecrets reads the Secrets of ns to scrub their values from every
// file, and writes (redacted) those write selects. A namespace's Secrets
// are read once.
func (r *report) readSecrets(ctx context.Context, ns string, write func(*corev1.Secret) bool) {
	if r.secretsRead[ns] && write == nil {
		return
	}
	list, err := r.c.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.note(fmt.Sprintf("Secrets in namespace %s (read to write the Database's redacted, and to scrub their values from every file)", ns), err)
		return
	}
	r.secretsRead[ns] = true
	for i := range list.Items {
		s := &list.Items[i]
		r.scrubSecret(s)
		if write != nil && write(s) {
			r.addObject(path.Join("objects", "secrets", s.Name+".yaml"), s)
		}
	}
}

// listObjects writes the objects of kind in ns that any of selectors
// selects into dir, each once, and returns them.
func (r *report) listObjects(ctx context.Context, dir string, kind reportKind, ns string, selectors ...string) []runtime.Object {
	seen := map[string]bool{}
	var out []runtime.Object
	for _, sel := range selectors {
		list, err := kind.list(ctx, r.c.Kube, ns, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			r.note(fmt.Sprintf("%s in namespace %s (%s)", kind.dir, ns, sel), err)
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			r.note(fmt.Sprintf("%s in namespace %s (%s)", kind.dir, ns, sel), err)
			continue
		}
		for _, obj := range items {
			name := reportObjectName(obj)
			if seen[name] {
				continue
			}
			seen[name] = true
			r.addObject(path.Join(dir, name+".yaml"), obj)
			out = append(out, obj)
		}
	}
	return out
}

// collectLease writes the primary Lease when the label did not select it.
func (r *report) collectLease(ctx context.Context, name string) {
	file := path.Join("objects", "leases", name+".yaml")
	if r.names[file] {
		return
	}
	lease, err := r.c.Kube.CoordinationV1().Leases(r.c.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Not created yet (no primary elected).
	case err != nil:
		r.note("Lease "+r.c.Namespace+"/"+name, err)
	default:
		r.addObject(file, lease)
	}
}

// collectEvents writes the Events of ns, oldest first, as one List.
func (r *report) collectEvents(ctx context.Context, ns, file string) {
	list, err := r.c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.note("Events in namespace "+ns, err)
		return
	}
	sort.SliceStable(list.Items, func(i, j int) bool { return eventTime(&list.Items[i]).Before(eventTime(&list.Items[j])) })
	items := make([]any, 0, len(list.Items))
	for i := range list.Items {
		u, err := reportUnstructured(&list.Items[i])
		if err != nil {
			r.note("an Event in namespace "+ns, err)
			continue
		}
		items = append(items, u)
	}
	r.addYAML(file, map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
}

// eventTime is when an Event last happened.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// collectLogs writes the log of every container of pod (init containers
// too) into dir/<pod>/<container>.log, and the previous container's into
// <container>.previous.log when it restarted. A log that cannot be read is
// a note.
func (r *report) collectLogs(ctx context.Context, pod *corev1.Pod, dir string) {
	restarts := map[string]int32{}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			restarts[s.Name] = s.RestartCount
		}
	}
	var containers []string
	for _, c := range pod.Spec.InitContainers {
		containers = append(containers, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		containers = append(containers, c.Name)
	}
	for _, c := range containers {
		base := path.Join(dir, pod.Name, c)
		r.collectLog(ctx, pod, c, false, base+".log")
		if restarts[c] > 0 {
			r.collectLog(ctx, pod, c, true, base+".previous.log")
		}
	}
}

func (r *report) collectLog(ctx context.Context, pod *corev1.Pod, container string, previous bool, file string) {
	opts := &corev1.PodLogOptions{Container: container, Previous: previous, SinceSeconds: r.sinceSeconds}
	data, err := r.c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).DoRaw(ctx)
	if err != nil {
		what := "log"
		if previous {
			what = "previous log"
		}
		r.note(fmt.Sprintf("the %s of container %s of pod %s/%s", what, container, pod.Namespace, pod.Name), err)
		return
	}
	r.add(file, data)
}
