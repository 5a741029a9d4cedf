package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
}

// SQLServer is a Server over a database/sql connection pool (tests).
type SQLServer struct{ DB *sql.DB }

// BinaryLogs runs SHOW BINARY LOGS.
func (s SQLServer) BinaryLogs(ctx context.Context) ([]LogFile, error) {
	return engine.BinaryLogs(ctx, s.DB)
}

// FlushBinaryLogs runs FLUSH BINARY LOGS.
func (s SQLServer) FlushBinaryLogs(ctx context.Context) error {
	if _, err := s.DB.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		return fmt.Errorf("closing the current binary log: %w", err)
	}
	return nil
}

// Status is what an archiver did since it started (the agent's metrics
// and the operator's ContinuousArchiving condition read it).
type Status struct {
	Archived       int64
	LastArchived   string
	LastArchivedAt time.Time
	Failed         int64
	LastFailed     string
	LastFailedAt   time.Time
	LastError      string
}

// Failing says whether the last attempt failed.
func (s Status) Failing() bool { return s.Failed > 0 && s.LastFailedAt.After(s.LastArchivedAt) }

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
	Log     logr.Logger
	Now     func() time.Time

	mu     sync.Mutex
	status Status
	done   map[string]bool // files archived (or found archived) already
	// current is the file the server writes; size its size when the
	// archiver first saw it or closed the one before; dirty when it
	// first saw it grow since.
	current string
	size    int64
	dirty   time.Time
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

// Once archives the finished files not archived yet, then closes the
// current file when a write has waited Timeout.
func (r *Archiver) Once(ctx context.Context) error {
	files, err := r.Server.BinaryLogs(ctx)
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
	now := r.now()
	switch {
	case cur.Name != r.current:
		// First seen: a write may wait in it already (the agent
		// restarted), so it counts as written from now unless it holds
		// no transaction.
		r.current, r.size, r.dirty = cur.Name, cur.Size, time.Time{}
		if info, err := scanOpen(filepath.Join(r.Dir, cur.Name)); err != nil || info.Transactions > 0 {
			r.dirty = now
		}
	case cur.Size != r.size && r.dirty.IsZero():
		r.dirty = now
	}
	if r.dirty.IsZero() || now.Sub(r.dirty) < r.Timeout {
		return nil
	}
	if err := r.Server.FlushBinaryLogs(ctx); err != nil {
		return err
	}
	r.Log.V(1).Info("closed the binary log for archiving", "file", cur.Name, "waited", now.Sub(r.dirty).Round(time.Millisecond))
	if files, err = r.Server.BinaryLogs(ctx); err != nil {
		return err
	}
	last := files[len(files)-1]
	r.current, r.size, r.dirty = last.Name, last.Size, time.Time{}
	return r.archive(ctx, files[:len(files)-1])
}

// archive pushes the finished files in order, stopping at the first
// failure: a later file archived before an earlier one would leave a gap
// that the archive's reader would have to tell from a pruned file.
func (r *Archiver) archive(ctx context.Context, files []LogFile) error {
	if r.done == nil {
		r.done = map[string]bool{}
	}
	for _, f := range files {
		if r.done[f.Name] {
			continue
		}
		pushed, err := r.Archive.Push(ctx, r.Source, filepath.Join(r.Dir, f.Name))
		r.mu.Lock()
		if err != nil {
			r.status.Failed++
			r.status.LastFailed, r.status.LastFailedAt, r.status.LastError = f.Name, r.now(), err.Error()
			r.mu.Unlock()
			return fmt.Errorf("archiving %s: %w", f.Name, err)
		}
		r.status.Archived++
		r.status.LastArchived, r.status.LastArchivedAt = f.Name, r.now()
		r.mu.Unlock()
		r.done[f.Name] = true
		r.Log.Info("archived a binary log", "file", f.Name, "bytes", pushed.Size, "transactions", pushed.Info.Transactions, "end", pushed.Info.End.String())
	}
	return nil
}

// scanOpen reads the file the server writes as far as it is whole (its
// last event may be half written).
func scanOpen(path string) (Info, error) {
	return scanFile(path, true)
}
