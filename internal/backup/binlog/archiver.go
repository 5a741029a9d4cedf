package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"example.com/database-operator/internal/engine"
)

// LogFile is one of the server's binary log files (SHOW BINARY LOGS).
type LogFile = engine.BinaryLog

// Server is what the archiver asks of the local server (the engine's
// MySQL and MariaDB instances have it).
type Server interface {
	// BinaryLogs lists the server's binary log files, oldest first; the
	// last is the one it writes.
	BinaryLogs(ctx context.Context) ([]LogFile, error)
	// FlushBinaryLogs closes the current file and starts the next.
	FlushBinaryLogs(ctx context.Context) error
	// BinlogPosition is @@gtid_binlog_pos: it moves with every write.
	BinlogPosition(ctx context.Context) (string, error)
}

// SQLServer is a Server over a database/sql connection pool (tests).
type SQLServer struct{ DB *sql.DB }

// BinaryLogs runs SHOW BINARY LOGS.
func (s SQLServer) BinaryLogs(ctx context.Context) ([]LogFile, error) {
	return engine.BinaryLogs(ctx, s.DB)
}

// FlushBinaryLogs runs FLUSH BINARY LOGS.
func (s SQLServer) FlushBinaryLogs(ctx context.Context) error {
	return engine.FlushBinaryLogs(ctx, s.DB)
}

// BinlogPosition reads @@gtid_binlog_pos.
func (s SQLServer) BinlogPosition(ctx context.Context) (string, error) {
	return engine.BinlogPosition(ctx, s.DB)
}

// Status is what an archiver did since it started (the agent's metrics
// and the operator's ContinuousArchiving condition read it).
type Status struct {
	Archived       int64
	LastArchived   string
	LastArchivedAt time.Time
	// LastClosedAt is when the last archived file was closed, or the
	// last event of the last streamed piece: the archive holds every
	// transaction before it.
	LastClosedAt time.Time
	Failed       int64
	LastFailed   string
	LastFailedAt time.Time
	LastError    string
	// Gaps counts files that did not begin where the one archived before
	// ended (a file deleted before it was archived): no recovery crosses
	// one. LastGap says where, LastGapAt when it was found.
	Gaps      int64
	LastGap   string
	LastGapAt time.Time
	// Streamed counts the bytes of files archived as the server wrote
	// them (Archiver.Stream), LastStreamedAt when it last sent some.
	Streamed       int64
	LastStreamedAt time.Time
}

// Failing says whether the last attempt failed.
func (s Status) Failing() bool {
	return s.Failed > 0 && s.LastFailedAt.After(s.LastArchivedAt) && s.LastFailedAt.After(s.LastStreamedAt)
}

// Archiver copies a primary's finished binary log files to the archive,
// oldest first, and closes the current file at most Timeout after a write
// so that no transaction waits longer than that to be archived (the
// binary log's archive_timeout).
type Archiver struct {
	Archive Archive
	// Source names this server's binary log in the archive: a name new
	// for each data directory (file names restart with it).
	Source string
	// Dir holds the binary log files (the data directory, or log-bin's).
	Dir     string
	Server  Server
	Timeout time.Duration
	// Stream archives the file the server writes as it grows, every
	// round (Archive.PushPart), besides each file whole once closed.
	Stream bool
	Log    logr.Logger
	Now    func() time.Time

	mu     sync.Mutex
	status Status
	done   map[string]bool // files archived (or found archived) already
	// lastEnd is where the last file archived ended (nil: none yet);
	// resumed: it was read from the archive once (a restarted agent
	// compares its first file with what is there).
	lastEnd Position
	resumed bool
	// current is the file the server writes, pos the server's GTID
	// position when the archiver began watching it (or closed the one
	// before); dirty when it first saw the position move since.
	current string
	pos     string
	dirty   time.Time
	// streaming is the file being streamed, streamed what of it was
	// sent (read through, its events verified).
	streaming string
	streamed  *scanner
}

func (r *Archiver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Status returns what the archiver did so far.
func (r *Archiver) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Fail records a failure of what (a file, or a step) with err: every
// failure counts, not only an upload's, so the operator's condition turns
// False whatever stops the archive.
func (r *Archiver) Fail(what string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Failed++
	r.status.LastFailed, r.status.LastFailedAt, r.status.LastError = what, r.now(), err.Error()
}

// Carry takes over another archiver's status: its counts and its last
// failure (the agent's archiver for a data directory made again).
func (r *Archiver) Carry(old *Archiver) {
	st := old.Status()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = st
}

// Run archives every interval until ctx ends. Failures are retried (the
// server keeps its files: nothing is purged by the archiver) and counted
// in Status.
func (r *Archiver) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "archiving the binary log")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sqlTimeout bounds each statement the archiver runs.
const sqlTimeout = 30 * time.Second

// Once archives the finished files not archived yet, then closes the
// current file when a write has waited Timeout. A failure is recorded
// (Fail) and returned.
func (r *Archiver) Once(ctx context.Context) error {
	err := r.once(ctx)
	var fe *fileError
	switch {
	case errors.As(err, &fe):
		r.Fail(fe.file, fe.err)
	case err != nil:
		r.Fail("", err)
	}
	return err
}

type fileError struct {
	file string
	err  error
}

func (e *fileError) Error() string { return fmt.Sprintf("archiving %s: %v", e.file, e.err) }
func (e *fileError) Unwrap() error { return e.err }

func (r *Archiver) once(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	files, err := r.Server.BinaryLogs(sctx)
	cancel()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("the server keeps no binary log (log-bin is off)")
	}
	if err := r.archive(ctx, files[:len(files)-1]); err != nil {
		return err
	}
	cur := files[len(files)-1]
	var streamErr error
	if r.Stream {
		fctx, cancel := context.WithTimeout(ctx, fileDeadline(cur.Size))
		if err := r.stream(fctx, cur); err != nil {
			streamErr = &fileError{cur.Name, err}
		}
		cancel()
	}
	// A failed piece is retried next round; the file still closes in
	// time, to be archived whole.
	return errors.Join(streamErr, r.closeIfWaited(ctx, cur))
}

// closeIfWaited closes the current file (and archives it) once a write
// has waited Timeout in it.
func (r *Archiver) closeIfWaited(ctx context.Context, cur LogFile) error {
	sctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	// The GTID position moves with every write, and only then (the size
	// of the file does not: the server adds a checkpoint event to a new
	// file by itself).
	pos, err := r.Server.BinlogPosition(sctx)
	if err != nil {
		return err
	}
	now := r.now()
	switch {
	case cur.Name != r.current:
		// First seen: a write may wait in it already (the agent
		// restarted), so it counts as written from now unless it holds
		// no transaction.
		r.current, r.pos, r.dirty = cur.Name, pos, time.Time{}
		if info, err := scanOpen(filepath.Join(r.Dir, cur.Name)); err != nil || info.Transactions > 0 {
			r.dirty = now
		}
	case pos != r.pos && r.dirty.IsZero():
		r.dirty = now
	}
	if r.dirty.IsZero() || now.Sub(r.dirty) < r.Timeout {
		return nil
	}
	// The position before the flush: a write after it lands in the new
	// file and moves the position again.
	if err := r.Server.FlushBinaryLogs(sctx); err != nil {
		return err
	}
	r.Log.V(1).Info("closed the binary log for archiving", "file", cur.Name, "waited", now.Sub(r.dirty).Round(time.Millisecond))
	files, err := r.Server.BinaryLogs(sctx)
	if err != nil {
		return err
	}
	r.current, r.pos, r.dirty = files[len(files)-1].Name, pos, time.Time{}
	return r.archive(ctx, files[:len(files)-1])
}

// fileDeadline bounds one file's upload: a minute, and a second for every
// 512 KiB (a 1 GiB file: 35 minutes).
func fileDeadline(size int64) time.Duration {
	return time.Minute + time.Duration(size/(512<<10))*time.Second
}

// archive pushes the finished files in order, stopping at the first
// failure: a later file archived before an earlier one would leave a gap
// that the archive's reader would have to tell from a pruned file. A file
// that does not begin where the one before ended is archived all the
// same, and the gap recorded.
func (r *Archiver) archive(ctx context.Context, files []LogFile) error {
	if r.done == nil {
		r.done = map[string]bool{}
	}
	if !r.resumed {
		last, ok, err := r.Archive.Last(ctx, r.Source)
		if err != nil {
			return fmt.Errorf("reading the archive's last file: %w", err)
		}
		if ok {
			r.lastEnd = last.Info.End
			// The server's files before it were archived before this
			// agent started (retention may have deleted them since: they
			// are not sent again, nor taken for a gap).
			for _, f := range files {
				if logNumber(f.Name) < logNumber(last.Name) {
					r.done[f.Name] = true
				}
			}
		}
		r.resumed = true
	}
	for _, f := range files {
		if r.done[f.Name] {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, fileDeadline(f.Size))
		pushed, err := r.Archive.Push(fctx, r.Source, filepath.Join(r.Dir, f.Name))
		cancel()
		if err != nil {
			return &fileError{f.Name, err}
		}
		start := StartOf(pushed.Info)
		r.mu.Lock()
		// A file archived before (an agent restarted goes through the
		// server's files from the first) was compared then.
		if _, ok := continues(r.lastEnd, start); r.lastEnd != nil && !ok && !pushed.Existed {
			r.status.Gaps++
			r.status.LastGap = fmt.Sprintf("%s begins at %s, the file archived before it ended at %s", f.Name, start, r.lastEnd)
			r.status.LastGapAt = r.now()
			r.Log.Error(nil, "GAP IN THE BINARY LOG ARCHIVE: a file was lost before it was archived; no recovery crosses it until a backup is taken after it",
				"file", f.Name, "begins", start.String(), "previousEnd", r.lastEnd.String())
		}
		r.lastEnd = pushed.Info.End
		r.status.Archived++
		r.status.LastArchived, r.status.LastArchivedAt, r.status.LastClosedAt = f.Name, r.now(), pushed.Info.ClosedAt
		r.mu.Unlock()
		r.done[f.Name] = true
		r.Log.Info("archived a binary log", "file", f.Name, "bytes", pushed.Size, "transactions", pushed.Info.Transactions, "end", pushed.Info.End.String())
		if r.Stream {
			// Readers take the whole file over its pieces: a piece left
			// behind is only untidy (retention deletes it with the file).
			if err := r.Archive.deletePart(ctx, r.Source, f.Name); err != nil {
				r.Log.Error(err, "deleting the streamed pieces of an archived binary log", "file", f.Name)
			}
		}
	}
	return nil
}

// stream archives what the server added to the file it writes since the
// last round: up to the size the server gives (SHOW BINARY LOGS, read
// under the log's lock: the end of a transaction). An agent restarted
// mid-file goes on after what the archive holds of it.
func (r *Archiver) stream(ctx context.Context, cur LogFile) error {
	file := filepath.Join(r.Dir, cur.Name)
	if r.streaming != cur.Name {
		r.streaming, r.streamed = cur.Name, newScanner()
		info, found, err := r.Archive.streamedInfo(ctx, r.Source, cur.Name)
		if err != nil {
			r.streaming = ""
			return fmt.Errorf("reading what was streamed of it: %w", err)
		}
		if found && info.Size <= cur.Size {
			if sc, err := scanRange(file, newScanner(), 0, info.Size); err == nil && sc.info.Size == info.Size {
				r.streamed = sc
			}
		}
		if found && r.streamed.info.Size == 0 {
			// Not this file's beginning (a name the server used again):
			// its pieces go, or a reader could follow the longer old ones.
			if err := r.Archive.deletePart(ctx, r.Source, cur.Name); err != nil {
				r.streaming = ""
				return fmt.Errorf("deleting pieces of an earlier file of its name: %w", err)
			}
		}
	}
	from := r.streamed.info.Size
	if cur.Size <= from {
		return nil
	}
	next, err := scanRange(file, r.streamed.clone(), from, cur.Size)
	if err != nil {
		return err
	}
	if next.info.Size != cur.Size {
		// Not all on disk yet: the next round sends it.
		return nil
	}
	info := next.info
	info.ClosedAt = info.LastEvent // every transaction dated before it is in
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := r.Archive.PushPart(ctx, r.Source, cur.Name, io.NewSectionReader(f, from, cur.Size-from), from, cur.Size, info); err != nil {
		return err
	}
	r.streamed = next
	r.mu.Lock()
	r.status.Streamed += cur.Size - from
	r.status.LastStreamedAt, r.status.LastClosedAt = r.now(), info.ClosedAt
	r.mu.Unlock()
	r.Log.V(1).Info("streamed the binary log", "file", cur.Name, "from", from, "to", cur.Size, "end", info.End.String())
	return nil
}

// scanRange reads bytes [from, to) of file into sc, as far as they hold
// whole events.
func scanRange(file string, sc *scanner, from, to int64) (*scanner, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if err := sc.read(io.NewSectionReader(f, from, to-from), true); err != nil {
		return nil, err
	}
	return sc, nil
}

// scanOpen reads the file the server writes as far as it is whole (its
// last event may be half written).
func scanOpen(path string) (Info, error) {
	return scanFile(path, true)
}
