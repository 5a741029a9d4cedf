// Package poll waits in tests for a condition the cluster reaches in its
// own time.
package poll

import (
	"testing"
	"time"
)

// Eventually calls cond every interval until it returns "" (done) or
// timeout passes, then fails the test with the last thing cond said.
func Eventually(t testing.TB, interval, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(interval)
	}
	t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
}
