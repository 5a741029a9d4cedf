package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/controller"
)

// Routine operations are faults too: the most common things done to a
// database in Kubernetes (a pod deleted, evicted by a drain, a scale-down,
// a Database re-created over kept volumes) under the write-history
// checker, with writers on long-lived sessions as well as one connection
// per write, through -rw and straight to the pods' addresses.

// kubectlRun runs kubectl against the cluster, as a user would.
func kubectlRun(t testing.TB, ns string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestPrimaryPodDeleted: `kubectl delete pod` of the primary, the default
// grace period. Its agent fences the server (every session, the
// long-lived ones too), waits until a replica has every acknowledged
// write, releases the primary Lease, and the operator promotes that
// replica at once: no second writer, no acknowledged write lost with
// asynchronous replication, and the former primary comes back as a
// replica. (Before the agent handed over, a PostgreSQL smart shutdown let
// open sessions commit while a replica was promoted beside it.)
func TestPrimaryPodDeleted(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) { primaryPodDeleted(t, d, 2) })
	}
}

// BenchmarkPrimaryPodDeleted repeats TestPrimaryPodDeleted (`make
// bench-faults`) on three instances.
func BenchmarkPrimaryPodDeleted(b *testing.B) {
	benchRuns(b, "primary pod deleted (kubectl delete pod, default grace)", func(b *testing.B, d dialect) faultRun {
		return primaryPodDeleted(b, d, 3)
	})
}

func primaryPodDeleted(t testing.TB, d dialect, n int32) faultRun {
	return stopPrimary(t, d, "del", n, func(db *dbv1.Database, pod string) {
		kubectlRun(t, db.Namespace, "delete", "pod", pod, "--wait=false")
	})
}

// TestPrimaryEvicted: the primary evicted through the Eviction API (what
// `kubectl drain` does for each pod), and a node drained with the primary
// on it: the PodDisruptionBudget admits the eviction, the pod hands its
// role over before it goes, and while its replacement is not back, no
// second instance may be evicted.
func TestPrimaryEvicted(t *testing.T) {
	fullTier(t)
	for _, d := range dialects {
		t.Run(d.name()+"/eviction", func(t *testing.T) {
			stopPrimary(t, d, "evict", 3, func(db *dbv1.Database, pod string) {
				evict(t, db.Namespace, pod)
				// The replacement is not ready yet: a second eviction would
				// take two instances down at once.
				err := cs.PolicyV1().Evictions(db.Namespace).Evict(context.Background(),
					&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-1"}})
				if !apierrors.IsTooManyRequests(err) {
					t.Errorf("evicting a second instance while the first is away: %v, want it refused by the PodDisruptionBudget", err)
				}
			})
		})
		t.Run(d.name()+"/drain", func(t *testing.T) {
			stopPrimary(t, d, "drain", 3, func(db *dbv1.Database, _ string) {
				// Only this Database's primary: the process node is the
				// cluster's only node, so its replacement waits, Pending,
				// until the node is uncordoned.
				t.Cleanup(func() { kubectlRun(t, db.Namespace, "uncordon", nodeName) })
				go func() {
					time.Sleep(20 * time.Second)
					kubectlRun(t, db.Namespace, "uncordon", nodeName)
				}()
				kubectlRun(t, db.Namespace, "drain", nodeName, "--pod-selector=database.example.com/role=primary,app.kubernetes.io/instance="+db.Name,
					"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
			})
		})
	}
}

// evict evicts pod through the Eviction API, again while the
// PodDisruptionBudget does not admit it yet (its status is the controller
// manager's), as kubectl drain does.
func evict(t testing.TB, ns, pod string) {
	t.Helper()
	eventually(t, time.Minute, "the eviction of "+pod+" admitted", func() string {
		err := cs.PolicyV1().Evictions(ns).Evict(context.Background(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}})
		if err != nil {
			return err.Error()
		}
		return ""
	})
}

// TestPrimaryPodForceDeleted: `kubectl delete pod --grace-period=0
// --force`: the pod is gone from the API at once and its processes are
// killed. That is a crash: no handover, no second writer; the pod made
// again on the same volume takes the role back once its earlier
// incarnation's Lease ran out (the operator promotes no replica that may
// lack its last writes meanwhile), and nothing acknowledged is lost.
func TestPrimaryPodForceDeleted(t *testing.T) {
	fullTier(t)
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open := haDatabase(t, d, "force", 3)
			defer func() { _ = k8s.Delete(context.Background(), db) }()
			ns, old := db.Namespace, db.Name+"-0"
			pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), old, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			oldServer := old + "@" + string(pod.UID)
			writes := watchWrites(t, d, db, open, 30*time.Second, old)
			time.Sleep(2 * time.Second)
			writes.faultNow()
			kubectlRun(t, ns, "delete", "pod", old, "--grace-period=0", "--force", "--wait=false")
			// The pod made again, on the same volume, takes the role back
			// once its earlier incarnation's Lease ran out, or a replica
			// does if it cannot: either is another server.
			writes.waitRWFrom(oldServer, 3*time.Minute)
			time.Sleep(time.Second)
			res := writes.stop(oldServer)
			final := waitRunning(t, db, 3, 3*time.Minute)
			t.Logf("%s: the primary is %s after its pod was deleted forcibly", d.name(), final.Status.CurrentPrimary)
			writes.lost(&res, open(podIP(t, ns, final.Status.CurrentPrimary)), old)
		})
	}
}

// stopPrimary deletes the primary's pod with del under the checker, and
// requires a planned handover: at once, no acknowledged write lost.
func stopPrimary(t testing.TB, d dialect, name string, n int32, del func(db *dbv1.Database, pod string)) faultRun {
	db, open := haDatabase(t, d, name, n)
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns, old := db.Namespace, db.Name+"-0"
	oldIP := podIP(t, ns, old)
	writes := watchWrites(t, d, db, open, 30*time.Second, old)
	time.Sleep(2 * time.Second) // the writers are under way
	writes.faultNow()
	del(db, old)
	got := waitFailover(t, db, old, 2*time.Minute)
	writes.waitRW(oldIP, time.Minute)
	time.Sleep(time.Second) // writes on the new primary
	res := writes.stop(old)
	final := waitRunning(t, db, n, 3*time.Minute)
	writes.lost(&res, open(podIP(t, ns, final.Status.CurrentPrimary)), old)
	if res.lost > 0 {
		t.Errorf("%d acknowledged writes lost in a planned handover (a replica was healthy)", res.lost)
	}
	if f := got.Status.LastFailover; f == nil || !strings.Contains(f.Reason, "planned handover") {
		t.Errorf("last failover %+v, want a planned handover", f)
	}
	wantEvents(t, db, "PlannedHandover")
	t.Logf("%s: -rw writable %s after the primary's pod was asked to stop", d.name(), res.toRW.Round(time.Millisecond))
	return res
}

// TestScaleDownMovesThePrimary: three instances, the primary on the
// highest ordinal (a switchover put it there), scaled to one: the
// operator switches over to instance 0 before the StatefulSet shrinks,
// so the primary is never deleted, writes go on with no failover and no
// acknowledged write lost, and the removed instances' claims follow
// deletionPolicy (Delete here).
func TestScaleDownMovesThePrimary(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	engines := dialects[:1]
	if fullTierOn() {
		engines = dialects
	}
	for _, d := range engines {
		t.Run(d.name(), func(t *testing.T) { scaleDown(t, d, 1) })
		if fullTierOn() {
			t.Run(d.name()+"/to two", func(t *testing.T) { scaleDown(t, d, 2) })
		}
	}
}

// BenchmarkScaleDown repeats the scale-down from three instances to one
// with the primary on the highest ordinal (`make bench-faults`).
func BenchmarkScaleDown(b *testing.B) {
	benchRuns(b, "scale 3→1, the primary on ordinal 2", func(b *testing.B, d dialect) faultRun { return scaleDown(b, d, 1) })
}

func scaleDown(t testing.TB, d dialect, to int32) faultRun {
	db, open := haDatabase(t, d, "scale", 3)
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns, top := db.Namespace, db.Name+"-2"
	updateDatabase(t, db, func(db *dbv1.Database) { db.Spec.Primary = top })
	eventually(t, 3*time.Minute, top+" the primary behind -rw", func() string { return primaryBehindRW(t, db, top) })
	waitRunning(t, db, 3, 3*time.Minute)
	replicasFollow(t, db, open, top, 3, 1000)
	writes := watchWrites(t, d, db, open, 30*time.Second, top)
	time.Sleep(2 * time.Second)
	writes.faultNow()
	updateDatabase(t, db, func(db *dbv1.Database) { db.Spec.Primary, db.Spec.Replicas = "", to })
	eventually(t, 3*time.Minute, fmt.Sprintf("scaled to %d, the primary moved first", to), func() string {
		got := k8sDatabase(t, db)
		if got.Status.CurrentPrimary == top || got.Status.Replicas != to {
			return fmt.Sprintf("primary %s, %d instances", got.Status.CurrentPrimary, got.Status.Replicas)
		}
		return ""
	})
	final := waitRunning(t, db, to, 3*time.Minute)
	time.Sleep(time.Second)
	res := writes.stop(top)
	writes.lost(&res, open(podIP(t, ns, final.Status.CurrentPrimary)), "")
	if final.Status.LastFailover != nil {
		t.Errorf("the scale-down failed over: %+v", final.Status.LastFailover)
	}
	wantEvents(t, db, "ScaleDownSwitchover")
	eventually(t, 2*time.Minute, "the removed instances' claims deleted (deletionPolicy Delete)", func() string {
		for i := to; i < 3; i++ {
			if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), fmt.Sprintf("data-%s-%d", db.Name, i), metav1.GetOptions{}); err == nil {
				return fmt.Sprintf("data-%s-%d still there", db.Name, i)
			}
		}
		return ""
	})
	return res
}

// replicasFollow waits until every instance other than primary is ready
// and has applied a row (id) written on primary now: status may count a
// replica ready while it is restarted to follow a new primary (PostgreSQL
// rewinds a former one), and a fault injected then finds no replica.
func replicasFollow(t testing.TB, db *dbv1.Database, open func(string) *sql.DB, primary string, instances, id int) {
	t.Helper()
	ns, note := db.Namespace, fmt.Sprintf("follow-%d", id)
	c := open(podIP(t, ns, primary))
	insert(t, c, id, id, note)
	_ = c.Close()
	for i := range instances {
		replica := fmt.Sprintf("%s-%d", db.Name, i)
		if replica == primary {
			continue
		}
		eventually(t, 3*time.Minute, replica+" following "+primary, func() string {
			if p, err := cs.CoreV1().Pods(ns).Get(context.Background(), replica, metav1.GetOptions{}); err != nil || !podReady(p) {
				return replica + " not ready"
			}
			return atPod(t, open, ns, replica, func(c *sql.DB) string {
				if n, err := notes(c); err != nil || n[note] != 1 {
					return fmt.Sprintf("%v (%v)", n, err)
				}
				return ""
			})
		})
	}
}

// fullTierOn: E2E_FULL is set (make test-faults).
func fullTierOn() bool { return fullTierSet }

// TestRecreatedOverKeptVolumes: a Database of three instances whose
// primary moved to instance 2, which then took writes its replicas never
// received (cut off from them), is deleted with deletionPolicy Retain
// and created again. Instance 0 must not start as the primary: every
// instance starts read-only on its own data, and the operator makes
// instance 2, the most advanced, the primary. Every acknowledged write is
// there.
func TestRecreatedOverKeptVolumes(t *testing.T) {
	fullTier(t)
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			keep := func(db *dbv1.Database) { db.Spec.DeletionPolicy = dbv1.DeletionPolicyRetain }
			db, open := haDatabase(t, d, "kept", 3, keep)
			ns, top := db.Namespace, db.Name+"-2"
			insert(t, open(resolveOne(t, db.Name+"-rw", ns)), 1, 20, "before")
			updateDatabase(t, db, func(db *dbv1.Database) { db.Spec.Primary = top })
			eventually(t, 3*time.Minute, top+" the primary behind -rw", func() string { return primaryBehindRW(t, db, top) })
			waitRunning(t, db, 3, 3*time.Minute)
			replicasFollow(t, db, open, top, 3, 1000)
			// The replicas stop receiving; the primary goes on taking writes.
			for _, replica := range []string{db.Name + "-0", db.Name + "-1"} {
				if err := node.Partition(ns, replica); err != nil {
					t.Fatal(err)
				}
			}
			primary := open(podIP(t, ns, top))
			insert(t, primary, 21, 40, "only on the last primary")
			_ = primary.Close()
			if err := k8s.Delete(context.Background(), db); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Minute, "the Database and its pods gone", func() string {
				pods, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + db.Name})
				if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), &dbv1.Database{}); err == nil || len(pods.Items) > 0 {
					return fmt.Sprintf("%d pods left", len(pods.Items))
				}
				return ""
			})
			for _, replica := range []string{db.Name + "-0", db.Name + "-1"} {
				_ = node.Heal(ns, replica)
			}
			again := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Name}, Spec: db.Spec}
			again.Spec.Primary = ""
			if err := k8s.Create(context.Background(), again); err != nil {
				t.Fatal(err)
			}
			got := waitRunning(t, again, 3, 5*time.Minute)
			if got.Status.CurrentPrimary != top {
				t.Errorf("the re-created Database's primary is %s, want %s (the most advanced kept volume)", got.Status.CurrentPrimary, top)
			}
			wantEvents(t, again, "KeptVolumesFound", "KeptVolumesAdopted")
			user, password, database := appCredentials(t, again)
			c := d.open(t, resolveOne(t, db.Name+"-rw", ns), user, password, database)
			ids := make([]int, 40)
			for i := range ids {
				ids[i] = i + 1
			}
			noAckedWriteLost(t, c, ids)
		})
	}
}

// TestInterruptedFailoverUndone: the primary is cut off, and the operator
// is killed right after it handed the primary Lease to the replica, before
// recording or promoting it; the old primary comes back (fenced: its agent
// lost the Lease) before a new operator starts. Nobody takes writes then.
// The new operator finishes or undoes the move within a bounded time: the
// old primary holds writes the replica never received (a client on its
// machine wrote during the cut), so it is made the primary again and
// nothing is lost.
func TestInterruptedFailoverUndone(t *testing.T) {
	fullTier(t)
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open := haDatabase(t, d, "undo", 2)
			defer func() { _ = k8s.Delete(context.Background(), db) }()
			ns, old := db.Namespace, db.Name+"-0"
			writes := watchWrites(t, d, db, open, 40*time.Second, old)
			time.Sleep(2 * time.Second)
			killed := op.killAfter(leaseWrite(db, old, db.Name+"-1"))
			if err := node.Partition(ns, old); err != nil {
				t.Fatal(err)
			}
			writes.faultNow()
			select {
			case <-killed:
			case <-time.After(2 * time.Minute):
				op.disarm()
				t.Fatal("the operator never handed the Lease over")
			}
			if err := node.Heal(ns, old); err != nil {
				t.Fatal(err)
			}
			time.Sleep(15 * time.Second) // the old primary back, fenced
			if err := op.restart(); err != nil {
				t.Fatal(err)
			}
			got := waitRunning(t, db, 2, 3*time.Minute)
			writes.waitRW("", time.Minute)
			res := writes.stop("")
			// Finished (the replica caught up with the old primary, which
			// MariaDB's replica does from a fenced server) or undone (a
			// PostgreSQL former primary started fenced serves no
			// replication): either way nothing is lost.
			writes.lost(&res, open(podIP(t, ns, got.Status.CurrentPrimary)), "")
			events := eventsAbout(t, ns, db.Name)
			if !slices.ContainsFunc(events, func(e string) bool {
				return strings.Contains(e, "FailoverUndone") || strings.Contains(e, "FailoverResumed")
			}) {
				t.Errorf("no FailoverUndone or FailoverResumed Event: %v", events)
			}
			t.Logf("primary %s; -rw writable %s after the cut", got.Status.CurrentPrimary, res.toRW.Round(time.Millisecond))
		})
	}
}

// TestConnectionTableFull: every connection the primary takes is in use
// (the superusers' reserved ones too). Its agent's checks are refused: the
// server answered, so it is not taken for a hung one, and it is neither
// restarted nor failed over.
func TestConnectionTableFull(t *testing.T) {
	fullTier(t)
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, _ := haDatabase(t, d, "full", 2, func(db *dbv1.Database) {
				db.Spec.Parameters = map[string]string{"max_connections": "12"}
			})
			ns, primary := db.Namespace, db.Name+"-0"
			before, err := cs.CoreV1().Pods(ns).Get(context.Background(), primary, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var held []*sql.Conn
			su := d.superuser(t, db, podIP(t, ns, primary))
			su.SetMaxOpenConns(100)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				c, err := su.Conn(ctx)
				cancel()
				if err != nil {
					t.Logf("the connection table is full after %d sessions: %v", len(held), err)
					break
				}
				if err := c.PingContext(context.Background()); err != nil {
					break
				}
				held = append(held, c)
				if len(held) > 50 {
					t.Fatal("the server took 50 sessions: max_connections was not applied")
				}
			}
			time.Sleep(3 * agentLeaseDuration) // beyond the Lease: a hung server is stopped by then
			for _, c := range held {
				_ = c.Close()
			}
			after, err := cs.CoreV1().Pods(ns).Get(context.Background(), primary, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if restarts(after) != restarts(before) || after.UID != before.UID {
				t.Errorf("the primary was restarted while its connection table was full (restarts %d → %d)", restarts(before), restarts(after))
			}
			if log, _ := node.Logs(ns, primary, "database", false); strings.Contains(string(log), "stopped the server") {
				t.Errorf("the agent stopped a healthy primary whose connection table was full:\n%s", tail(string(log), 2000))
			}
			if got := waitRunning(t, db, 2, time.Minute); got.Status.CurrentPrimary != primary || got.Status.LastFailover != nil {
				t.Errorf("primary %s, last failover %+v; want %s, none", got.Status.CurrentPrimary, got.Status.LastFailover, primary)
			}
		})
	}
}

// agentLeaseDuration is the operator's primary Lease duration in these
// tests (the default).
const agentLeaseDuration = 15 * time.Second

// TestCrashDurability: the MariaDB primary's server is killed (SIGKILL)
// under writes, as a crash would. Its agent starts it again; every write
// it acknowledged is there (sync_binlog = 1 and
// innodb_flush_log_at_trx_commit = 1 by default, and spec.parameters may
// not lower them).
func TestCrashDurability(t *testing.T) {
	fullTier(t)
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	d := dialects[1]
	// A long failover delay: the server is back, as the same primary, well
	// before it (a failover could lose what the replica had not received,
	// which is not what this test is about).
	db, open := haDatabase(t, d, "crash", 2, func(db *dbv1.Database) { db.Spec.Failover.DelaySeconds = ptr.To[int32](60) })
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns, primary := db.Namespace, db.Name+"-0"
	writes := watchWrites(t, d, db, open, 20*time.Second, primary)
	time.Sleep(3 * time.Second)
	writes.faultNow()
	if out, err := node.Exec(ns, primary, "database", []string{"sh", "-c", `kill -KILL "$(cat "$DATADIR/$(hostname).pid")"`}); err != nil {
		t.Fatalf("killing the server: %v: %s", err, out)
	}
	got := waitRunning(t, db, 2, 3*time.Minute)
	writes.waitRW("", 2*time.Minute)
	res := writes.stop("")
	writes.lost(&res, open(podIP(t, ns, got.Status.CurrentPrimary)), "")
	if res.lost > 0 {
		t.Errorf("%d acknowledged writes lost to a crash of the server", res.lost)
	}
}

// restarts counts the restarts of a pod's containers.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// TestStuckRolloutLetsOthersRoll: two Databases roll a change at once with
// one rollout slot (--max-concurrent-rollouts=1). The first one's new pod
// template does not start (a setting its server refuses): once its
// restarted instance has not become ready for --rollout-ready-timeout, the
// rollout is reported stuck (RolloutStuck, in an Event and the
// conditions) and the slot goes to the second Database, which rolls its
// change out. Fixing the setting then finishes the first one's rollout.
// Neither fails over.
func TestStuckRolloutLetsOthersRoll(t *testing.T) {
	fullTier(t)
	d := dialects[0]
	a, _ := haDatabase(t, d, "stuck", 2)
	b, _ := haDatabase(t, d, "rolls", 2)
	restartOperatorWith(t, func(o *controller.Options) { o.ConcurrentRollouts, o.RolloutReadyTimeout = 1, 30*time.Second })
	// A value PostgreSQL refuses at start: the restarted replica crash-loops.
	updateDatabase(t, a, func(db *dbv1.Database) { db.Spec.Parameters = map[string]string{"shared_buffers": "999TB"} })
	eventually(t, time.Minute, a.Name+"'s rollout under way", func() string {
		if got := k8sDatabase(t, a); got.Status.Phase != dbv1.PhaseUpdating && got.Status.Phase != dbv1.PhaseDegraded {
			return "phase " + string(got.Status.Phase)
		}
		return ""
	})
	updateDatabase(t, b, func(db *dbv1.Database) {
		db.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	})
	eventually(t, 3*time.Minute, a.Name+" reported stuck", func() string {
		got := k8sDatabase(t, a)
		c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionProgressing)
		if c == nil || c.Reason != dbv1.ReasonRolloutStuck {
			return fmt.Sprintf("Progressing %+v", c)
		}
		return ""
	})
	wantEvents(t, a, dbv1.ReasonRolloutStuck)
	rolled := func(db *dbv1.Database, cpu string) string {
		sts, err := cs.AppsV1().StatefulSets(db.Namespace).Get(context.Background(), db.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for i := range 2 {
			p, err := cs.CoreV1().Pods(db.Namespace).Get(context.Background(), fmt.Sprintf("%s-%d", db.Name, i), metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if p.Labels["controller-revision-hash"] != sts.Status.UpdateRevision || !podReady(p) ||
				(cpu != "" && p.Spec.Containers[0].Resources.Requests.Cpu().String() != cpu) {
				return fmt.Sprintf("%s not ready on revision %s", p.Name, sts.Status.UpdateRevision)
			}
		}
		return ""
	}
	eventually(t, 3*time.Minute, b.Name+" rolled out while "+a.Name+" is stuck", func() string { return rolled(b, "150m") })
	waitRunning(t, b, 2, time.Minute)
	updateDatabase(t, a, func(db *dbv1.Database) { db.Spec.Parameters = nil })
	eventually(t, 3*time.Minute, a.Name+" rolled out once fixed", func() string { return rolled(a, "") })
	for _, db := range []*dbv1.Database{a, b} {
		if got := waitRunning(t, db, 2, 2*time.Minute); got.Status.LastFailover != nil {
			t.Errorf("%s failed over during its rollout: %+v", db.Name, got.Status.LastFailover)
		}
	}
}
