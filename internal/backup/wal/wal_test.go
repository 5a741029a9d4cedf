package wal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"example.com/database-operator/internal/backup/storage"
)

const segment = "000000010000000000000003"

func newArchive(t *testing.T) (Archive, string) {
	t.Helper()
	root := t.TempDir()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	return Archive{Store: storage.NewDir(root), Prefix: "shop/orders/wal", Now: func() time.Time { return now }}, root
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPushFetch: a pushed segment comes back byte for byte, with its
// entry; pushing the same contents again is accepted (PostgreSQL re-archives
// after a crash), other contents are refused and the archive keeps the
// first.
func TestPushFetch(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t)
	src := t.TempDir()
	data := bytes.Repeat([]byte("wal"), 1000)
	e, err := a.Push(ctx, writeFile(t, src, segment, data))
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != segment || e.Size != int64(len(data)) || len(e.SHA256) != 64 {
		t.Errorf("entry %+v", e)
	}
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	if _, err := a.Fetch(ctx, segment, dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, data) {
		t.Errorf("fetched %d bytes, want the %d pushed", len(got), len(data))
	}
	if again, err := a.Push(ctx, filepath.Join(src, segment)); err != nil || !again.Existed || again.SHA256 != e.SHA256 || !again.Archived.Equal(e.Archived) {
		t.Errorf("pushing the same contents again: %+v %v, want the first entry", again, err)
	}
	other := writeFile(t, t.TempDir(), segment, []byte("other contents"))
	if _, err := a.Push(ctx, other); !errors.Is(err, ErrConflict) {
		t.Errorf("pushing other contents under the same name: %v, want ErrConflict", err)
	}
	if _, err := a.Fetch(ctx, segment, dest); err != nil {
		t.Errorf("after the refused push: %v", err)
	} else if got, _ := os.ReadFile(dest); !bytes.Equal(got, data) {
		t.Error("the refused push changed the archived segment")
	}
}

// TestFetchRefusesCorruption: a segment whose bytes changed in the
// target, or that is missing beside its entry, is refused and nothing is
// written where the server would read it.
func TestFetchRefusesCorruption(t *testing.T) {
	ctx := context.Background()
	for name, damage := range map[string]func(string) error{
		"a flipped byte": func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			return os.WriteFile(p, b, 0o600)
		},
		"truncated": func(p string) error { return os.Truncate(p, 10) },
		"longer":    func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("x"), 5000), 0o600) },
		"missing":   os.Remove,
	} {
		t.Run(name, func(t *testing.T) {
			a, root := newArchive(t)
			if _, err := a.Push(ctx, writeFile(t, t.TempDir(), segment, bytes.Repeat([]byte("wal"), 1000))); err != nil {
				t.Fatal(err)
			}
			if err := damage(filepath.Join(root, "shop/orders/wal", segment)); err != nil {
				t.Fatal(err)
			}
			dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
			if _, err := a.Fetch(ctx, segment, dest); !errors.Is(err, ErrCorrupt) {
				t.Errorf("fetch: %v, want ErrCorrupt", err)
			}
			if left, _ := filepath.Glob(dest + "*"); len(left) != 0 {
				t.Errorf("a corrupt segment left %v for the server", left)
			}
		})
	}
}

// TestUnfinishedPushIsNotArchived: a file without its entry (the push was
// interrupted between the two) is not in the archive: fetch says so and a
// new push completes it.
func TestUnfinishedPushIsNotArchived(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t)
	data := []byte("half")
	if _, err := a.Store.Put(ctx, "shop/orders/wal/"+segment, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	if _, err := a.Fetch(ctx, segment, dest); !errors.Is(err, ErrNotArchived) {
		t.Errorf("fetch of an unfinished push: %v, want ErrNotArchived", err)
	}
	if _, err := a.Push(ctx, writeFile(t, t.TempDir(), segment, []byte("whole segment"))); err != nil {
		t.Fatalf("pushing over an unfinished push: %v", err)
	}
	if _, err := a.Fetch(ctx, segment, dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); string(got) != "whole segment" {
		t.Errorf("fetched %q", got)
	}
}

// TestNamesAndList: only PostgreSQL's archive file names are taken, and
// List returns them in WAL order.
func TestNamesAndList(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t)
	src := t.TempDir()
	for _, name := range []string{"000000020000000000000004", "00000002.history", "000000010000000000000004.partial", segment, "000000010000000000000002.00000028.backup"} {
		if _, err := a.Push(ctx, writeFile(t, src, name, []byte(name))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, bad := range []string{"postgresql.conf", "../000000010000000000000003", "00000001000000000000000g", "0000000100000000000003"} {
		if _, err := a.Push(ctx, writeFile(t, src, filepath.Base(bad), nil)); err == nil {
			t.Errorf("%q pushed", bad)
		}
		if _, err := a.Fetch(ctx, bad, filepath.Join(src, "x")); err == nil {
			t.Errorf("%q fetched", bad)
		}
	}
	entries, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	want := []string{"000000010000000000000002.00000028.backup", segment, "000000010000000000000004.partial", "00000002.history", "000000020000000000000004"}
	if len(names) != len(want) {
		t.Fatalf("listed %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("listed %v, want %v", names, want)
		}
	}
}

// TestPruneBefore: the files of segments before the bound go, on every
// timeline (entry and file both); the bound's segment, later ones and the
// history files stay; a file without an entry goes too (an interrupted
// push), and nothing else under the prefix is touched.
func TestPruneBefore(t *testing.T) {
	ctx := context.Background()
	a, root := newArchive(t)
	src := t.TempDir()
	gone := []string{"000000010000000000000001", "000000010000000000000002.00000028.backup",
		"000000010000000000000003.partial", "000000020000000000000003"}
	kept := []string{"00000001.history", "00000002.history", "000000010000000000000004", "000000020000000000000004",
		"000000020000000000000004.00000060.backup", "000000030000000000000005", "000000020000000100000000"}
	for _, name := range append(append([]string{}, gone...), kept...) {
		if _, err := a.Push(ctx, writeFile(t, src, name, []byte(name))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// An interrupted push (no entry) of an old segment, and a stranger.
	writeFile(t, filepath.Join(root, a.Prefix), "000000010000000000000000", []byte("half"))
	writeFile(t, filepath.Join(root, a.Prefix), "notes.txt", []byte("mine"))

	n, err := a.PruneBefore(ctx, "000000020000000000000004")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(gone)+1 {
		t.Errorf("deleted %d files, want %d", n, len(gone)+1)
	}
	entries, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	slices.Sort(kept)
	if !slices.Equal(names, kept) {
		t.Errorf("left %v, want %v", names, kept)
	}
	for _, name := range append(gone, "000000010000000000000000") {
		for _, f := range []string{name, name + ".json"} {
			if _, err := os.Lstat(filepath.Join(root, a.Prefix, f)); err == nil {
				t.Errorf("%s is still there", f)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(root, a.Prefix, "notes.txt")); err != nil {
		t.Errorf("a file that is no WAL was touched: %v", err)
	}
	if _, err := a.PruneBefore(ctx, "00000002.history"); err == nil {
		t.Error("a history file taken for a bound")
	}
}
