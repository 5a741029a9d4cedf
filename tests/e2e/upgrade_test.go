package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/controller"
)

// TestUpgradeRollsAFewDatabasesAtATime: an operator upgrade to a new image
// changes every Database's pod template at once (the agent's image). With
// --max-concurrent-rollouts=1 the Databases are restarted one after the
// other: no Database's pod goes down before the one before it is back.
func TestUpgradeRollsAFewDatabasesAtATime(t *testing.T) {
	d := dialects[0]
	var dbs []*dbv1.Database
	for i := range 3 {
		dbs = append(dbs, createDatabase(t, fmt.Sprintf("up%d", i), d.engine, d.version, 1))
	}
	first := map[string]string{} // the pods' UIDs before the upgrade
	for _, db := range dbs {
		waitRunning(t, db, 1, 5*time.Minute)
		p, err := cs.CoreV1().Pods(db.Namespace).Get(context.Background(), db.Name+"-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first[db.Name] = string(p.UID)
	}

	// Each Database's window: from its old pod gone to its new pod ready.
	var mu sync.Mutex
	windows := map[string]*[2]time.Time{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			// One time for the whole poll: the Databases are read one after
			// another, and a Database read later in the same poll must not
			// look as if it came back after one read earlier went down
			// (CI saw 13 ms of that skew). The resolution is one poll.
			now := time.Now()
			for _, db := range dbs {
				p, err := cs.CoreV1().Pods(db.Namespace).Get(context.Background(), db.Name+"-0", metav1.GetOptions{})
				mu.Lock()
				w := windows[db.Name]
				switch {
				case w == nil && (err != nil || string(p.UID) != first[db.Name] || !p.DeletionTimestamp.IsZero()):
					windows[db.Name] = &[2]time.Time{now}
				case w != nil && w[1].IsZero() && err == nil && string(p.UID) != first[db.Name] && podReady(p):
					w[1] = now
				}
				mu.Unlock()
			}
		}
	}()

	restartOperatorWith(t, func(o *controller.Options) { o.Values.OperatorImage, o.ConcurrentRollouts = operatorImageNext, 1 })
	eventually(t, 5*time.Minute, "every Database restarted on the new image", func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, db := range dbs {
			if w := windows[db.Name]; w == nil || w[1].IsZero() {
				return db.Name + " not restarted and back yet"
			}
		}
		return ""
	})
	close(stop)
	<-done
	var order [][2]time.Time
	for _, db := range dbs {
		order = append(order, *windows[db.Name])
		t.Logf("%s down from %s to %s", db.Name, windows[db.Name][0].Format(time.StampMilli), windows[db.Name][1].Format(time.StampMilli))
	}
	slices.SortFunc(order, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	for i := 1; i < len(order); i++ {
		if order[i][0].Before(order[i-1][1]) {
			t.Errorf("two Databases restarted at once: one went down at %s, before the one before it was back at %s",
				order[i][0].Format(time.StampMilli), order[i-1][1].Format(time.StampMilli))
		}
	}
}
