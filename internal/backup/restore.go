package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/engine"
)

// RestoreOptions describe one restore.
type RestoreOptions struct {
	// Server is the fresh instance the backup is loaded into.
	Server Server
	Store  storage.Store
	// Path is the backup's directory in the target.
	Path string
	// Scratch is a directory for the downloaded files (an emptyDir in the
	// Job): every file is downloaded and verified before anything is loaded.
	Scratch string
}

// ErrNoManifest is wrapped by ReadManifest's error when there is no
// manifest: no backup there, or not any more.
var ErrNoManifest = errors.New("its manifest is missing")

// ReadManifest reads and validates a backup's manifest.
func ReadManifest(ctx context.Context, store storage.Store, dir string) (*Manifest, error) {
	r, err := store.Get(ctx, dir+"/"+ManifestName)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return nil, fail(ReasonInvalid, "no backup at %s: %w (an unfinished or deleted backup?)", store.Location(dir), ErrNoManifest)
		}
		return nil, fail(ReasonTargetFailed, "reading the manifest of %s: %w", store.Location(dir), err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, fail(ReasonTargetFailed, "reading the manifest of %s: %w", store.Location(dir), err)
	}
	m, err := parseManifest(b)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return nil, fail(ReasonInvalid, "%s: %w", store.Location(dir), err)
	}
	return m, nil
}

// Restore verifies a backup and loads it. Every file is downloaded and its
// size and SHA-256 checked against the manifest first; a corrupt or
// incomplete backup is refused before the server is touched. The backup
// itself is only read.
func Restore(ctx context.Context, o RestoreOptions) (*Manifest, error) {
	m, err := ReadManifest(ctx, o.Store, o.Path)
	if err != nil {
		return nil, err
	}
	if m.Method == MethodPhysical {
		return nil, fail(ReasonInvalid, "%s is a physical backup (a data directory): it is not loaded into a running server; "+
			"restoring one into a new Database is not built yet (ExtractPhysical unpacks it for a server to start on)", o.Store.Location(o.Path))
	}
	// A MariaDB dump loads into MariaDB, a MySQL dump into MySQL.
	if m.Engine != o.Server.Engine {
		return nil, fail(ReasonInvalid, "%s is a %s backup and cannot be restored into %s", o.Store.Location(o.Path), m.Engine, o.Server.Engine)
	}
	// Only into an empty server: a restore never replaces data (a Database
	// recreated over its retained volumes keeps them).
	if err := checkEmpty(ctx, o.Server); err != nil {
		return nil, err
	}
	local := make([]string, len(m.Files))
	for i, f := range m.Files {
		if local[i], err = download(ctx, o.Store, o.Path, f, o.Scratch); err != nil {
			return nil, err
		}
	}
	for i, f := range m.Files {
		if err := load(ctx, o.Server, f, local[i]); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ReasonNotEmpty means the server to restore into already holds data.
const ReasonNotEmpty = "TargetNotEmpty"

func checkEmpty(ctx context.Context, s Server) error {
	inst, err := s.open(ctx)
	if err != nil {
		return fail(ReasonDatabaseUnreachable, "%w", err)
	}
	defer inst.Close()
	empty, err := inst.Empty(ctx)
	switch {
	case err != nil:
		return fail(ReasonDatabaseUnreachable, "%w", err)
	case !empty:
		return fail(ReasonNotEmpty, "the server already holds data: a backup is only loaded into an empty one, nothing was changed")
	}
	return nil
}

// download copies one file of a backup to dir and verifies it.
func download(ctx context.Context, store storage.Store, path string, f File, dir string) (string, error) {
	r, err := store.Get(ctx, path+"/"+f.Name)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return "", fail(ReasonCorrupt, "backup %s is incomplete: %s is missing; nothing was restored", store.Location(path), f.Name)
		}
		return "", fail(ReasonTargetFailed, "reading %s: %w", store.Location(path+"/"+f.Name), err)
	}
	defer r.Close()
	local := filepath.Join(dir, f.Name)
	out, err := os.Create(local)
	if err != nil {
		return "", fail(ReasonLoadFailed, "scratch space: %w", err)
	}
	defer out.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), r)
	if err != nil {
		return "", fail(ReasonTargetFailed, "downloading %s: %w", store.Location(path+"/"+f.Name), err)
	}
	if err := out.Close(); err != nil {
		return "", fail(ReasonLoadFailed, "scratch space: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != f.Size || got != f.SHA256 {
		return "", fail(ReasonCorrupt, "backup %s is corrupt: %s has %d bytes with SHA-256 %s, the manifest says %d bytes with %s; nothing was restored",
			store.Location(path), f.Name, n, got, f.Size, f.SHA256)
	}
	return local, nil
}

// load runs the client tool that loads one verified file.
func load(ctx context.Context, s Server, f File, local string) error {
	host, port := "--host="+s.Host, "--port="+strconv.Itoa(s.Port)
	var cmd []string
	var stdin io.Reader
	switch f.Kind {
	case KindGlobals:
		// Roles other than the connecting superuser's and the replication
		// account's: their passwords are the new Database's own (from its
		// Secrets), not the source's, and both roles exist already.
		b, err := os.ReadFile(local)
		if err != nil {
			return fail(ReasonLoadFailed, "%w", err)
		}
		stdin = bytes.NewReader(withoutRole(withoutRole(b, s.User), engine.ReplicationUser))
		cmd = []string{engine.ProfileOf(s.Engine).Client, host, port, "--username=" + s.User, "--no-password", "--dbname=postgres", "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1"}
	case KindPGDump:
		cmd = []string{"pg_restore", host, port, "--username=" + s.User, "--no-password", "--exit-on-error"}
		if f.Database == "postgres" {
			// The database exists in every fresh server: load into it.
			cmd = append(cmd, "--dbname=postgres", "--clean", "--if-exists")
		} else {
			cmd = append(cmd, "--create", "--dbname=postgres")
		}
		cmd = append(cmd, local)
	case KindUsers:
		b, err := os.ReadFile(local)
		if err != nil {
			return fail(ReasonLoadFailed, "%w", err)
		}
		stdin = bytes.NewReader(withoutAccounts(b, s.User, engine.ReplicationUser, "mariadb.sys"))
		cmd = append(append([]string{engine.ProfileOf(s.Engine).Client}, s.mysqlConnArgs()...), "--binary-mode")
	case KindSQL:
		client := engine.ProfileOf(s.Engine).Client
		in, err := os.Open(local)
		if err != nil {
			return fail(ReasonLoadFailed, "%w", err)
		}
		defer in.Close()
		stdin = bufio.NewReaderSize(in, 1<<20)
		cmd = append(append([]string{client}, s.mysqlConnArgs()...), "--binary-mode")
	default:
		return fail(ReasonInvalid, "backup file %s has an unknown kind %q", f.Name, f.Kind)
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Env = clientEnv(s)
	c.Stdin = stdin
	stderr := &tailBuffer{max: 4 << 10}
	c.Stderr, c.Stdout = stderr, io.Discard
	if err := c.Run(); err != nil {
		return fail(classifyLoad(stderr.String()), "loading %s %s: %s failed: %v: %s", f.Name, what(dumpJob{file: f}), cmd[0], err, stderr.String())
	}
	return nil
}

func classifyLoad(stderr string) string {
	if connectionFailure.MatchString(stderr) {
		return ReasonDatabaseUnreachable
	}
	return ReasonLoadFailed
}

// withoutRole drops the statements of pg_dumpall's globals that create or
// alter one role.
func withoutRole(globals []byte, role string) []byte {
	re := regexp.MustCompile(`^(CREATE|ALTER) ROLE "?` + regexp.QuoteMeta(role) + `"?( |;)`)
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(globals, []byte("\n")) {
		if !re.Match(line) {
			out.Write(line)
		}
	}
	return out.Bytes()
}

// withoutAccounts drops the lines of a MariaDB users dump that create,
// grant to or alter the given accounts (any host): the superuser keeps the
// restored Database's password, the system account stays as installed.
func withoutAccounts(users []byte, names ...string) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(users, []byte("\n")) {
		skip := false
		for _, n := range names {
			if bytes.Contains(line, []byte("`"+n+"`@")) || bytes.Contains(line, []byte("'"+n+"'@")) {
				skip = true
			}
		}
		if !skip {
			out.Write(line)
		}
	}
	return out.Bytes()
}

// String makes an error's reason visible in logs.
func (e *Error) String() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }

// ExtractPhysical unpacks the physical backup at path into dest, which
// must not exist yet (a server's new data directory): the archive is
// downloaded into scratch and checked against the manifest first, so a
// corrupt or incomplete backup is refused before anything is written to
// dest. A server started on dest with recovery.signal replays the WAL the
// backup holds, then whatever restore_command gives it.
func ExtractPhysical(ctx context.Context, store storage.Store, path, scratch, dest string) (*Manifest, error) {
	m, local, err := fetchPhysical(ctx, store, path, scratch, dest, KindBaseBackup)
	if err != nil {
		return nil, err
	}
	defer os.Remove(local)
	if err := untar(local, dest); err != nil {
		return nil, fail(ReasonLoadFailed, "unpacking %s into %s: %w", m.Files[0].Name, dest, err)
	}
	return m, nil
}

// fetchPhysical reads the manifest of the physical backup at path, whose
// one file must be of kind, and downloads and verifies that file into
// scratch (its local name returned), once it is sure dest, the data
// directory to make, does not exist yet.
func fetchPhysical(ctx context.Context, store storage.Store, path, scratch, dest, kind string) (*Manifest, string, error) {
	m, err := ReadManifest(ctx, store, path)
	if err != nil {
		return nil, "", err
	}
	if m.Method != MethodPhysical || len(m.Files) != 1 || m.Files[0].Kind != kind {
		return nil, "", fail(ReasonInvalid, "%s is not a physical backup of this engine (method %q): it is restored by loading it into a running server", store.Location(path), m.Method)
	}
	if _, err := os.Lstat(dest); err == nil {
		return nil, "", fail(ReasonNotEmpty, "%s exists: a physical backup is unpacked only into a new data directory, nothing was changed", dest)
	}
	local, err := download(ctx, store, path, m.Files[0], scratch)
	if err != nil {
		return nil, "", err
	}
	return m, local, nil
}

// untar unpacks the tar file src into the new directory dest: directories,
// regular files and symbolic links, with their modes; any name that would
// land outside dest is refused.
func untar(src, dest string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dest, 0o700); err != nil {
		return err
	}
	// Every write goes through the root: a path that leaves dest, by its
	// name or through a symbolic link an earlier entry made, is refused.
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q lies outside the data directory", h.Name)
		}
		mode := os.FileMode(h.Mode).Perm()
		if err := untarEntry(root, tr, h, name, mode); err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
}

func untarEntry(root *os.Root, r io.Reader, h *tar.Header, name string, mode os.FileMode) error {
	switch h.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, mode|0o700)
	case tar.TypeReg:
		if err := root.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			return err
		}
		out, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, r); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	case tar.TypeSymlink:
		if err := root.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			return err
		}
		return root.Symlink(h.Linkname, name)
	}
	return fmt.Errorf("type %q, which a data directory does not hold", string(h.Typeflag))
}
