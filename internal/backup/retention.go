package backup

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

// Retention bounds the completed backups kept. Zero values keep everything.
type Retention struct {
	KeepLast int
	MaxAge   time.Duration
}

func (r Retention) bounded() bool { return r.KeepLast > 0 || r.MaxAge > 0 }

// Pruned is what retention deleted after a backup.
type Pruned struct {
	// Backups names the backups deleted.
	Backups []string
	// Archived counts the archived files deleted (WAL segments or binary
	// log files) that no kept backup's recovery reads; ArchiveKeptFrom
	// says where the kept ones begin: the first WAL file the oldest base
	// backup kept reads, or the oldest GTID position a kept backup
	// replays from.
	Archived        int
	ArchiveKeptFrom string
}

// ParseMaxAge reads spec.backup.retention.maxAge: a number and h, d or w.
func ParseMaxAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	unit := map[byte]time.Duration{'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}[s[len(s)-1]]
	n, err := strconv.Atoi(s[:len(s)-1])
	if unit == 0 || err != nil || n <= 0 {
		return 0, fmt.Errorf("maxAge %q is not a positive duration such as 30d, 12h or 2w", s)
	}
	return time.Duration(n) * unit, nil
}

// Prune applies retention to a Database's backups at a target, right after
// the backup just completed: it is never deleted, and it counts towards
// KeepLast. Only backups whose manifest carries the same Database UID are
// the Database's: a backup of an earlier Database of the same name (maybe
// the one this Database was restored from) or of another cluster is neither
// counted nor deleted. A backup written before manifests carried the UID is
// the Database's when it started after the Database was created (created,
// when known); older ones are left alone. A backup is deleted manifest
// first, so a half-deleted one is never taken for a complete backup. Prune
// returns the names of the backups it deleted.
func Prune(ctx context.Context, store storage.Store, just *Manifest, created time.Time, r Retention, now time.Time) ([]string, error) {
	if !r.bounded() {
		return nil, nil
	}
	if just.DatabaseUID == "" {
		return nil, fmt.Errorf("retention needs the Database's UID (--database-uid): without it another Database's backups could be taken for its own")
	}
	backups, _, err := ownBackups(ctx, store, just, created)
	if err != nil {
		return nil, err
	}
	// Newest first.
	slices.SortFunc(backups, func(a, b ownBackup) int { return b.m.CompletedAt.Compare(a.m.CompletedAt) })
	var pruned []string
	kept := 0
	for _, b := range backups {
		if b.name == just.Backup || r.keeps(kept, b.m, now) {
			kept++
			continue
		}
		dir := Path(just.Namespace, just.Database, b.name)
		if err := deleteBackup(ctx, store, dir, b.m); err != nil {
			return pruned, err
		}
		pruned = append(pruned, b.name)
	}
	return pruned, nil
}

// ownBackup is one of the Database's backups, named by its directory,
// whatever its manifest says.
type ownBackup struct {
	name string
	m    *Manifest
}

// ownBackups lists the backups at the target that are the Database's (see
// Prune), and the errors of the manifests it could not read (whose they
// are is not known).
func ownBackups(ctx context.Context, store storage.Store, just *Manifest, created time.Time) ([]ownBackup, []error, error) {
	prefix := Path(just.Namespace, just.Database, "") + "/"
	keys, err := store.List(ctx, prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("listing backups at %s: %w", store.Location(prefix), err)
	}
	var backups []ownBackup
	var unreadable []error
	for _, k := range keys {
		if path.Base(k) != ManifestName || path.Dir(path.Dir(k))+"/" != prefix {
			continue
		}
		m, err := ReadManifest(ctx, store, path.Dir(k))
		if err != nil {
			if !errors.Is(err, ErrNoManifest) { // deleted since it was listed
				unreadable = append(unreadable, err)
			}
			continue // not ours to judge; left alone
		}
		legacy := m.DatabaseUID == "" && !created.IsZero() && m.StartedAt.After(created)
		if m.DatabaseUID != just.DatabaseUID && !legacy {
			continue
		}
		backups = append(backups, ownBackup{name: path.Base(path.Dir(k)), m: m})
	}
	return backups, unreadable, nil
}

// keeps says whether retention keeps a backup when kept newer ones are kept
// already: it is neither one too many for KeepLast nor older than MaxAge.
func (r Retention) keeps(kept int, m *Manifest, now time.Time) bool {
	tooMany := r.KeepLast > 0 && kept+1 > r.KeepLast
	tooOld := r.MaxAge > 0 && now.Sub(m.CompletedAt) > r.MaxAge
	return !tooMany && !tooOld
}

func deleteBackup(ctx context.Context, store storage.Store, dir string, m *Manifest) error {
	if err := store.Delete(ctx, dir+"/"+ManifestName); err != nil {
		return fmt.Errorf("deleting %s: %w", store.Location(dir), err)
	}
	for _, f := range m.Files {
		if strings.Contains(f.Name, "/") {
			continue
		}
		if err := store.Delete(ctx, dir+"/"+f.Name); err != nil {
			return fmt.Errorf("deleting %s: %w", store.Location(dir+"/"+f.Name), err)
		}
	}
	return nil
}

// keptBackups lists the Database's backups for an archive's retention:
// an error when one's manifest cannot be read (it may be a kept backup's,
// whose needs are not known: the archive is kept whole).
func keptBackups(ctx context.Context, store storage.Store, just *Manifest, created time.Time) ([]ownBackup, error) {
	if just.DatabaseUID == "" {
		return nil, fmt.Errorf("archive retention needs the Database's UID (--database-uid)")
	}
	backups, unreadable, err := ownBackups(ctx, store, just, created)
	if err != nil {
		return nil, err
	}
	if len(unreadable) > 0 {
		return nil, fmt.Errorf("the archive is kept whole: %w", errors.Join(unreadable...))
	}
	return backups, nil
}

// PruneArchive deletes the archived WAL files of the Database's archive at
// prefix (in the same store) that no kept base backup needs: those before
// the first file the oldest of its kept physical backups reads, on any
// timeline (a recovery only moves forward from there; timeline history
// files are kept, they are small and a recovery reads all of them). It
// deletes nothing while no physical backup is kept, while one does not
// record where it starts, or while a manifest cannot be read (their needs
// are unknown). It returns how many files
// it deleted and the first file kept.
func PruneArchive(ctx context.Context, store storage.Store, prefix string, just *Manifest, created time.Time) (int, string, error) {
	backups, err := keptBackups(ctx, store, just, created)
	if err != nil {
		return 0, "", err
	}
	oldest := ""
	for _, b := range backups {
		if b.m.Method != MethodPhysical {
			continue
		}
		if b.m.WALStart == "" {
			return 0, "", nil
		}
		if oldest == "" || wal.SegmentNumber(b.m.WALStart) < wal.SegmentNumber(oldest) {
			oldest = b.m.WALStart
		}
	}
	if oldest == "" {
		return 0, "", nil
	}
	n, err := wal.Archive{Store: store, Prefix: prefix}.PruneBefore(ctx, oldest)
	return n, oldest, err
}

// PruneBinlogArchive deletes the files of the Database's binary log archive
// at prefix (in the same store) that no replay from a kept backup reads
// (binlog.Archive.Prune), from the GTID positions the kept backups'
// manifests record. It deletes nothing while a manifest cannot be read or
// a kept backup records no position (what it needs is not known). It
// returns how many files it deleted and the oldest position kept backups
// replay from.
func PruneBinlogArchive(ctx context.Context, store storage.Store, prefix string, just *Manifest, created time.Time) (int, string, error) {
	backups, err := keptBackups(ctx, store, just, created)
	if err != nil {
		return 0, "", err
	}
	var positions []binlog.Position
	oldest := binlog.Position{}
	for _, b := range backups {
		p, err := binlog.ParsePosition(b.m.Position)
		if err != nil || len(p) == 0 {
			return 0, "", nil // a backup whose start is not known: keep everything
		}
		positions = append(positions, p)
		for d, g := range p {
			if o, ok := oldest[d]; !ok || g.Sequence < o.Sequence {
				oldest[d] = g
			}
		}
	}
	deleted, err := binlog.Archive{Store: store, Prefix: prefix}.Prune(ctx, positions)
	return len(deleted), oldest.String(), err
}
