package pitrcheck

import (
	"testing"
	"time"
)

func TestLossAndJudge(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	var writes []Write
	for i := range 10 {
		at := t0.Add(time.Duration(i) * time.Second)
		writes = append(writes, Write{ID: int64(i + 1), Sent: at, Acked: at.Add(100 * time.Millisecond)})
	}
	if lost, holes, point := Loss(writes, []int64{1, 2, 3, 4, 5, 6, 7}); lost != 3 || holes != 0 || point != 3*time.Second {
		t.Errorf("a prefix: lost %d, holes %d, point %s", lost, holes, point)
	}
	if _, holes, _ := Loss(writes, []int64{1, 2, 4, 5}); holes != 1 {
		t.Errorf("a hole not counted: %d", holes)
	}
	if lost, _, point := Loss(writes, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}); lost != 0 || point != 0 {
		t.Errorf("nothing lost: %d, %s", lost, point)
	}
	// T between writes 5 and 6: 1..5 acknowledged before, 6.. sent after.
	at := t0.Add(4*time.Second + 500*time.Millisecond)
	if lost, leaked := Judge(writes, []int64{1, 2, 3, 4, 5}, at); lost != 0 || leaked != 0 {
		t.Errorf("exactly to T: lost %d, leaked %d", lost, leaked)
	}
	if lost, leaked := Judge(writes, []int64{1, 2, 3, 4, 6}, at); lost != 1 || leaked != 1 {
		t.Errorf("one lost, one leaked: %d, %d", lost, leaked)
	}
	if before, after := Sides(writes, at); before != 5 || after != 5 {
		t.Errorf("sides %d, %d", before, after)
	}
}
