package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

// TestBaseBackupWALStart reads where a recovery starts from the
// backup_label at the head of pg_basebackup's tar; "" when the head has none.
func TestBaseBackupWALStart(t *testing.T) {
	tarOf := func(files map[string]string, order ...string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, name := range order {
			_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(files[name]))})
			_, _ = tw.Write([]byte(files[name]))
		}
		_ = tw.Close()
		return b.Bytes()
	}
	label := "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\nSTART TIMELINE: 1\n"
	files := map[string]string{"backup_label": label, "PG_VERSION": "15\n"}
	if got := baseBackupWALStart(tarOf(files, "backup_label", "PG_VERSION")); got != "000000010000000000000002" {
		t.Errorf("WAL start %q", got)
	}
	if got := baseBackupWALStart(tarOf(files, "PG_VERSION")); got != "" {
		t.Errorf("no label, WAL start %q", got)
	}
	// Cut inside the label (a head shorter than the label's entry).
	if got := baseBackupWALStart(tarOf(files, "backup_label")[:600]); got != "" {
		t.Errorf("a cut label, WAL start %q", got)
	}
}

// TestPruneArchive: the archive keeps everything from where the oldest kept
// physical backup of this Database starts; it is not touched while no
// physical backup is kept or while one does not say where it starts, and
// another Database's backups (another UID) do not count.
func TestPruneArchive(t *testing.T) {
	ctx := context.Background()
	const prefix = "shop/orders/_wal/uid-1"
	put := func(store storage.Store, name, uid, method, walStart string) {
		t.Helper()
		m := Manifest{Format: FormatVersion, Namespace: "shop", Database: "orders", DatabaseUID: uid, Backup: name,
			Method: method, WALStart: walStart, CompletedAt: time.Now(),
			Files: []File{{Name: "base.tar", Kind: KindBaseBackup, SHA256: strings.Repeat("a", 64)}}}
		b, _ := json.Marshal(m)
		if _, err := store.Put(ctx, Path("shop", "orders", name)+"/"+ManifestName, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	archived := func(store storage.Store) []string {
		t.Helper()
		a := wal.Archive{Store: store, Prefix: prefix}
		entries, err := a.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name)
		}
		return names
	}
	setup := func() storage.Store {
		store := storage.NewDir(t.TempDir())
		a := wal.Archive{Store: store, Prefix: prefix}
		src := t.TempDir()
		for _, name := range []string{"000000010000000000000001", "000000010000000000000002", "000000010000000000000003", "00000002.history", "000000020000000000000004"} {
			f := src + "/" + name
			if err := writeTestFile(f, name); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Push(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		return store
	}
	just := &Manifest{Namespace: "shop", Database: "orders", DatabaseUID: "uid-1", Backup: "b-new"}

	store := setup()
	put(store, "b-old", "uid-1", MethodPhysical, "000000010000000000000003")
	put(store, "b-new", "uid-1", MethodPhysical, "000000020000000000000004")
	put(store, "logical", "uid-1", MethodLogical, "")
	put(store, "earlier-db", "uid-0", MethodPhysical, "000000010000000000000001")
	n, from, err := PruneArchive(ctx, store, prefix, just, time.Time{})
	if err != nil || n != 2 || from != "000000010000000000000003" {
		t.Errorf("pruned %d before %s (%v), want 2 before the oldest kept backup's start", n, from, err)
	}
	if got, want := strings.Join(archived(store), " "), "000000010000000000000003 00000002.history 000000020000000000000004"; got != want {
		t.Errorf("archive holds %s, want %s", got, want)
	}

	for name, backups := range map[string][][3]string{
		"no physical backup kept":            {{"logical", MethodLogical, ""}},
		"a physical backup without WALStart": {{"b-old", MethodPhysical, ""}, {"b-new", MethodPhysical, "000000020000000000000004"}},
	} {
		store := setup()
		for _, b := range backups {
			put(store, b[0], "uid-1", b[1], b[2])
		}
		if n, _, err := PruneArchive(ctx, store, prefix, just, time.Time{}); err != nil || n != 0 || len(archived(store)) != 5 {
			t.Errorf("%s: pruned %d (%v), archive %v, want it whole", name, n, err, archived(store))
		}
	}
}

func writeTestFile(name, contents string) error {
	return os.WriteFile(name, []byte(contents), 0o600)
}

// failingGet fails reading one key, as a store that answers 503 once.
type failingGet struct {
	storage.Store
	key string
}

func (f failingGet) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == f.key {
		return nil, errors.New("503 Slow Down")
	}
	return f.Store.Get(ctx, key)
}

// TestPruneArchiveKeepsAllWhenAManifestIsUnreadable: a manifest that
// cannot be read may be a kept backup's, starting earlier than any other:
// the archive is kept whole, and the run says so (found by a second
// reader: the backup was skipped and the WAL it needs deleted).
func TestPruneArchiveKeepsAllWhenAManifestIsUnreadable(t *testing.T) {
	ctx := context.Background()
	const prefix = "shop/orders/_wal/uid-1"
	store := storage.NewDir(t.TempDir())
	a := wal.Archive{Store: store, Prefix: prefix}
	src := t.TempDir()
	for _, name := range []string{"000000010000000000000001", "000000010000000000000002", "000000010000000000000003"} {
		if err := writeTestFile(src+"/"+name, name); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Push(ctx, src+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	for name, start := range map[string]string{"old": "000000010000000000000001", "new": "000000010000000000000003"} {
		m := Manifest{Format: FormatVersion, Namespace: "shop", Database: "orders", DatabaseUID: "uid-1", Backup: name,
			Method: MethodPhysical, WALStart: start, CompletedAt: time.Now(),
			Files: []File{{Name: "base.tar", Kind: KindBaseBackup, SHA256: strings.Repeat("a", 64)}}}
		b, _ := json.Marshal(m)
		if _, err := store.Put(ctx, Path("shop", "orders", name)+"/"+ManifestName, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	flaky := failingGet{Store: store, key: Path("shop", "orders", "old") + "/" + ManifestName}
	just := &Manifest{Namespace: "shop", Database: "orders", DatabaseUID: "uid-1", Backup: "new"}
	n, _, err := PruneArchive(ctx, flaky, prefix, just, time.Time{})
	if err == nil || n != 0 || !strings.Contains(err.Error(), "503") {
		t.Errorf("pruned %d (%v), want nothing and the error", n, err)
	}
	if entries, _ := a.List(ctx); len(entries) != 3 {
		t.Errorf("the archive holds %d files, want all 3", len(entries))
	}
}
