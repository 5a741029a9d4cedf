// Package pitrcheck judges a point-in-time recovery by the writes a test
// made: a writer inserts rows one transaction at a time and notes when
// each was sent and acknowledged; a recovery to a moment T must have every
// row acknowledged before T and none sent after it (those in between may
// go either way).
package pitrcheck

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Write is one row the writer inserted.
type Write struct {
	ID          int64
	Sent, Acked time.Time
}

// Writer inserts rows into events (id bigserial, at timestamptz
// defaulting to clock_timestamp()) on its own session until stopped.
type Writer struct {
	halt, done chan struct{}
	mu         sync.Mutex
	writes     []Write
}

// Start starts a writer on conn; errorf reports a failed insert (the
// writer then stops).
func Start(ctx context.Context, conn *pgx.Conn, errorf func(format string, args ...any)) *Writer {
	return StartFunc(ctx, func(ctx context.Context) (id int64, err error) {
		err = conn.QueryRow(ctx, "INSERT INTO events DEFAULT VALUES RETURNING id").Scan(&id)
		return id, err
	}, errorf)
}

// StartFunc starts a writer calling insert, which inserts one row in its
// own transaction and returns its id (MariaDB's writers).
func StartFunc(ctx context.Context, insert func(context.Context) (int64, error), errorf func(format string, args ...any)) *Writer {
	w := &Writer{halt: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.halt:
				return
			default:
			}
			wr := Write{Sent: time.Now()}
			var err error
			if wr.ID, err = insert(ctx); err != nil {
				if ctx.Err() == nil {
					errorf("writer: %v", err)
				}
				return
			}
			wr.Acked = time.Now()
			w.mu.Lock()
			w.writes = append(w.writes, wr)
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

// Stop stops the writer and returns its writes.
func (w *Writer) Stop() []Write {
	close(w.halt)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// Sides counts the writes acknowledged before t and those sent after it.
func Sides(writes []Write, t time.Time) (before, after int) {
	for _, w := range writes {
		switch {
		case w.Acked.Before(t):
			before++
		case w.Sent.After(t):
			after++
		}
	}
	return before, after
}

// Judge compares the rows a recovery to t holds with the writes: lost
// counts those acknowledged before t and missing, leaked those sent after
// t and present.
func Judge(writes []Write, present []int64, t time.Time) (lost, leaked int) {
	have := make(map[int64]bool, len(present))
	for _, id := range present {
		have[id] = true
	}
	for _, w := range writes {
		switch {
		case w.Acked.Before(t) && !have[w.ID]:
			lost++
		case w.Sent.After(t) && have[w.ID]:
			leaked++
		}
	}
	return lost, leaked
}

// Rows reads the ids in events.
func Rows(ctx context.Context, conn *pgx.Conn) ([]int64, error) {
	rows, err := conn.Query(ctx, "SELECT id FROM events")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// Loss compares what a recovery to the latest moment holds with the
// writes: lost counts the acknowledged writes after the last one present,
// holes those missing before it (none may be), and point is the recovery
// point: how long before the last acknowledged write the last recovered
// one was acknowledged (0 when none was lost).
func Loss(writes []Write, present []int64) (lost, holes int, point time.Duration) {
	have := make(map[int64]bool, len(present))
	for _, id := range present {
		have[id] = true
	}
	last := -1 // the last write present
	for i, w := range writes {
		if have[w.ID] {
			last = i
		}
	}
	for i, w := range writes {
		switch {
		case i > last:
			lost++
		case !have[w.ID]:
			holes++
		}
	}
	if lost > 0 {
		from := writes[0].Sent
		if last >= 0 {
			from = writes[last].Acked
		}
		point = writes[len(writes)-1].Acked.Sub(from)
	}
	return lost, holes, point
}
