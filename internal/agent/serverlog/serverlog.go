// Package serverlog relays the log files a database server writes to the
// container's output. PostgreSQL writes JSON logs (jsonlog) only through
// its logging collector, and the collector only writes files: the agent
// makes each file a named pipe before the server starts and copies what
// comes through it, line by line, to its own standard output, where
// kubectl logs and every log shipper read a container's log.
package serverlog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
)

// Pipe is a file the server writes, and where its lines go.
type Pipe struct {
	Name string
	Out  io.Writer
}

// PostgresPipes are the files PostgreSQL's logging collector writes in
// log_directory with log_filename = 'postgresql' (the chart's
// configuration): the JSON log, relayed to stdout, and the plain one the
// collector always opens (its own few lines, and whatever a process
// writes to its standard error without the logging protocol), relayed to
// stderr.
func PostgresPipes(stdout, stderr io.Writer) []Pipe {
	return []Pipe{{Name: "postgresql.json", Out: stdout}, {Name: "postgresql", Out: stderr}}
}

// maxLine bounds one relayed line: a longer one (a huge statement in an
// error) goes out in pieces of this size, each on a line of its own,
// rather than holding the agent's memory or the server's log hostage.
const maxLine = 256 << 10

// Relay makes dir and each named pipe in it, then copies whole lines from
// every pipe to its Out until ctx ends. It returns once the
// pipes exist, so the server can be started after it: a server that found
// no pipe would write an ordinary file instead, which nobody reads and
// which fills the volume.
//
// Each pipe is held open for reading and writing: the server's open never
// waits for a reader, and a server that closes the file and opens it again
// (a restart, a log rotation) finds the same pipe, with the agent still
// reading. The agent must keep reading: a server blocks once a pipe's
// buffer is full.
func Relay(ctx context.Context, dir string, log logr.Logger, pipes ...Pipe) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("making the server's log directory: %w", err)
	}
	files := make([]*os.File, 0, len(pipes))
	for _, p := range pipes {
		f, err := openPipe(filepath.Join(dir, p.Name))
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return err
		}
		files = append(files, f)
	}
	var mu sync.Mutex // one line at a time, whatever the Out
	for i, f := range files {
		go func() {
			<-ctx.Done()
			f.Close()
		}()
		go func() {
			dropped := func(err error) { log.Error(err, "dropping the server's log lines", "file", f.Name()) }
			if err := copyLines(f, pipes[i].Out, &mu, dropped); !errors.Is(err, os.ErrClosed) {
				log.Error(err, "relaying the server's log stopped", "file", f.Name())
			}
		}()
	}
	return nil
}

// openPipe makes path a named pipe (replacing an ordinary file a server
// wrote there while no agent had made the pipe) and opens it.
func openPipe(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeNamedPipe {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replacing %s with a named pipe: %w", path, err)
		}
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("making the named pipe %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the named pipe %s: %w", path, err)
	}
	return f, nil
}

// copyLines copies r to out one whole line per write, so lines from the
// pipes never interleave, until reading fails (os.ErrClosed: the relay was
// stopped). A line out refuses is dropped, and the reading goes on: a pipe
// nobody drains would stop the server's logging collector, and with it
// every session that logs.
func copyLines(r io.Reader, out io.Writer, mu *sync.Mutex, dropped func(error)) error {
	br := bufio.NewReaderSize(r, maxLine)
	var failing bool
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			mu.Lock()
			_, werr := out.Write(line)
			if werr == nil && line[len(line)-1] != '\n' {
				_, werr = out.Write([]byte{'\n'}) // a piece of an overlong line
			}
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
