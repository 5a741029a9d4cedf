package plugin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
)

// logSource is one pod's log, its lines timestamped (timestamps=true).
type logSource struct {
	Name string
	R    io.Reader
}

// logCursor is the next line of a source.
type logCursor struct {
	src  logSource
	rd   *bufio.Reader
	ts   time.Time
	text string
	ok   bool
	err  error
}

// next reads the next line; a line without a timestamp keeps the
// previous one's, so it stays after it.
func (c *logCursor) next() {
	line, err := c.rd.ReadString('\n')
	if line == "" && err != nil {
		c.ok = false
		if !errors.Is(err, io.EOF) {
			c.err = err
		}
		return
	}
	ts, text, ok := splitTimestamp(strings.TrimRight(line, "\r\n"))
	if ok {
		c.ts = ts
	}
	c.text, c.ok = text, true
}

// mergeLogs reads sources to their ends and emits their lines in time
// order, their timestamps stripped; lines of the same time in the order
// of sources. It returns the sources a read failed on, with the errors;
// their lines up to the failure are emitted.
func mergeLogs(sources []logSource, emit func(name, text string)) map[string]error {
	cursors := make([]*logCursor, len(sources))
	for i, s := range sources {
		cursors[i] = &logCursor{src: s, rd: bufio.NewReader(s.R)}
		cursors[i].next()
	}
	for {
		var first *logCursor
		for _, c := range cursors {
			if c.ok && (first == nil || c.ts.Before(first.ts)) {
				first = c
			}
		}
		if first == nil {
			break
		}
		emit(first.src.Name, first.text)
		first.next()
	}
	failed := map[string]error{}
	for _, c := range cursors {
		if c.err != nil {
			failed[c.src.Name] = c.err
		}
	}
	return failed
}

// followLogs reads every source at once and prints each line as it comes,
// until they end or ctx does. A source that fails is told on the error
// stream, while the others go on.
func followLogs(ctx context.Context, sources []logSource, p *logPrinter) {
	var wg sync.WaitGroup
	for _, s := range sources {
		wg.Go(func() {
			rd := bufio.NewReader(s.R)
			for {
				line, err := rd.ReadString('\n')
				if line != "" {
					_, text, _ := splitTimestamp(strings.TrimRight(line, "\r\n"))
					p.line(s.Name, text)
				}
				if err != nil {
					if !errors.Is(err, io.EOF) && ctx.Err() == nil {
						p.failed(s.Name, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
}
