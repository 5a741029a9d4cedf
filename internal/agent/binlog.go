package agent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/engine"
)

// EnvBinlogArchive passes the binary log archive to the agent (MariaDB with
// spec.backup.archive): a JSON array of the backup target's flags and
// --prefix, as wal-push takes them.
const EnvBinlogArchive = "BINLOG_ARCHIVE"

// EnvBinlogArchiveTimeout is the archive timeout (a Go duration): at most
// how long a write waits in the current file before it is closed for the
// archive.
const EnvBinlogArchiveTimeout = "BINLOG_ARCHIVE_TIMEOUT"

// binlogArchiveFromEnv reads EnvBinlogArchive; nil when it is not set.
func binlogArchiveFromEnv(ctx context.Context) (*binlog.Archive, error) {
	store, prefix, err := archiveFromEnv(ctx, EnvBinlogArchive)
	if err != nil || store == nil {
		return nil, err
	}
	return &binlog.Archive{Store: store, Prefix: prefix}, nil
}

// archiveFromEnv reads an archive from the environment variable env: a
// JSON array of the backup target's flags and --prefix, as wal-push takes
// them. A nil store when env is not set.
func archiveFromEnv(ctx context.Context, env string) (storage.Store, string, error) {
	v := os.Getenv(env)
	if v == "" {
		return nil, "", nil
	}
	var args []string
	if err := json.Unmarshal([]byte(v), &args); err != nil {
		return nil, "", fmt.Errorf("%s is not a JSON array of flags: %w", env, err)
	}
	fs := flag.NewFlagSet(env, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var t storage.Flags
	t.Register(fs)
	prefix := fs.String("prefix", "", "where the archive lives in the target")
	if err := fs.Parse(args); err != nil {
		return nil, "", fmt.Errorf("%s: %w", env, err)
	}
	if *prefix == "" {
		return nil, "", fmt.Errorf("%s: --prefix is required", env)
	}
	store, err := t.Open(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", env, err)
	}
	return store, *prefix, nil
}

// binlogInterval is how often the archiver looks for finished files.
const binlogInterval = time.Second

// binlogLoop archives the binary logs while this server is the primary:
// writable, and this pod holds the primary Lease (a primary that lost it
// is about to be fenced: what it writes now is not the Database's
// history). Each finished file goes to the archive, and the current one
// at most the archive timeout after a write (binlog.Archiver). A promoted
// replica's first round archives the files it wrote as a replica too
// (they hold the old primary's transactions: log_slave_updates), so the
// archive follows the primary across a failover without a gap.
func (a *Agent) binlogLoop(ctx context.Context) {
	if a.cfg.BinlogArchive == nil {
		return
	}
	var inst engine.Instance
	defer func() {
		if inst != nil {
			inst.Close()
		}
	}()
	var lastErr string
	for ctx.Err() == nil {
		a.mu.Lock()
		primary := a.writable && a.running && a.holdsLocked()
		a.mu.Unlock()
		if primary {
			err := a.archiveBinlogs(ctx, &inst)
			if err != nil {
				if inst != nil { // connect again next round
					inst.Close()
					inst = nil
				}
			}
			switch {
			case err != nil && err.Error() != lastErr:
				a.cfg.Log.Error(err, "archiving the binary log (retried every second; the server keeps its files meanwhile)")
			case err == nil && lastErr != "":
				a.cfg.Log.Info("archiving the binary log works again")
			}
			lastErr = ""
			if err != nil {
				lastErr = err.Error()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(binlogInterval):
		}
	}
}

// binlogFailed records a failure outside the archiver's own rounds (the
// server unreachable, its data directory unreadable): the operator's
// condition turns False with it as with a failed upload.
func (a *Agent) binlogFailed(err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.binlogs == nil {
		a.binlogs = &binlog.Archiver{Log: a.cfg.Log} // holds the status until the archiver starts
	}
	a.binlogs.Fail("", err)
	return err
}

func (a *Agent) archiveBinlogs(ctx context.Context, inst *engine.Instance) error {
	if *inst == nil {
		var err error
		if *inst, err = a.openLocal(ctx, 30*time.Second); err != nil {
			return a.binlogFailed(fmt.Errorf("connecting to the server: %w", err))
		}
	}
	srv, err := engine.BinaryLogsOf(*inst)
	if err != nil {
		return a.binlogFailed(fmt.Errorf("%s: %w", a.cfg.Engine, err))
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	dir, data, err := srv.BinaryLogDir(sctx)
	cancel()
	if err != nil {
		return a.binlogFailed(err)
	}
	// Read every round: a data directory made again (a rebuilt
	// instance) has a new source, and its file names start over.
	source, err := binlogSource(data, a.cfg.Pod)
	if err != nil {
		return a.binlogFailed(err)
	}
	a.mu.Lock()
	r := a.binlogs
	if r == nil || r.Source != source || r.Dir != dir {
		timeout := a.cfg.BinlogTimeout
		if timeout <= 0 {
			timeout = time.Minute
		}
		fresh := &binlog.Archiver{Archive: *a.cfg.BinlogArchive, Source: source, Dir: dir, Timeout: timeout, Stream: true, Log: a.cfg.Log}
		if r != nil {
			fresh.Carry(r) // the failures counted so far
		}
		r, a.binlogs = fresh, fresh
		a.cfg.Log.Info("archiving the binary log", "source", source, "dir", dir, "timeout", timeout)
	}
	a.mu.Unlock()
	r.Server = srv
	return r.Once(ctx)
}

// binlogSourceFile holds, in the data directory, the name this server's
// binary log has in the archive.
const binlogSourceFile = "dbop-binlog-source"

// binlogSource is the archive's name for the binary log of the server in
// data: the pod's name and a random suffix made once per data directory.
// Binary log file names restart with every data directory (a re-cloned
// replica writes binlog.000001 again), and must not meet an earlier one's.
func binlogSource(data, pod string) (string, error) {
	file := filepath.Join(data, binlogSourceFile)
	if b, err := os.ReadFile(file); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, os.ErrNotExist) && err != nil {
		return "", err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return "", err
	}
	source := strings.ToLower(pod) + "-" + hex.EncodeToString(suffix)
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(source+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("recording the binary log's archive name: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return "", err
	}
	return source, nil
}

// BinlogArchiving is the binary log archiver's state, as GET
// /v1/archiver serves it.
type BinlogArchiving struct {
	// Enabled: the agent archives (spec.backup.archive); Active: it has
	// started on this server (the primary).
	Enabled bool   `json:"enabled"`
	Active  bool   `json:"active"`
	Source  string `json:"source,omitempty"`
	binlog.Status
	// WALStream is PostgreSQL's: the segment the server writes, streamed.
	WALStream *WALStreamStatus `json:"walStream,omitempty"`
}

// serveArchiver answers GET /v1/archiver.
func (a *Agent) serveArchiver(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(r) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	st := BinlogArchiving{Enabled: a.cfg.BinlogArchive != nil || a.walStream != nil}
	if a.binlogs != nil {
		st.Active, st.Source, st.Status = a.binlogs.Source != "", a.binlogs.Source, a.binlogs.Status()
	}
	a.mu.Unlock()
	if a.walStream != nil {
		ws := a.walStream.status()
		st.WALStream = &ws
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// AskArchiver asks the agent at addr (host:port of its peer channel) for
// its binary log archiver's state.
func AskArchiver(ctx context.Context, addr, token string, cfg *tls.Config) (BinlogArchiving, error) {
	var st BinlogArchiving
	err := call(ctx, http.MethodGet, "/v1/archiver", addr, token, cfg, &st)
	return st, err
}
