package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	dbv1 "example.com/database-operator/api/v1"
	helmcharts "example.com/database-operator/helm-charts"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/agent/metrics"
	"example.com/database-operator/internal/chart"
	"example.com/database-operator/internal/engine"
)

func loadChart(t testing.TB) *chart.Renderer {
	t.Helper()
	r, err := chart.Load(helmcharts.Database, "database")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func byKindName(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m
}

func TestDesiredObjectsPerEngine(t *testing.T) {
	r := loadChart(t)
	owned := map[string]bool{}
	for _, k := range ownedKinds() {
		owned[k.gvk.String()] = true
	}
	for _, engine := range dbv1.Engines() {
		for _, replicas := range []int32{1, 3} {
			db := newDB(engine, func(db *dbv1.Database) { db.Spec.Replicas = replicas })
			objs, err := desiredObjects(r, db, ValueOptions{OperatorNamespace: "operators", OperatorImage: testOperatorImage})
			if err != nil {
				t.Fatalf("%s: %v", engine, err)
			}
			got := byKindName(objs)
			want := []string{"StatefulSet/orders", "Service/orders-headless", "Service/orders-rw", "Service/orders-ro",
				"ConfigMap/orders-config", "ConfigMap/orders-scripts", "NetworkPolicy/orders",
				"ServiceAccount/orders-agent", "Role/orders-agent", "RoleBinding/orders-agent"}
			if replicas > 1 {
				want = append(want, "PodDisruptionBudget/orders")
			}
			if len(got) != len(want) {
				t.Errorf("%s/%d: rendered %d objects, want %d: %v", engine, replicas, len(got), len(want), keys(got))
			}
			for _, w := range want {
				if got[w] == nil {
					t.Errorf("%s/%d: %s not rendered", engine, replicas, w)
				}
			}
			for id, o := range got {
				if !owned[o.GroupVersionKind().String()] {
					t.Errorf("%s: kind %s is rendered but not in ownedKinds (it would be neither watched nor pruned)", id, o.GroupVersionKind())
				}
				if o.GetNamespace() != "shop" {
					t.Errorf("%s: namespace %q", id, o.GetNamespace())
				}
				refs := o.GetOwnerReferences()
				if len(refs) != 1 || refs[0].UID != "uid-1" || refs[0].Controller == nil || !*refs[0].Controller {
					t.Errorf("%s: owner references %v, want the Database as controller", id, refs)
				}
				if o.GetAnnotations()[appliedHashAnnotation] == "" {
					t.Errorf("%s: no applied hash", id)
				}
				if o.GetLabels()[labelInstance] != "orders" || o.GetLabels()[labelManagedBy] != managedBy {
					t.Errorf("%s: labels %v", id, o.GetLabels())
				}
			}
			for svc, role := range map[string]string{"Service/orders-rw": rolePrimary, "Service/orders-ro": roleReplica} {
				sel, _, _ := unstructured.NestedStringMap(got[svc].Object, "spec", "selector")
				if sel[labelRole] != role || sel[labelInstance] != "orders" {
					t.Errorf("%s/%s selector %v, want role %s", engine, svc, sel, role)
				}
			}
			sts := got["StatefulSet/orders"]
			containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			wantImage := map[dbv1.Engine]string{dbv1.EnginePostgreSQL: "postgres:17", dbv1.EngineMySQL: "mysql:8.4", dbv1.EngineMariaDB: "mariadb:11.4"}[engine]
			if c["image"] != wantImage {
				t.Errorf("%s: image %v, want %s", engine, c["image"], wantImage)
			}
			// The agent answers both probes, each its own question, over
			// HTTP on the port it listens on.
			for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/livez"} {
				get, _, _ := unstructured.NestedMap(c, probe, "httpGet")
				if get["path"] != path || get["port"] != "probes" {
					t.Errorf("%s: %s is %v, want an HTTP GET of the agent's %s on port probes", engine, probe, c[probe], path)
				}
			}
			ports, _, _ := unstructured.NestedSlice(c, "ports")
			probePort := int64(-1)
			for _, p := range ports {
				if p := p.(map[string]any); p["name"] == "probes" {
					probePort, _ = p["containerPort"].(int64)
				}
			}
			if probePort != agent.ProbePort {
				t.Errorf("%s: port probes is %d, the agent serves its probes on %d", engine, probePort, agent.ProbePort)
			}
			if cmd, _, _ := unstructured.NestedStringSlice(c, "command"); len(cmd) < 3 || cmd[0] != "/agent/manager" || cmd[1] != "agent" {
				t.Errorf("%s: the database container runs %v, not the agent", engine, cmd)
			}
			sc := c["securityContext"].(map[string]any)
			if sc["allowPrivilegeEscalation"] != false || sc["runAsNonRoot"] != true || sc["readOnlyRootFilesystem"] != true {
				t.Errorf("%s: container security context %v is not restricted", engine, sc)
			}
			n, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas")
			if int32(n) != replicas {
				t.Errorf("%s: StatefulSet replicas %v, want %d", engine, n, replicas)
			}
		}
	}
}

func TestDesiredObjectsChangeWithSpec(t *testing.T) {
	r := loadChart(t)
	hash := func(db *dbv1.Database) string {
		objs, err := desiredObjects(r, db, ValueOptions{OperatorImage: testOperatorImage})
		if err != nil {
			t.Fatal(err)
		}
		return byKindName(objs)["StatefulSet/orders"].GetAnnotations()[appliedHashAnnotation]
	}
	a := hash(newDB(dbv1.EngineMariaDB))
	if b := hash(newDB(dbv1.EngineMariaDB)); a != b {
		t.Errorf("same spec, different hashes %s %s", a, b)
	}
	if b := hash(newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) { db.Spec.Version = "11.8" })); a == b {
		t.Error("a version change does not change the StatefulSet's hash")
	}
}

func TestRenderRefusesInvalidValues(t *testing.T) {
	r := loadChart(t)
	_, err := r.Render(chart.Release{Name: "x", Namespace: "y"}, map[string]any{"replicas": int64(42)})
	if err == nil {
		t.Fatal("rendering 42 replicas passed values.schema.json")
	}
	if _, err := r.Render(chart.Release{Name: "x"}, nil); err == nil {
		t.Fatal("rendering without a namespace passed")
	}
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestContains(t *testing.T) {
	tests := []struct {
		name       string
		live, want any
		ok         bool
	}{
		{"equal scalars", map[string]any{"a": "x"}, map[string]any{"a": "x"}, true},
		{"extra live fields are fine", map[string]any{"a": "x", "b": int64(1)}, map[string]any{"a": "x"}, true},
		{"changed value", map[string]any{"a": "y"}, map[string]any{"a": "x"}, false},
		{"missing field", map[string]any{}, map[string]any{"a": "x"}, false},
		{"empty map matches absent", map[string]any{}, map[string]any{"emptyDir": map[string]any{}}, true},
		{"float from YAML vs int64 from API", map[string]any{"port": int64(5432)}, map[string]any{"port": float64(5432)}, true},
		{"different numbers", map[string]any{"port": int64(5433)}, map[string]any{"port": float64(5432)}, false},
		{"quantities compare by value", map[string]any{"cpu": "500m"}, map[string]any{"cpu": "0.5"}, true},
		{"different quantities", map[string]any{"memory": "1Gi"}, map[string]any{"memory": "2Gi"}, false},
		{"list length differs", map[string]any{"l": []any{"a", "b"}}, map[string]any{"l": []any{"a"}}, false},
		{"list element drift", map[string]any{"l": []any{map[string]any{"n": "a", "x": "1"}}}, map[string]any{"l": []any{map[string]any{"n": "b"}}}, false},
		{"bools", map[string]any{"b": false}, map[string]any{"b": true}, false},
		{"label removed by someone", map[string]any{"labels": map[string]any{"a": "1"}}, map[string]any{"labels": map[string]any{"a": "1", "b": "2"}}, false},
	}
	for _, tt := range tests {
		if got := contains(tt.live, tt.want); got != tt.ok {
			t.Errorf("%s: contains = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

// TestRenderConcurrently: the Database controller runs several workers
// sharing one chart; rendering must not share state between them (run
// under -race) and each render must be its own Database's.
func TestRenderConcurrently(t *testing.T) {
	r := loadChart(t)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Name = fmt.Sprintf("db%d", i) })
			objs, err := desiredObjects(r, db, ValueOptions{OperatorImage: testOperatorImage})
			if err == nil {
				if _, ok := byKindName(objs)["StatefulSet/"+db.Name]; !ok {
					err = fmt.Errorf("render of %s has no StatefulSet of its own: %v", db.Name, keys(byKindName(objs)))
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestSynchronousReplicationSettings: synchronous replication reaches each
// engine's configuration, and asynchronous leaves none of it behind.
func TestSynchronousReplicationSettings(t *testing.T) {
	r := loadChart(t)
	want := map[dbv1.Engine][]string{
		dbv1.EnginePostgreSQL: {"synchronous_standby_names = 'ANY 2 (*)'"},
		dbv1.EngineMariaDB:    {"rpl-semi-sync-slave-enabled = ON", "rpl-semi-sync-master-wait-point = AFTER_SYNC", "rpl-semi-sync-master-timeout = 4294967295"},
		dbv1.EngineMySQL:      {"plugin-load-add = semisync_source.so", "rpl-semi-sync-source-wait-for-replica-count = 2", "rpl-semi-sync-source-timeout = 4294967295"},
	}
	for _, e := range dbv1.Engines() {
		for _, sync := range []bool{false, true} {
			db := newDB(e, func(db *dbv1.Database) {
				db.Spec.Replicas = 3
				if sync {
					k := int32(2)
					if e == dbv1.EngineMariaDB {
						k = 1
					}
					db.Spec.Replication = dbv1.ReplicationSpec{Mode: dbv1.ReplicationSynchronous, SynchronousReplicas: &k}
				}
			})
			objs, err := desiredObjects(r, db, ValueOptions{OperatorImage: testOperatorImage})
			if err != nil {
				t.Fatal(err)
			}
			cm := byKindName(objs)["ConfigMap/orders-config"]
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			conf := data["postgresql.conf"] + data["operator.cnf"]
			for _, line := range want[e] {
				if strings.Contains(conf, line) != sync {
					t.Errorf("%s, synchronous %v: %q present %v\n%s", e, sync, line, !sync, conf)
				}
			}
		}
	}
}

// TestParametersInConfiguration: spec.parameters end the configuration
// file, quoted for PostgreSQL (a quote and a backslash in a value stay
// data); a change of one the server takes while running leaves the pod
// template as it was (the Parameters phase applies it), one it reads only
// at start changes it (the pods roll).
func TestParametersInConfiguration(t *testing.T) {
	r := loadChart(t)
	render := func(e dbv1.Engine, params map[string]string) (conf, checksum string) {
		objs, err := desiredObjects(r, newDB(e, func(db *dbv1.Database) { db.Spec.Parameters = params }), ValueOptions{OperatorImage: testOperatorImage})
		if err != nil {
			t.Fatal(err)
		}
		data, _, _ := unstructured.NestedStringMap(byKindName(objs)["ConfigMap/orders-config"].Object, "data")
		ann, _, _ := unstructured.NestedStringMap(byKindName(objs)["StatefulSet/orders"].Object, "spec", "template", "metadata", "annotations")
		return data["postgresql.conf"] + data["operator.cnf"], ann["checksum/config"]
	}
	conf, base := render(dbv1.EnginePostgreSQL, nil)
	if strings.Contains(conf, "spec.parameters") {
		t.Errorf("a Database without parameters has a parameters section:\n%s", conf)
	}
	conf, reload := render(dbv1.EnginePostgreSQL, map[string]string{"work_mem": "8MB", "application_name": `it's \ here`})
	for _, line := range []string{"work_mem = '8MB'", `application_name = 'it''s \\ here'`} {
		if !strings.HasSuffix(strings.TrimSpace(conf), line) && !strings.Contains(conf, line+"\n") {
			t.Errorf("postgresql.conf lacks %q:\n%s", line, conf)
		}
	}
	if reload != base {
		t.Error("a parameter PostgreSQL reloads changed the pod template: the pods would roll")
	}
	if _, restart := render(dbv1.EnginePostgreSQL, map[string]string{"shared_buffers": "256MB"}); restart == base {
		t.Error("a parameter PostgreSQL reads at start left the pod template as it was: the pods would not roll")
	}
	conf, _ = render(dbv1.EngineMariaDB, map[string]string{"max-connections": "300"})
	if !strings.Contains(conf, "max_connections = 300\n") || strings.Index(conf, "max_connections = 300") < strings.Index(conf, "max-connections = 200") {
		t.Errorf("my.cnf: max_connections = 300 missing or before the default it overrides:\n%s", conf)
	}
}

// TestNetworkPolicy: the database port is open to the namespace's pods (or
// the clients spec.network names, with the instances and the Jobs) and
// the operator's pods (by namespace and label, never its whole namespace);
// the agents' peer channel only to the Database's own instances and the
// operator's pods; their metrics port to any scraper; out, only the
// instances, DNS and the API server's ports.
func TestNetworkPolicy(t *testing.T) {
	objs, err := desiredObjects(loadChart(t), newDB(dbv1.EnginePostgreSQL), ValueOptions{OperatorNamespace: "operators", OperatorImage: testOperatorImage})
	if err != nil {
		t.Fatal(err)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["NetworkPolicy/orders"].Object, np); err != nil {
		t.Fatal(err)
	}
	operator := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "operators"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "database-operator"}},
	}
	instances := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(newDB(dbv1.EnginePostgreSQL))}}
	want := map[string][]networkingv1.NetworkPolicyPeer{
		"postgresql": {{PodSelector: &metav1.LabelSelector{}}, operator},
		// A MariaDB physical backup's Job asks the agent for the copy.
		"agent":   {instances, {PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelName: JobAppName, labelDatabase: "orders"}}}, operator},
		"metrics": nil, // whoever scrapes them
	}
	if len(np.Spec.Ingress) != len(want) {
		t.Fatalf("%d ingress rules, want %d", len(np.Spec.Ingress), len(want))
	}
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 {
			t.Fatalf("rule %+v: want one port", rule)
		}
		port := rule.Ports[0].Port.String()
		if _, ok := want[port]; !ok {
			t.Errorf("port %s open, want only %v", port, slices.Collect(maps.Keys(want)))
		}
		if !equality.Semantic.DeepEqual(rule.From, want[port]) {
			t.Errorf("port %s open to %+v, want %+v", port, rule.From, want[port])
		}
	}

	// Out: the instances (database port, peer channel), DNS and the API
	// server's ports only; every rule names its ports.
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Fatalf("policy types %v: egress is not limited", np.Spec.PolicyTypes)
	}
	var out []string
	for _, rule := range np.Spec.Egress {
		if len(rule.Ports) == 0 {
			t.Errorf("an egress rule open on every port: %+v", rule)
		}
		for _, p := range rule.Ports {
			to := "anywhere"
			if len(rule.To) > 0 {
				to = "instances"
				if !equality.Semantic.DeepEqual(rule.To, []networkingv1.NetworkPolicyPeer{instances}) {
					t.Errorf("egress to %+v", rule.To)
				}
			}
			out = append(out, fmt.Sprintf("%s/%s %s", *p.Protocol, p.Port.String(), to))
		}
	}
	if got, wantOut := strings.Join(out, ", "), "TCP/5432 instances, TCP/8011 instances, UDP/53 anywhere, TCP/53 anywhere, UDP/5353 anywhere, TCP/5353 anywhere, TCP/443 anywhere, TCP/6443 anywhere"; got != wantOut {
		t.Errorf("egress %s\nwant %s", got, wantOut)
	}

	// spec.network.clients narrows the database port to them, the
	// instances, the backup and restore Jobs and the operator.
	app := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop-frontend"}}}
	narrowed := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Network = &dbv1.NetworkSpec{Clients: []networkingv1.NetworkPolicyPeer{app}}
	})
	objs, err = desiredObjects(loadChart(t), narrowed, ValueOptions{OperatorNamespace: "operators", OperatorImage: testOperatorImage})
	if err != nil {
		t.Fatal(err)
	}
	np = &networkingv1.NetworkPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["NetworkPolicy/orders"].Object, np); err != nil {
		t.Fatal(err)
	}
	jobs := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelName: JobAppName, labelDatabase: "orders"}}}
	if wantFrom := []networkingv1.NetworkPolicyPeer{instances, jobs, app, operator}; !equality.Semantic.DeepEqual(np.Spec.Ingress[0].From, wantFrom) {
		t.Errorf("with clients, the database port is open to %+v\nwant %+v", np.Spec.Ingress[0].From, wantFrom)
	}
}

// TestChartPortsFollowTheEngine: the chart takes the port and its name from
// the engine's profile (values), not from a second table of its own.
func TestChartPortsFollowTheEngine(t *testing.T) {
	for _, e := range dbv1.Engines() {
		objs, err := desiredObjects(loadChart(t), newDB(e), ValueOptions{OperatorImage: testOperatorImage})
		if err != nil {
			t.Fatal(err)
		}
		want := engine.ProfileOf(e)
		sts := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["StatefulSet/orders"].Object, sts); err != nil {
			t.Fatal(err)
		}
		ports := sts.Spec.Template.Spec.Containers[0].Ports
		if !slices.ContainsFunc(ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == want.Port && p.Name == want.PortName }) {
			t.Errorf("%s: container ports %+v, want %d named %s", e, ports, want.Port, want.PortName)
		}
		svc := &corev1.Service{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["Service/orders-rw"].Object, svc); err != nil {
			t.Fatal(err)
		}
		if p := svc.Spec.Ports[0]; p.Port != want.Port || p.Name != want.PortName {
			t.Errorf("%s: -rw serves %d %s, want %d %s", e, p.Port, p.Name, want.Port, want.PortName)
		}
	}
}

// TestChartServesAgentMetrics: every engine's pod names the agent's
// metrics port (the one the agent listens on, which the PodMonitor
// scrapes by name) and gives the agent the Database's name and the
// monitoring account's Secret (the one the operator keeps), mounted and
// optional: the operator may create it after the pod.
func TestChartServesAgentMetrics(t *testing.T) {
	for _, e := range dbv1.Engines() {
		db := newDB(e)
		objs, err := desiredObjects(loadChart(t), db, ValueOptions{OperatorImage: testOperatorImage})
		if err != nil {
			t.Fatal(err)
		}
		sts := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["StatefulSet/orders"].Object, sts); err != nil {
			t.Fatal(err)
		}
		c := sts.Spec.Template.Spec.Containers[0]
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == metrics.Port && p.Name == "metrics" }) {
			t.Errorf("%s: container ports %+v, want %d named metrics", e, c.Ports, metrics.Port)
		}
		env := map[string]string{}
		for _, v := range c.Env {
			env[v.Name] = v.Value
		}
		if env["DATABASE_NAME"] != db.Name {
			t.Errorf("%s: DATABASE_NAME %q, want %q", e, env["DATABASE_NAME"], db.Name)
		}
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == env["MONITORING_DIR"] })
		if env["MONITORING_DIR"] == "" || i < 0 {
			t.Fatalf("%s: MONITORING_DIR %q is not a mount of %+v", e, env["MONITORING_DIR"], c.VolumeMounts)
		}
		j := slices.IndexFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
		if j < 0 {
			t.Fatalf("%s: no volume %s", e, c.VolumeMounts[i].Name)
		}
		sec := sts.Spec.Template.Spec.Volumes[j].Secret
		if sec == nil || sec.SecretName != monitoringSecretName(db) || !ptr.Deref(sec.Optional, false) {
			t.Errorf("%s: the monitoring volume is %+v, want Secret %s, optional", e, sts.Spec.Template.Spec.Volumes[j].VolumeSource, monitoringSecretName(db))
		}
	}
}

// TestPodDisruptionBudget: one voluntary disruption at a time; with
// synchronous replication, never one of the replicas a commit waits for
// (minAvailable: synchronousReplicas + 1), so a drain never stops writes.
// The pods' grace period leaves half for the primary's handover, which
// the agent is told; the StatefulSet's claims of removed instances follow
// deletionPolicy.
func TestPodDisruptionBudget(t *testing.T) {
	for _, tt := range []struct {
		name           string
		mutate         func(*dbv1.Database)
		maxUnavailable string
		minAvailable   string
	}{
		{"asynchronous", func(db *dbv1.Database) { db.Spec.Replicas = 3 }, "1", ""},
		{"synchronous, one of two replicas", func(db *dbv1.Database) {
			db.Spec.Replicas, db.Spec.Replication.Mode = 3, dbv1.ReplicationSynchronous
		}, "", "2"},
		{"synchronous, two of three replicas", func(db *dbv1.Database) {
			db.Spec.Replicas, db.Spec.Replication.Mode, db.Spec.Replication.SynchronousReplicas = 4, dbv1.ReplicationSynchronous, ptr.To[int32](2)
		}, "", "3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := desiredObjects(loadChart(t), newDB(dbv1.EnginePostgreSQL, tt.mutate), ValueOptions{OperatorImage: testOperatorImage})
			if err != nil {
				t.Fatal(err)
			}
			pdb := &policyv1.PodDisruptionBudget{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["PodDisruptionBudget/orders"].Object, pdb); err != nil {
				t.Fatal(err)
			}
			str := func(v *intstr.IntOrString) string {
				if v == nil {
					return ""
				}
				return v.String()
			}
			if str(pdb.Spec.MaxUnavailable) != tt.maxUnavailable || str(pdb.Spec.MinAvailable) != tt.minAvailable {
				t.Errorf("maxUnavailable %q, minAvailable %q; want %q, %q", str(pdb.Spec.MaxUnavailable), str(pdb.Spec.MinAvailable), tt.maxUnavailable, tt.minAvailable)
			}
			sts := &appsv1.StatefulSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKindName(objs)["StatefulSet/orders"].Object, sts); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if g := ptr.Deref(sts.Spec.Template.Spec.TerminationGracePeriodSeconds, 0); g != 60 || env["AGENT_HANDOVER_TIMEOUT"] != "30s" || env["AGENT_LEASE_DURATION"] != "15s" {
				t.Errorf("grace %d, handover %q, lease %q; want 60, 30s, 15s", g, env["AGENT_HANDOVER_TIMEOUT"], env["AGENT_LEASE_DURATION"])
			}
			if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
				t.Errorf("claim retention %+v, want Retain when scaled (deletionPolicy Retain)", p)
			}
		})
	}
}
