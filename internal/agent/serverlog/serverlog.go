// Package serverlog relays the log files a database server writes to the
// container's output. PostgreSQL writes JSON logs (jsonlog) only through
// its logging collector, and the collector only writes files: the agent
// makes each file a named pipe before the server starts and copies what
// comes through it, line by line, to its own standard output, where
// kubectl logs and every log shipper read a container's log.
package serverlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// Pipe is a file the server writes, and where its lines go.
type Pipe struct {
	Name string
	Out  io.Writer
}

// PostgresPipes are the files PostgreSQL's logging collector writes in
// log_directory with log_filename = 'postgresql' (postgres-start.sh sets
// both): the JSON log, relayed to stdout, and the plain one the collector
// always opens (its own few lines, and whatever a process writes to its
// standard error without the logging protocol), relayed to stderr.
func PostgresPipes(stdout, stderr io.Writer) []Pipe {
	return []Pipe{{Name: "postgresql.json", Out: stdout}, {Name: "postgresql", Out: stderr}}
}

// maxLine bounds one relayed line: a longer one (a huge statement in an
// error) goes out in pieces of this size, each on a line of its own,
// rather than holding the agent's memory or the server's log hostage.
const maxLine = 256 << 10

// Relay copies the lines of named pipes to their Outs.
type Relay struct {
	readers, writers []*os.File
	done             sync.WaitGroup
}

// Start makes dir and each named pipe in it, then copies whole lines from
// every pipe to its Out until Drain. It returns once the pipes exist and
// are read, so the server can be started after it (and should not be
// pointed at them if it fails: a server opening a pipe nobody reads waits
// forever, so Start removes the pipes it made before it returns an error).
//
// Each pipe is read through one handle, and held open through a second
// one for writing: the reader sees no end while the server closes the
// file and opens it again (a restart, a log rotation), and the server's
// open never waits. Nothing stops the reading but Drain: a server blocks
// once a pipe's buffer is full.
func Start(dir string, log logr.Logger, pipes ...Pipe) (*Relay, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the server's log directory: %w", err)
	}
	r := &Relay{}
	for _, p := range pipes {
		rd, wr, err := openPipe(filepath.Join(dir, p.Name))
		if err != nil {
			r.close()
			for _, p := range pipes {
				_ = os.Remove(filepath.Join(dir, p.Name))
			}
			return nil, err
		}
		r.readers, r.writers = append(r.readers, rd), append(r.writers, wr)
	}
	var mu sync.Mutex // one line at a time, whatever the Out
	for i, rd := range r.readers {
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			// Closed when the copy ends: a server writing to a pipe nobody
			// reads gets an error rather than waiting.
			defer rd.Close()
			dropped := func(err error) { log.Error(err, "dropping the server's log lines", "file", rd.Name()) }
			if err := copyLines(rd, pipes[i].Out, &mu, dropped); !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				log.Error(err, "relaying the server's log stopped", "file", rd.Name())
			}
		}()
	}
	return r, nil
}

// Drain relays what the server still writes until it has closed every
// pipe (a logging collector outlives its server by a moment, and writes
// the last lines: a crash's), or until timeout; then the relay stops.
func (r *Relay) Drain(timeout time.Duration) {
	for _, w := range r.writers {
		w.Close()
	}
	finished := make(chan struct{})
	go func() {
		r.done.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(timeout):
		for _, rd := range r.readers {
			rd.Close() // a writer still holds a pipe: stop reading it
		}
		<-finished
	}
}

func (r *Relay) close() {
	for _, f := range append(r.readers, r.writers...) {
		f.Close()
	}
}

// openPipe makes path a named pipe (replacing an ordinary file a server
// wrote there while no agent had made the pipe) and opens it for reading
// (without waiting for a writer) and for writing.
func openPipe(path string) (rd, wr *os.File, err error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeNamedPipe {
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("replacing %s with a named pipe: %w", path, err)
		}
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, nil, fmt.Errorf("making the named pipe %s: %w", path, err)
	}
	if rd, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
		return nil, nil, fmt.Errorf("opening the named pipe %s: %w", path, err)
	}
	if wr, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
		rd.Close()
		return nil, nil, fmt.Errorf("opening the named pipe %s: %w", path, err)
	}
	return rd, wr, nil
}

// copyLines copies r to out one whole line per write, so lines from the
// pipes never interleave, until reading fails (io.EOF: every writer closed
// the pipe; os.ErrClosed: the relay was stopped). A line out refuses is
// dropped, and the reading goes on: a pipe nobody drains would stop the
// server's logging collector, and with it every session that logs.
func copyLines(r io.Reader, out io.Writer, mu *sync.Mutex, dropped func(error)) error {
	br := bufio.NewReaderSize(r, maxLine)
	var failing bool
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' { // a piece of an overlong line, or the last without its end
				line = append(line[:len(line):len(line)], '\n')
			}
			mu.Lock()
			_, werr := out.Write(line)
			mu.Unlock()
			if werr != nil && !failing {
				dropped(werr) // once, until a write succeeds again
			}
			failing = werr != nil
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		default:
			return err
		}
	}
}
