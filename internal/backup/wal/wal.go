// Package wal archives PostgreSQL's WAL files to a backup target (a volume
// or an S3 bucket) and fetches them back for a recovery: the server's
// archive_command and restore_command call the manager's wal-push and
// wal-fetch subcommands, which call Push and Fetch.
//
// Every archived file has an entry beside it (<name>.json: size, SHA-256,
// when it was archived), written after the file itself: a file without an
// entry is an interrupted push, never fetched. A file is never
// overwritten with other contents (PostgreSQL may archive the same one
// twice after a crash: the same contents are accepted again), and a
// fetched file whose checksum does not match is refused before the server
// reads it, so a recovery stops at the last good point and says why.
package wal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"example.com/database-operator/internal/backup/storage"
)

// entrySuffix names the entry beside an archived file.
const entrySuffix = ".json"

// Entry is what the archive records of one file.
type Entry struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	Archived time.Time `json:"archived"`
	// Info is what the archiver knows of the file's contents (a binary
	// log's GTIDs and times: package binlog); none for WAL.
	Info json.RawMessage `json:"info,omitempty"`
	// Existed: Push found the same contents archived before.
	Existed bool `json:"-"`
}

var (
	// ErrNotArchived is wrapped by Fetch's error for a file the archive
	// does not hold (PostgreSQL asks for files that may not exist).
	ErrNotArchived = errors.New("not in the archive")
	// ErrCorrupt is wrapped by Fetch's error for a file whose contents do
	// not match its entry.
	ErrCorrupt = errors.New("archived file is corrupt")
	// ErrConflict is wrapped by Push's error for a file archived before
	// with other contents.
	ErrConflict = errors.New("archived before with other contents")
)

// names PostgreSQL archives: segments (timeline, log, segment: 24 hex
// digits), timeline history files, backup history files, and the partial
// last segment of a promoted standby's old timeline.
var walName = regexp.MustCompile(`^([0-9A-F]{24}(\.partial|\.[0-9A-F]{8}\.backup)?|[0-9A-F]{8}\.history)$`)

// ValidName reports whether name is a file PostgreSQL archives.
func ValidName(name string) bool { return walName.MatchString(name) }

// Archive is a Database's WAL archive: the files under Prefix in Store.
// Package binlog keeps MariaDB's binary logs in one too (Names).
type Archive struct {
	Store  storage.Store
	Prefix string // e.g. <namespace>/<database>/wal
	Now    func() time.Time
	// Names says which file names the archive holds (default ValidName:
	// PostgreSQL's WAL files); anything else under Prefix is not listed.
	Names func(string) bool
}

func (a Archive) key(name string) string { return path.Join(a.Prefix, name) }

func (a Archive) valid(name string) bool {
	if a.Names != nil {
		return a.Names(name)
	}
	return ValidName(name)
}

func (a Archive) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Push archives the file at file (the server's %p). It returns the entry,
// the existing one when the same contents were archived before.
func (a Archive) Push(ctx context.Context, file string) (Entry, error) {
	return a.PushInfo(ctx, file, nil)
}

// PushInfo is Push recording info (JSON) in the file's entry.
func (a Archive) PushInfo(ctx context.Context, file string, info any) (Entry, error) {
	name := filepath.Base(file)
	if !a.valid(name) {
		return Entry{}, fmt.Errorf("%q is not the name of a file this archive holds", name)
	}
	sum, size, err := checksumFile(file)
	if err != nil {
		return Entry{}, err
	}
	switch old, err := a.Entry(ctx, name); {
	case err == nil && old.SHA256 == sum && old.Size == size:
		old.Existed = true
		return old, nil
	case err == nil:
		return Entry{}, fmt.Errorf("%s: %w (%d bytes, sha256 %s; now %d bytes, sha256 %s): refusing to overwrite it; "+
			"another server may be archiving into the same place", a.Store.Location(a.key(name)), ErrConflict, old.Size, old.SHA256, size, sum)
	case !errors.Is(err, ErrNotArchived):
		return Entry{}, err
	}
	f, err := os.Open(file)
	if err != nil {
		return Entry{}, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := a.Store.Put(ctx, a.key(name), io.TeeReader(f, h))
	if err != nil {
		return Entry{}, fmt.Errorf("archiving %s: %w", name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum || n != size {
		// The file changed while it was read: PostgreSQL hands over
		// only complete files, so something else writes it.
		return Entry{}, fmt.Errorf("archiving %s: it changed while it was read (%d bytes, sha256 %s, then %d bytes, sha256 %s)", name, size, sum, n, got)
	}
	e := Entry{Name: name, Size: size, SHA256: sum, Archived: a.now().UTC()}
	if info != nil {
		if e.Info, err = json.Marshal(info); err != nil {
			return Entry{}, err
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return Entry{}, err
	}
	if _, err := a.Store.Put(ctx, a.key(name)+entrySuffix, strings.NewReader(string(b))); err != nil {
		return Entry{}, fmt.Errorf("recording %s in the archive: %w", name, err)
	}
	return e, nil
}

// Entry reads the entry of an archived file; ErrNotArchived when there
// is none (never archived, or a push that did not finish).
func (a Archive) Entry(ctx context.Context, name string) (Entry, error) {
	r, err := a.Store.Get(ctx, a.key(name)+entrySuffix)
	if errors.Is(err, storage.ErrNotFound) {
		return Entry{}, fmt.Errorf("%s: %w", name, ErrNotArchived)
	}
	if err != nil {
		return Entry{}, err
	}
	defer func() { _ = r.Close() }()
	var e Entry
	if err := json.NewDecoder(io.LimitReader(r, 1<<16)).Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("%s: its archive entry is unreadable: %w", a.Store.Location(a.key(name)+entrySuffix), err)
	}
	if e.Name != name || len(e.SHA256) != sha256.Size*2 {
		return Entry{}, fmt.Errorf("%s: its archive entry names %q with checksum %q", a.Store.Location(a.key(name)+entrySuffix), e.Name, e.SHA256)
	}
	return e, nil
}

// Fetch writes the archived file name to dest (the server's %f and %p),
// verified against its entry first: a corrupt file never reaches dest.
func (a Archive) Fetch(ctx context.Context, name, dest string) (Entry, error) {
	if !a.valid(name) {
		return Entry{}, fmt.Errorf("%q is not the name of a file this archive holds", name)
	}
	e, err := a.Entry(ctx, name)
	if err != nil {
		return Entry{}, err
	}
	r, err := a.Store.Get(ctx, a.key(name))
	if errors.Is(err, storage.ErrNotFound) {
		return Entry{}, fmt.Errorf("%s: %w: its entry is there, the file is not", a.Store.Location(a.key(name)), ErrCorrupt)
	}
	if err != nil {
		return Entry{}, err
	}
	defer func() { _ = r.Close() }()
	tmp := dest + ".fetching"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return Entry{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, e.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return Entry{}, fmt.Errorf("fetching %s: %w", a.Store.Location(a.key(name)), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.SHA256 || n != e.Size {
		_ = os.Remove(tmp)
		return Entry{}, fmt.Errorf("%s: %w: %d bytes with sha256 %s, archived as %d bytes with sha256 %s",
			a.Store.Location(a.key(name)), ErrCorrupt, n, got, e.Size, e.SHA256)
	}
	if err := os.Rename(tmp, dest); err != nil {
		_ = os.Remove(tmp)
		return Entry{}, err
	}
	return e, nil
}

// List returns the entries of every archived file, by name: a timeline's
// segments in WAL order, each timeline's history file before its segments.
func (a Archive) List(ctx context.Context) ([]Entry, error) {
	keys, err := a.Store.List(ctx, a.Prefix)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, k := range keys {
		name, ok := strings.CutSuffix(path.Base(k), entrySuffix)
		if !ok || !a.valid(name) || path.Dir(k) != path.Clean(a.Prefix) {
			continue // not an entry, or one of an archive nested below
		}
		e, err := a.Entry(ctx, name)
		if errors.Is(err, ErrNotArchived) {
			continue // pruned since it was listed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SegmentNumber is the position of the segment a WAL file name (a
// segment, a .partial or a .backup file) belongs to, whatever its
// timeline: its log and segment numbers, as the 16 hex digits compare.
// "" for a timeline history file, which belongs to no segment.
func SegmentNumber(name string) string {
	if len(name) < 24 || strings.HasSuffix(name, ".history") {
		return ""
	}
	return name[8:24]
}

// PruneBefore deletes the archived files of segments before the segment
// of first (a WAL file name), on every timeline; history files stay. Each
// goes as Delete has it. It returns how many files it deleted.
func (a Archive) PruneBefore(ctx context.Context, first string) (int, error) {
	bound := SegmentNumber(first)
	if !ValidName(first) || bound == "" {
		return 0, fmt.Errorf("%q names no WAL segment", first)
	}
	keys, err := a.Store.List(ctx, a.Prefix)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, k := range keys {
		// A streamed segment's pieces go with it.
		if seg, ok := strings.CutSuffix(path.Base(path.Dir(k)), PieceSuffix); ok && path.Dir(path.Dir(k)) == path.Clean(a.Prefix) && ValidName(seg) {
			if s := SegmentNumber(seg); s != "" && s < bound {
				if err := a.Store.Delete(ctx, k); err != nil && !errors.Is(err, storage.ErrNotFound) {
					return deleted, err
				}
			}
			continue
		}
		name, isEntry := strings.CutSuffix(path.Base(k), entrySuffix)
		if isEntry || !ValidName(name) {
			continue // entries go with their files; anything else is not ours
		}
		if seg := SegmentNumber(name); seg == "" || seg >= bound {
			continue
		}
		if err := a.Delete(ctx, name); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

// Delete deletes an archived file, its entry first: a file without an
// entry is never fetched, so an interrupted delete leaves nothing a
// recovery would take for whole. A file already gone is not an error.
func (a Archive) Delete(ctx context.Context, name string) error {
	if err := a.Store.Delete(ctx, a.key(name)+entrySuffix); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("deleting %s: %w", a.Store.Location(a.key(name)+entrySuffix), err)
	}
	if err := a.Store.Delete(ctx, a.key(name)); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("deleting %s: %w", a.Store.Location(a.key(name)), err)
	}
	return nil
}

func checksumFile(file string) (string, int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	sum, n, err := checksum(f)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", file, err)
	}
	return sum, n, nil
}

// Prefix is where a Database's WAL archive lives in its backup target:
// beside its backups, under a name no Backup can have (Backup names are
// DNS subdomains: no "_"), and apart for each incarnation of the Database
// (its UID): a Database created again under the same name starts its
// timelines again, and would find the old one's files under the same names.
func Prefix(namespace, database, uid string) string {
	return path.Join(namespace, database, "_wal", uid)
}
