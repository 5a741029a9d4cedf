package serverlog

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"example.com/database-operator/tests/utils/logbuf"
)

// TestRelay: whole lines reach their Out, in order, however they were
// written; an overlong line comes in pieces, each a line; an ordinary file
// left where a pipe belongs is replaced; a writer opening the pipe never
// waits for a reader; Drain relays a writer's last lines, and returns once
// it closed the pipe or, when it holds it open, at the timeout.
func TestRelay(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b"), []byte("written while no agent read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := &logbuf.Buffer{}, &logbuf.Buffer{}
	relay, err := Start(dir, testr.New(t), Pipe{"a", a}, Pipe{"b", b})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "b")); err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
		t.Fatalf("the ordinary file was not replaced by a pipe: %v", err)
	}

	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	var w *os.File
	select {
	case w = <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("opening the pipe to write waited for a reader")
	}
	long := strings.Repeat("x", maxLine+10)
	for _, chunk := range []string{`{"message":"one`, `"}` + "\n" + `{"message":"two"}` + "\n", long + "\n"} {
		if _, err := w.WriteString(chunk); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	// Closed and opened again, as a restarted server does.
	w2, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.WriteString(`{"message":"three"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	w2.Close()

	want := `{"message":"one"}` + "\n" + `{"message":"two"}` + "\n" + long[:maxLine] + "\n" + long[maxLine:] + "\n" + `{"message":"three"}` + "\n"
	deadline := time.Now().Add(5 * time.Second)
	for a.String() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := a.String(); got != want {
		t.Fatalf("relayed %d bytes:\n%.200q\nwant %d bytes:\n%.200q", len(got), got, len(want), want)
	}
	if b.String() != "" {
		t.Errorf("the other pipe's Out got %q", b.String())
	}

	// The last lines of a server that is going away, and a writer that
	// never closes its end.
	last, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := os.OpenFile(filepath.Join(dir, "b"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := last.WriteString(`{"message":"PANIC at the end"}` + "\n" + `{"message":"without its newline"}`); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond) // after Drain began
		last.Close()
	}()
	start := time.Now()
	relay.Drain(2 * time.Second)
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("Drain returned after %s while a writer held a pipe, not at its timeout", took)
	}
	want += `{"message":"PANIC at the end"}` + "\n" + `{"message":"without its newline"}` + "\n"
	if got := a.String(); got != want {
		t.Errorf("after Drain, relayed:\n%.300q\nwant:\n%.300q", got, want)
	}
	// Stopped: a writer now fails at once rather than waiting.
	if w, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
		t.Error("the pipe is still read after Drain")
	}
}

// TestDrainEndsWhenTheWriterCloses: Drain does not wait out its timeout
// once the server closed its pipes.
func TestDrainEndsWhenTheWriterCloses(t *testing.T) {
	dir := t.TempDir()
	out := &logbuf.Buffer{}
	relay, err := Start(dir, testr.New(t), Pipe{"p", out})
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(filepath.Join(dir, "p"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("last\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	start := time.Now()
	relay.Drain(time.Minute)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Drain took %s after every writer closed", took)
	}
	if out.String() != "last\n" {
		t.Errorf("relayed %q", out.String())
	}
}

type failingWriter struct {
	fail    bool
	written int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.fail {
		return 0, errors.New("stdout is gone")
	}
	w.written += len(p)
	return len(p), nil
}

// TestPipeDrainedWhenOutFails: while the output refuses lines the relay
// keeps reading (dropping them), so the server never blocks on a full
// pipe; it writes again once the output takes lines.
// (mu is copyLines' own lock: the test flips the writer under it.)
func TestPipeDrainedWhenOutFails(t *testing.T) {
	var mu sync.Mutex
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &failingWriter{fail: true}
	var drops int
	done := make(chan error, 1)
	go func() { done <- copyLines(r, out, &mu, func(error) { drops++ }) }()
	line := []byte(strings.Repeat("x", 1023) + "\n")
	written := make(chan struct{})
	go func() {
		defer close(written)
		for range 1024 { // 1 MiB: sixteen times a pipe's buffer
			if _, err := w.Write(line); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer blocked: the relay stopped draining the pipe when its output failed")
	}
	mu.Lock()
	out.fail = false
	mu.Unlock()
	if _, err := w.Write(line); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Errorf("copyLines ended with %v, want EOF", err)
	}
	if drops != 1 {
		t.Errorf("%d drops reported, want 1 for one failing stretch", drops)
	}
	if out.written < len(line) {
		t.Errorf("%d bytes written once the output took lines again, want at least the last line's %d", out.written, len(line))
	}
}
