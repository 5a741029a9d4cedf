package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// followPeriod is how often a --wait looks again.
const followPeriod = time.Second

// follow polls a Database until done says so, printing its phase when it
// changes and every Event about it (or an object of its) as it comes:
// the operator reports each step of a switchover, failover or restore in
// an Event.
func (c *Clients) follow(ctx context.Context, out io.Writer, db *dbv1.Database, done func(*dbv1.Database) (bool, error)) error {
	seen := map[string]bool{}
	since := time.Now().Add(-2 * time.Second)
	phase := db.Status.Phase
	for {
		c.printEvents(ctx, out, db.Name, since, seen)
		cur, err := c.database(ctx, db.Name)
		if err != nil {
			return err
		}
		if cur.Status.Phase != phase {
			phase = cur.Status.Phase
			fmt.Fprintf(out, "%s  phase %s\n", time.Now().Format(time.TimeOnly), phase)
		}
		ok, err := done(cur)
		if err != nil || ok {
			if ok {
				c.printEvents(ctx, out, db.Name, since, seen)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after --timeout (phase %s, primary %s): %w", orDash(string(cur.Status.Phase)), orDash(cur.Status.CurrentPrimary), ctx.Err())
		case <-time.After(followPeriod):
		}
	}
}

// printEvents prints the Events regarding name (the Database, its Backups
// of the same name prefix, its pods) that are newer than since and not
// printed yet. A failed list is not fatal: the wait goes on.
func (c *Clients) printEvents(ctx context.Context, out io.Writer, name string, since time.Time, seen map[string]bool) {
	list, err := c.Kube.EventsV1().Events(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, e := range list.Items {
		at := e.EventTime.Time
		if at.IsZero() {
			at = e.DeprecatedLastTimestamp.Time
		}
		if seen[e.Name] || at.Before(since) || (e.Regarding.Name != name && !strings.HasPrefix(e.Regarding.Name, name+"-")) {
			continue
		}
		seen[e.Name] = true
		lines = append(lines, line{at, fmt.Sprintf("%s  %s/%s  %s: %s", at.Local().Format(time.TimeOnly), e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	for _, l := range lines {
		fmt.Fprintln(out, l.text)
	}
}
