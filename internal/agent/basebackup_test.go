package agent

import (
	"context"
	"io"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	dbv1 "example.com/database-operator/api/v1"
)

// TestBaseBackupStream: the copy reaches the caller with its position
// after it; a copy that fails half way, or says no position, is never
// taken for a whole one; a wrong token and a second copy at once are
// refused.
func TestBaseBackupStream(t *testing.T) {
	const token = "secret"
	script := func(s string) func(context.Context, string) *exec.Cmd {
		return func(ctx context.Context, _ string) *exec.Cmd { return exec.CommandContext(ctx, "sh", "-c", s) }
	}
	serve := func(cmd func(context.Context, string) *exec.Cmd) string {
		srv := httptest.NewServer(BaseBackupHandler(Config{Engine: dbv1.EngineMariaDB, PeerToken: PeerToken(token), Log: testr.New(t), BaseBackupCommand: cmd}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	fetch := func(addr, tok string) (string, string, error) {
		bb, err := FetchBaseBackup(context.Background(), addr, PeerToken(tok), nil)
		if err != nil {
			return "", "", err
		}
		defer bb.Close()
		body, err := io.ReadAll(bb)
		if err != nil {
			return string(body), "", err
		}
		pos, err := bb.Result()
		return string(body), pos, err
	}

	whole := serve(script(`printf 'DATA'; echo "[00] MySQL binlog position: filename 'binlog.000003', position '1234', GTID of the last change '0-1000-42'" >&2`))
	if body, pos, err := fetch(whole, token); err != nil || body != "DATA" || pos != "0-1000-42" {
		t.Errorf("a whole copy: %q at %q (%v), want DATA at 0-1000-42", body, pos, err)
	}
	if _, _, err := fetch(whole, "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v, want 401", err)
	}
	failing := serve(script(`printf 'PART'; echo "InnoDB: read error" >&2; exit 1`))
	if _, _, err := fetch(failing, token); err == nil || !strings.Contains(err.Error(), "read error") {
		t.Errorf("a copy that failed half way: %v, want its error", err)
	}
	silent := serve(script(`printf 'DATA'`))
	if _, _, err := fetch(silent, token); err == nil || !strings.Contains(err.Error(), "position") {
		t.Errorf("a copy without a position: %v, want refused", err)
	}

	// One copy at a time: a second caller is refused while the first runs.
	started, release := make(chan struct{}), make(chan struct{})
	slow := serve(func(ctx context.Context, _ string) *exec.Cmd {
		close(started) // called once: the second caller never gets this far
		<-release
		return exec.CommandContext(ctx, "sh", "-c", "exit 1")
	})
	first := make(chan error, 1)
	go func() { _, _, err := fetch(slow, token); first <- err }()
	<-started
	_, _, second := fetch(slow, token)
	close(release)
	if err := <-first; err == nil {
		t.Error("the first copy, whose mariadb-backup failed, was taken for a whole one")
	}
	if second == nil || !strings.Contains(second.Error(), "409") {
		t.Errorf("a second copy while one runs: %v, want 409", second)
	}
}
