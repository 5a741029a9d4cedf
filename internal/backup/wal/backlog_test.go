package wal

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestBacklog: after a promotion on timeline 3 at 0/5012678 (segment 5),
// the complete segments of timelines 1 and 2 before segment 5 are the
// backlog; segment 5 of timeline 2 (partial) and timeline 3's are not.
func TestBacklog(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "pg_wal")
	if err := os.Mkdir(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"000000010000000000000002", "000000020000000000000003", "000000020000000000000004",
		"000000020000000000000005", "000000030000000000000005", "000000030000000000000006", "00000002.history",
		"000000020000000000000004.partial"} {
		if err := os.WriteFile(filepath.Join(wal, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	history := "1\t0/3000000\tno recovery target specified\n2\t0/5012678\tno recovery target specified\n"
	if err := os.WriteFile(filepath.Join(wal, "00000003.history"), []byte(history), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Backlog(dir, 16<<20)
	want := []string{"000000010000000000000002", "000000020000000000000003", "000000020000000000000004"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("backlog %v (%v), want %v", got, err, want)
	}

	// Each goes back to the archiver: ready, no longer done (one was
	// ready already; one was removed meanwhile).
	status := filepath.Join(wal, "archive_status")
	if err := os.Mkdir(status, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"000000010000000000000002.done", "000000020000000000000003.ready", "000000020000000000000004.done"} {
		if err := os.WriteFile(filepath.Join(status, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(wal, "000000020000000000000004")); err != nil {
		t.Fatal(err)
	}
	marked, err := MarkBacklog(dir, 16<<20)
	if err != nil || !slices.Equal(marked, []string{"000000010000000000000002"}) {
		t.Errorf("marked %v (%v)", marked, err)
	}
	names, _ := os.ReadDir(status)
	var left []string
	for _, n := range names {
		left = append(left, n.Name())
	}
	if want := []string{"000000010000000000000002.ready", "000000020000000000000003.ready", "000000020000000000000004.done"}; !slices.Equal(left, want) {
		t.Errorf("archive_status holds %v, want %v", left, want)
	}

	// A server that never changed timeline has none.
	if err := os.Remove(filepath.Join(wal, "00000003.history")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(wal, "00000002.history")); err != nil {
		t.Fatal(err)
	}
	if got, err := Backlog(dir, 16<<20); err != nil || len(got) != 0 {
		t.Errorf("backlog without a promotion %v (%v)", got, err)
	}
}

// TestBacklogStopsEachTimelineAtItsSwitch: a replica that followed a
// switch from timeline 1 to 2 inside segment 0x40 holds timeline 1's
// partial segment 0x40 (and a later one, left from before) under full
// names; promoted later to timeline 3, those are not history to archive
// (their archived copies, if any, differ): only timeline 1 before 0x40
// and timeline 2 before its own switch (found by a second reader).
func TestBacklogStopsEachTimelineAtItsSwitch(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "pg_wal")
	if err := os.Mkdir(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00000001000000000000003F", "000000010000000000000040", "000000010000000000000041",
		"000000020000000000000040", "000000020000000000000043", "000000020000000000000044", "000000030000000000000044"} {
		if err := os.WriteFile(filepath.Join(wal, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	history := "1\t0/40800000\tno recovery target specified\n\n2\t0/44800000\tno recovery target specified\n"
	if err := os.WriteFile(filepath.Join(wal, "00000003.history"), []byte(history), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Backlog(dir, 16<<20)
	want := []string{"00000001000000000000003F", "000000020000000000000040", "000000020000000000000043"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("backlog %v (%v), want %v", got, err, want)
	}
}
