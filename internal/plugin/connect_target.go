package plugin

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// Labels the operator and its chart put on an instance's pod
// (internal/controller/labels_annotations.go).
const (
	labelName        = "app.kubernetes.io/name"
	labelInstance    = "app.kubernetes.io/instance"
	labelRole        = "database.example.com/role"
	chartName        = "database"
	roleReplica      = "replica"
	serverContainer  = "database"
	appSecretSuffix  = "-app"
	readOnlyService  = "-ro"
	readWriteService = "-rw"
)

// instanceSelector selects the pods of the Database name's instances (not
// its backup or restore pods, which carry its instance label too).
func instanceSelector(name string) string {
	return labelName + "=" + chartName + "," + labelInstance + "=" + name
}

// phaseOf is db's phase, for messages.
func phaseOf(db *dbv1.Database) string {
	if db.Status.Phase == "" {
		return "none reported yet"
	}
	return string(db.Status.Phase)
}

// targetPod is the pod connect goes to: db's primary, or with replica a
// ready replica.
func (c *Clients) targetPod(ctx context.Context, db *dbv1.Database, replica bool) (string, error) {
	if !replica {
		if db.Status.CurrentPrimary == "" {
			return "", fmt.Errorf("the Database %s has no primary yet (phase %s)", db.Name, phaseOf(db))
		}
		return db.Status.CurrentPrimary, nil
	}
	if name := readyReplicaInStatus(db); name != "" {
		return name, nil
	}
	// The status may lag behind the pods: ask them.
	name, err := c.readyReplicaPod(ctx, db)
	if err != nil || name != "" {
		return name, err
	}
	return "", fmt.Errorf("the Database %s has no ready replica (phase %s, %d of %d instance(s) ready): connect to the primary without --replica",
		db.Name, phaseOf(db), db.Status.ReadyReplicas, db.Status.Replicas)
}

// readyReplicaInStatus is the first ready replica in db's status, by name.
func readyReplicaInStatus(db *dbv1.Database) string {
	var names []string
	for _, in := range db.Status.Instances {
		if in.Role == roleReplica && in.Ready && in.Name != db.Status.CurrentPrimary {
			names = append(names, in.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// readyReplicaPod is the first pod labelled a replica of db that is
// ready, by name; "" when none is.
func (c *Clients) readyReplicaPod(ctx context.Context, db *dbv1.Database) (string, error) {
	pods, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: instanceSelector(db.Name) + "," + labelRole + "=" + roleReplica,
	})
	if err != nil {
		return "", fmt.Errorf("listing the pods of Database %s: %w", db.Name, err)
	}
	var names []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Name != db.Status.CurrentPrimary && podReady(p) {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serverPort is the port of p's server container named ec.PortName (the
// chart's), or the engine's default.
func serverPort(p *corev1.Pod, ec engineClient) int32 {
	for _, ctr := range p.Spec.Containers {
		if ctr.Name != serverContainer {
			continue
		}
		for _, port := range ctr.Ports {
			if port.Name == ec.PortName {
				return port.ContainerPort
			}
		}
	}
	return ec.Port
}

// appCredentials reads the application account's Secret of db.
func (c *Clients) appCredentials(ctx context.Context, db *dbv1.Database) (credentials, error) {
	name := db.Name + appSecretSuffix
	s, err := c.Kube.CoreV1().Secrets(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return credentials{}, fmt.Errorf("the application account's Secret %s does not exist yet: the operator creates it once the Database runs", name)
	}
	if err != nil {
		return credentials{}, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	cr := credentials{
		User: string(s.Data["username"]), Password: string(s.Data["password"]), Database: string(s.Data["database"]),
		Host: string(s.Data["host"]), Port: string(s.Data["port"]),
	}
	for _, key := range []string{"username", "password", "database"} {
		if len(s.Data[key]) == 0 {
			return credentials{}, fmt.Errorf("Secret %s has no %s", name, key)
		}
	}
	if cr.Host == "" {
		cr.Host = db.Name + readWriteService + "." + c.Namespace + ".svc"
	}
	if cr.Port == "" {
		cr.Port = fmt.Sprint(engineClientOf(db.Spec.Engine).Port)
	}
	return cr, nil
}
