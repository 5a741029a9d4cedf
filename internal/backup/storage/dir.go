package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// tempPrefix starts the name of a file that Put is still writing: List
// never returns such names, and keys may not use them.
const tempPrefix = ".dbop-tmp-"

// dirStore keeps each key as a file under root.
type dirStore struct {
	root string // absolute and clean
}

// NewDir returns the store of the directory root (a PersistentVolumeClaim
// mounted in the backup Job). Keys are slash-separated relative paths under
// root; keys that would escape root ("..", absolute) are refused. Put writes
// a temporary file beside the key, fsyncs it, renames it into place and
// fsyncs the directory. The directory must exist: it is not created (a
// missing mount must not turn into backups on the container's own disk).
func NewDir(root string) Store {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	return &dirStore{root: filepath.Clean(root)}
}

func (d *dirStore) Location(key string) string {
	return "file://" + strings.TrimSuffix(filepath.ToSlash(d.root), "/") + "/" + key
}

func (d *dirStore) path(key string) string {
	return filepath.Join(d.root, filepath.FromSlash(key))
}

// fsError names the backup directory and what went wrong in terms an
// operator can act on, wrapping err.
func (d *dirStore) fsError(what string, err error) error {
	var cause string
	switch {
	case errors.Is(err, syscall.ENOSPC):
		cause = "no space left on device"
	case errors.Is(err, syscall.EDQUOT):
		cause = "disk quota exceeded"
	case errors.Is(err, syscall.EROFS):
		cause = "read-only file system"
	case errors.Is(err, fs.ErrPermission):
		cause = "permission denied (check the volume's ownership and the pod's fsGroup)"
	case errors.Is(err, syscall.EIO):
		cause = "I/O error"
	default:
		return fmt.Errorf("backup directory %s: %s: %w", d.root, what, err)
	}
	return fmt.Errorf("backup directory %s: %s (%s): %w", d.root, cause, what, err)
}

// checkRoot fails when the backup directory is missing or not a directory.
func (d *dirStore) checkRoot() error {
	fi, err := os.Stat(d.root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("backup directory %s does not exist (is the volume mounted?): %w", d.root, err)
	case err != nil:
		return d.fsError("checking the directory", err)
	case !fi.IsDir():
		return fmt.Errorf("backup directory %s is not a directory", d.root)
	}
	return nil
}

func (d *dirStore) check(_ context.Context) error {
	if err := d.checkRoot(); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.root, tempPrefix+"check.*")
	if err != nil {
		return d.fsError("creating a file", err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return d.fsError("removing a file", err)
	}
	return nil
}

func (d *dirStore) Put(ctx context.Context, key string, r io.Reader) (n int64, err error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", d.Location(key), err)
	}
	if err := d.checkRoot(); err != nil {
		return 0, err
	}
	what := fmt.Sprintf("writing %q", key)
	full := d.path(key)
	dir := filepath.Dir(full)
	if err := d.mkdirAll(dir); err != nil {
		return 0, d.fsError(what, err)
	}
	f, err := os.CreateTemp(dir, tempPrefix+filepath.Base(full)+".*")
	if err != nil {
		return 0, d.fsError(what, err)
	}
	tmp := f.Name()
	// CreateTemp makes it 0600; group-readable lets a restore pod that
	// shares the volume's fsGroup read it.
	if err := f.Chmod(0o640); err != nil {
		f.Close()
		os.Remove(tmp)
		return 0, d.fsError(what, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close() // a second Close only returns an error
			_ = os.Remove(tmp)
		}
	}()

	src := &sourceReader{ctx: ctx, r: r}
	buf := make([]byte, 1<<20)
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			w, werr := f.Write(buf[:m])
			n += int64(w)
			if werr != nil {
				return n, d.fsError(what, werr)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if src.err == nil { // the context ended
				return n, fmt.Errorf("%s: %w", d.Location(key), rerr)
			}
			return n, sourceError(d.Location(key), rerr)
		}
	}
	if err := f.Sync(); err != nil {
		return n, d.fsError(what, err)
	}
	if err := f.Close(); err != nil {
		return n, d.fsError(what, err)
	}
	if err := os.Rename(tmp, full); err != nil {
		return n, d.fsError(what, err)
	}
	if err := syncDir(dir); err != nil {
		// The file is in place but may not survive a crash: report it,
		// and leave it (it is complete).
		return n, d.fsError(what, err)
	}
	return n, nil
}

// mkdirAll creates dir (under root) and its missing parents, fsyncing each
// parent that gained an entry so that the new path survives a crash.
func (d *dirStore) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && dir != d.root {
		if err := d.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

// syncDir fsyncs a directory, making its entries (a rename, a new file) durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: the file system cannot sync directories
		return err
	}
	return nil
}

func (d *dirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Location(key), err)
	}
	if err := d.checkRoot(); err != nil {
		return nil, err
	}
	f, err := os.Open(d.path(key))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("backup %s: %w", d.Location(key), ErrNotFound)
	}
	if err != nil {
		return nil, d.fsError(fmt.Sprintf("opening %q", key), err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, d.fsError(fmt.Sprintf("opening %q", key), err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("backup %s is not a regular file (%s): %w", d.Location(key), fi.Mode().Type(), ErrNotFound)
	}
	return f, nil
}

func (d *dirStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validatePath(prefix); err != nil {
		return nil, err
	}
	if err := d.checkRoot(); err != nil {
		return nil, err
	}
	// Walk only the deepest directory that the prefix names in full.
	start := prefix
	if !strings.HasSuffix(start, "/") {
		start = path.Dir(start)
	}
	startDir := d.path(strings.TrimSuffix(start, "/"))
	keys := []string{}
	err := filepath.WalkDir(startDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				if p == startDir {
					return fs.SkipAll // nothing under that prefix
				}
				return nil // deleted while listing
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), tempPrefix) || !e.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("listing %s: %w", d.Location(prefix), ctx.Err())
		}
		return nil, d.fsError(fmt.Sprintf("listing %q", prefix), err)
	}
	sort.Strings(keys)
	return keys, nil
}

func (d *dirStore) Delete(ctx context.Context, key string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", d.Location(key), err)
	}
	if err := d.checkRoot(); err != nil {
		return err
	}
	full := d.path(key)
	if fi, err := os.Lstat(full); err == nil && fi.IsDir() {
		return fmt.Errorf("backup %s is a directory, not a backup file", d.Location(key))
	}
	err := os.Remove(full)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return d.fsError(fmt.Sprintf("deleting %q", key), err)
	}
	_ = syncDir(filepath.Dir(full)) // durability of a deletion is best effort
	d.removeEmptyParents(filepath.Dir(full))
	return nil
}

// removeEmptyParents removes the directories a deletion left empty, up to
// (not including) the root, as an object store has no empty "directories".
// Best effort: a directory that is not empty (or just got a file) stays.
func (d *dirStore) removeEmptyParents(dir string) {
	root := filepath.Clean(d.root)
	for dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}
