package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// A MariaDB physical backup (Backup method Physical) copies the server's
// data files, which only a process beside the server can read: the backup
// Job asks the agent of the instance it backs up, over the peer channel,
// and the agent streams mariadb-backup's output (mbstream) back. The Job
// hashes it into the target as it does a dump. The copy's position (the
// GTID its data holds up to, where a binary log replay starts) and a
// failure half way are sent after the data, as HTTP trailers: a stream cut
// short is never taken for a whole one.

// Trailers of GET /v1/basebackup.
const (
	// TrailerBaseBackupError is set when the copy failed (mariadb-backup's
	// error); the data before it is not a backup.
	TrailerBaseBackupError = "Backup-Error"
	// TrailerBaseBackupPosition is the GTID position the copy holds up to.
	TrailerBaseBackupPosition = "Backup-Position"
	// TrailerBaseBackupDone is "true" once the copy completed: a response
	// without it (a connection that closed early) is not a backup.
	TrailerBaseBackupDone = "Backup-Done"
)

// baseBackups lets one copy of the server run at a time.
var baseBackups sync.Mutex

// BaseBackupHandler serves GET /v1/basebackup for the server cfg names,
// as an agent's peer channel does (tests serve it alone).
func BaseBackupHandler(cfg Config) http.Handler {
	a := &Agent{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/basebackup", a.serveBaseBackup)
	return mux
}

// serveBaseBackup answers GET /v1/basebackup: the local server's data
// files as mariadb-backup streams them.
func (a *Agent) serveBaseBackup(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(r) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if a.cfg.Engine != dbv1.EngineMariaDB {
		http.Error(w, fmt.Sprintf("a physical backup of %s is not built: MariaDB's is mariadb-backup; MySQL's would be xtrabackup or the clone plugin, which these machines do not have", a.cfg.Engine), http.StatusNotImplemented)
		return
	}
	if !baseBackups.TryLock() {
		http.Error(w, "a physical backup of this server is already running", http.StatusConflict)
		return
	}
	defer baseBackups.Unlock()
	log := a.cfg.Log.WithValues("action", "basebackup")
	tmp, err := os.MkdirTemp("", "basebackup-")
	if err != nil {
		http.Error(w, "scratch space: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer os.RemoveAll(tmp)
	cmd := a.baseBackupCommand(r.Context(), tmp)
	stderr := &stderrLines{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		log.Error(err, "starting mariadb-backup")
		http.Error(w, "starting mariadb-backup: "+err.Error(), http.StatusInternalServerError)
		return
	}
	waited.Store(cmd.Process.Pid, true)
	defer waited.Delete(cmd.Process.Pid)
	log.Info("copying the server's data files for a physical backup")
	w.Header().Set("Trailer", strings.Join([]string{TrailerBaseBackupError, TrailerBaseBackupPosition, TrailerBaseBackupDone}, ", "))
	w.Header().Set("Content-Type", "application/octet-stream")
	// The caller learns at once that the copy started (it bounds the wait
	// for the headers), whatever mariadb-backup takes to write its first
	// bytes.
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	n, copyErr := io.Copy(w, out)
	if copyErr != nil {
		_ = cmd.Process.Kill() // the caller went away: nowhere to send the rest
	}
	waitErr := cmd.Wait()
	switch {
	case copyErr != nil:
		log.Error(copyErr, "sending the physical backup", "bytes", n)
		return
	case waitErr != nil:
		msg := fmt.Sprintf("mariadb-backup failed: %v: %s", waitErr, stderr.tail())
		log.Error(waitErr, "physical backup failed", "bytes", n, "stderr", stderr.tail())
		w.Header().Set(TrailerBaseBackupError, msg)
		return
	}
	pos, ok := stderr.position()
	if !ok {
		msg := "mariadb-backup completed without saying the binary log position its copy holds up to (is the binary log on?)"
		log.Error(errors.New(msg), "physical backup unusable", "bytes", n)
		w.Header().Set(TrailerBaseBackupError, msg)
		return
	}
	log.Info("physical backup sent", "bytes", n, "position", pos)
	w.Header().Set(TrailerBaseBackupPosition, pos)
	w.Header().Set(TrailerBaseBackupDone, "true")
}

// baseBackupCommand is mariadb-backup copying the local server to its
// output (the password in the environment, never on the command line).
func (a *Agent) baseBackupCommand(ctx context.Context, tmp string) *exec.Cmd {
	if a.cfg.BaseBackupCommand != nil {
		return a.cfg.BaseBackupCommand(ctx, tmp)
	}
	args := []string{"--no-defaults", "--backup", "--stream=mbstream", "--target-dir=" + tmp, "--tmpdir=" + tmp,
		"--host=" + a.cfg.Server.Host, "--port=" + strconv.Itoa(a.cfg.Server.Port), "--protocol=tcp", "--user=" + a.cfg.Superuser.User}
	if a.cfg.TLSDir != "" {
		args = append(args, "--ssl", "--ssl-ca="+filepath.Join(a.cfg.TLSDir, "ca.crt"))
	}
	cmd := exec.CommandContext(ctx, "mariadb-backup", args...)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+a.cfg.Superuser.Password)
	return cmd
}

// binlogPosition is mariadb-backup's line naming where its copy stands
// in the binary log: "MySQL binlog position: filename 'binlog.000003',
// position '1234', GTID of the last change '0-1000-42'".
var binlogPosition = regexp.MustCompile(`MySQL binlog position: filename '[^']*', position '[0-9]+'(?:, GTID of the last change '([^']*)')?`)

// stderrLines keeps what mariadb-backup says: its last lines for an error,
// and its position line.
type stderrLines struct {
	mu   sync.Mutex
	last []byte
	pos  string
	seen bool
	part []byte
}

func (s *stderrLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part = append(s.part, p...)
	for {
		i := bytes.IndexByte(s.part, '\n')
		if i < 0 {
			break
		}
		s.line(s.part[:i])
		s.part = s.part[i+1:]
	}
	return len(p), nil
}

func (s *stderrLines) line(l []byte) {
	if m := binlogPosition.FindSubmatch(l); m != nil {
		s.pos, s.seen = string(m[1]), true
	}
	s.last = append(s.last, l...)
	s.last = append(s.last, '\n')
	if len(s.last) > 2048 {
		s.last = s.last[len(s.last)-2048:]
	}
}

func (s *stderrLines) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(string(s.last) + string(s.part))
}

// position is the GTID position the copy holds up to; false when
// mariadb-backup did not say.
func (s *stderrLines) position() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos, s.seen
}

// BaseBackup is a physical backup as it arrives from an agent.
type BaseBackup struct {
	body io.ReadCloser
	resp *http.Response
}

// FetchBaseBackup asks the agent at addr (host:port of its peer channel)
// for a physical backup of its server. Read it to its end, then Result
// says whether it is whole.
func FetchBaseBackup(ctx context.Context, addr, token string, cfg *tls.Config) (*BaseBackup, error) {
	// No deadline on the whole transfer (a large copy takes long), but on
	// every step before the copy's first byte; no proxy: the token goes to
	// the agent only.
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: time.Minute}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/v1/basebackup", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("the agent refused the physical backup: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return &BaseBackup{body: resp.Body, resp: resp}, nil
}

func (b *BaseBackup) Read(p []byte) (int, error) { return b.body.Read(p) }

// Close ends the transfer (early, if it is not read to its end).
func (b *BaseBackup) Close() error { return b.body.Close() }

// Result is the copy's GTID position once the body was read to its end,
// or why it is not a backup.
func (b *BaseBackup) Result() (string, error) {
	t := b.resp.Trailer
	switch {
	case t.Get(TrailerBaseBackupError) != "":
		return "", errors.New(t.Get(TrailerBaseBackupError))
	case t.Get(TrailerBaseBackupDone) != "true":
		return "", errors.New("the agent's stream ended before the copy completed")
	}
	return t.Get(TrailerBaseBackupPosition), nil
}
