package backup

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"

	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/backup/storage"
)

// EnvReplicationPassword passes the replication account's password to a
// MariaDB physical backup: the token of the agents' peer channel derives
// from it (agent.PeerToken).
const EnvReplicationPassword = "REPLICATION_PASSWORD"

// mariadbBaseBackupName is a MariaDB physical backup's one file.
const mariadbBaseBackupName = "base.mbstream"

// mariadbBaseBackup has the agent of the instance at s.Host copy its
// server's data files (mariadb-backup, beside the server: nothing else
// can read them) and streams them into the target, hashed on the way. It
// returns the file and the GTID position the copy holds up to. A stream
// the agent did not end as complete is deleted and fails the backup.
func mariadbBaseBackup(ctx context.Context, store storage.Store, dir string, s Server) (File, string, error) {
	cfg, err := peerTLS(s)
	if err != nil {
		return File{}, "", fail(ReasonInvalid, "%w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := s.AgentAddr
	if addr == "" {
		addr = net.JoinHostPort(s.Host, strconv.Itoa(agent.PeerPort))
	}
	bb, err := agent.FetchBaseBackup(ctx, addr, agent.PeerToken(os.Getenv(EnvReplicationPassword)), cfg)
	if err != nil {
		return File{}, "", fail(ReasonDatabaseUnreachable, "asking the agent of %s for a physical backup: %w", s.Host, err)
	}
	defer bb.Close()
	key := dir + "/" + mariadbBaseBackupName
	h := sha256.New()
	src := &readErr{r: io.TeeReader(bb, h)}
	n, putErr := store.Put(ctx, key, src)
	pos, resErr := bb.Result()
	if putErr == nil && resErr == nil {
		return File{Name: mariadbBaseBackupName, Kind: KindMariaDBBackup, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, pos, nil
	}
	_ = store.Delete(context.WithoutCancel(ctx), key)
	switch {
	case src.err != nil:
		return File{}, "", fail(ReasonDumpFailed, "the physical backup's stream from %s broke off after %d bytes: %w", s.Host, n, src.err)
	case putErr != nil:
		return File{}, "", fail(ReasonTargetFailed, "writing %s to the backup target: %w", mariadbBaseBackupName, putErr)
	}
	return File{}, "", fail(ReasonDumpFailed, "the physical backup of %s failed: %w", s.Host, resErr)
}

// peerTLS is how the backup reaches an agent's peer channel: TLS verified
// with s's CA against s.Host when the server takes TLS, else plain.
func peerTLS(s Server) (*tls.Config, error) {
	if s.CAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New(s.CAFile + " holds no PEM certificate")
	}
	return &tls.Config{RootCAs: pool, ServerName: s.Host, MinVersion: tls.VersionTLS12}, nil
}

// readErr remembers a read's error (other than the end): the stream from
// the agent broke, as opposed to the target refusing the write.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = err
	}
	return n, err
}

// ExtractMariaDBBackup unpacks the MariaDB physical backup at path into
// dest, which must not exist yet, and prepares it (mariadb-backup
// --prepare: the copied redo log applied), so that a server starts on
// dest as on its own data directory. The file is downloaded into scratch
// and checked against the manifest first: a corrupt or incomplete backup
// is refused before anything is written to dest. Tool output goes to log.
func ExtractMariaDBBackup(ctx context.Context, store storage.Store, path, scratch, dest string, log io.Writer) (*Manifest, error) {
	m, local, err := fetchPhysical(ctx, store, path, scratch, dest, KindMariaDBBackup)
	if err != nil {
		return nil, err
	}
	defer os.Remove(local)
	if err := os.Mkdir(dest, 0o700); err != nil {
		return nil, fail(ReasonLoadFailed, "%w", err)
	}
	in, err := os.Open(local)
	if err != nil {
		return nil, fail(ReasonLoadFailed, "%w", err)
	}
	defer in.Close()
	if err := runTool(ctx, log, in, "mbstream", "-x", "-C", dest); err != nil {
		return nil, fail(ReasonLoadFailed, "unpacking %s into %s: %w", m.Files[0].Name, dest, err)
	}
	if err := runTool(ctx, log, nil, "mariadb-backup", "--no-defaults", "--prepare", "--target-dir="+dest); err != nil {
		return nil, fail(ReasonLoadFailed, "preparing the copy in %s: %w", dest, err)
	}
	return m, nil
}

// runTool runs a tool with stdin, its output to log; its error says the
// last of what it wrote.
func runTool(ctx context.Context, log io.Writer, stdin io.Reader, name string, args ...string) error {
	tail := &tailBuffer{max: 2 << 10}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	cmd.Stdout = io.MultiWriter(log, tail)
	cmd.Stderr = io.MultiWriter(log, tail)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, tail.String())
	}
	return nil
}
