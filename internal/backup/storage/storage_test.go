package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// failingReader yields n bytes of data, then fails.
type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	for i := range p {
		p[i] = 'x'
	}
	f.n -= len(p)
	return len(p), nil
}

// files lists every file and directory under root (temporary ones too).
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDirRoundTrip(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := NewDir(root)
	data := randomBytes(t, 3<<20+17) // more than one copy buffer
	n, err := s.Put(ctx, "ns/db/2026-12-03T10:00:00Z/dump.sql.gz", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(data)) {
		t.Fatalf("Put wrote %d bytes, want %d", n, len(data))
	}
	// The file is where the key says, with nothing else beside it.
	if got := files(t, root); !reflect.DeepEqual(got, []string{"ns/db/2026-12-03T10:00:00Z/dump.sql.gz"}) {
		t.Fatalf("files after Put: %v", got)
	}
	rc, err := s.Get(ctx, "ns/db/2026-12-03T10:00:00Z/dump.sql.gz")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(data))
	}
	// Put replaces an existing key whole.
	if _, err := s.Put(ctx, "ns/db/2026-12-03T10:00:00Z/dump.sql.gz", strings.NewReader("short")); err != nil {
		t.Fatal(err)
	}
	rc, err = s.Get(ctx, "ns/db/2026-12-03T10:00:00Z/dump.sql.gz")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(rc)
	rc.Close()
	if string(got) != "short" {
		t.Fatalf("after overwrite Get = %q", got)
	}
	if loc, want := s.Location("ns/db/x"), "file://"+root+"/ns/db/x"; loc != want {
		t.Fatalf("Location = %q, want %q", loc, want)
	}
}

func TestDirFailedPutLeavesNothing(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := NewDir(root)
	streamErr := errors.New("pg_dump exited with status 1")
	_, err := s.Put(ctx, "a/b/dump", &failingReader{n: 2<<20 + 5, err: streamErr})
	if !errors.Is(err, streamErr) {
		t.Fatalf("Put error = %v, want the stream's error", err)
	}
	if !strings.Contains(err.Error(), "reading the backup stream") {
		t.Fatalf("Put error %q does not blame the backup stream", err)
	}
	if got := files(t, root); len(got) != 0 {
		t.Fatalf("a failed Put left %v", got)
	}
	if _, err := s.Get(ctx, "a/b/dump"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after failed Put = %v, want ErrNotFound", err)
	}

	// A failed Put over an existing key keeps the old content.
	if _, err := s.Put(ctx, "a/b/dump", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a/b/dump", &failingReader{n: 10, err: streamErr}); err == nil {
		t.Fatal("Put of a failing stream succeeded")
	}
	rc, err := s.Get(ctx, "a/b/dump")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "old" {
		t.Fatalf("after a failed overwrite Get = %q, want the old content", got)
	}

	// A cancelled context stops the Put and leaves nothing either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, "c/dump", strings.NewReader("data")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context = %v", err)
	}
	if got := files(t, root); !reflect.DeepEqual(got, []string{"a/b/dump"}) {
		t.Fatalf("files = %v, want only a/b/dump", got)
	}
}

func TestDirRefusesEscapingKeys(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	root := filepath.Join(parent, "backups")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s := NewDir(root)
	for _, key := range []string{"", "../escape", "a/../../escape", "/etc/passwd", "a/..", "..", "a//b", "./a", "a/", "a/./b", ".dbop-tmp-x"} {
		_, err := s.Put(ctx, key, strings.NewReader("x"))
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := s.Put(ctx, "../escape", strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Errorf("Put(../escape) error %v does not say the key escapes", err)
	}
	if _, err := s.List(ctx, "../"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("List(../) = %v, want ErrInvalidKey", err)
	}
	if got := files(t, parent); len(got) != 0 {
		t.Fatalf("refused keys left files: %v", got)
	}
}

func TestDirListSortedWithoutTempFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := NewDir(root)
	for _, k := range []string{"db2/b", "db1/z", "db1/a/2", "db1/a/1", "db10/x", "top"} {
		if _, err := s.Put(ctx, k, strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	// A Put in progress (or one killed with the Job) leaves a temporary file.
	if err := os.WriteFile(filepath.Join(root, "db1", tempPrefix+"z.123"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]string{
		"":      {"db1/a/1", "db1/a/2", "db1/z", "db10/x", "db2/b", "top"},
		"db1/":  {"db1/a/1", "db1/a/2", "db1/z"},
		"db1":   {"db1/a/1", "db1/a/2", "db1/z", "db10/x"},
		"db1/a": {"db1/a/1", "db1/a/2"},
		"db1/z": {"db1/z"},
		"nope/": {},
		"nope":  {},
		"t":     {"top"},
	} {
		got, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestDirDeleteAndGetMissing(t *testing.T) {
	ctx := context.Background()
	s := NewDir(t.TempDir())
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if _, err := s.Put(ctx, "a/b", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	for _, k := range []string{"a/b", "never/was", "a/b/c"} {
		_, err := s.Get(ctx, k)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%q) = %v, want ErrNotFound", k, err)
		}
		if !strings.Contains(err.Error(), s.Location(k)) {
			t.Errorf("Get(%q) error %q does not name %s", k, err, s.Location(k))
		}
	}
	if got, err := s.List(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("List after Delete = %v, %v", got, err)
	}
}

func TestDirMissingRoot(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "not-mounted")
	s := NewDir(root)
	_, err := s.Put(ctx, "a", strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Put into a missing directory = %v", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Put created the missing backup directory: %v", err)
	}
	if err := Check(ctx, s); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check of a missing directory = %v", err)
	}
	if err := Check(ctx, NewDir(t.TempDir())); err != nil {
		t.Fatalf("Check of a writable directory: %v", err)
	}
}

// TestDirFull fills a 256 KiB tmpfs: the Put fails saying so, and leaves
// no partial file.
func TestDirFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	ctx := context.Background()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	s := NewDir(dir)
	if err := Check(ctx, s); err != nil {
		t.Fatalf("Check of an empty tmpfs: %v", err)
	}
	_, err := s.Put(ctx, "ns/db/dump", bytes.NewReader(randomBytes(t, 1<<20)))
	if err == nil {
		t.Fatal("Put of 1 MiB into a 256 KiB tmpfs succeeded")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "backup directory "+dir+": no space left on device") {
		t.Fatalf("Put error %q does not say the backup directory is full", err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("a failed Put left %v", got)
	}
	// The space is free again: a small backup fits.
	if _, err := s.Put(ctx, "ns/db/small", strings.NewReader("fits")); err != nil {
		t.Fatalf("Put after the failure: %v", err)
	}
}
