package pitr

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

func TestSegmentStart(t *testing.T) {
	for name, want := range map[string]string{
		"000000010000000000000003": "0/3000000",
		"0000000200000001000000FF": "1/FF000000",
	} {
		tli, lsn, err := segmentStart(name, 16<<20)
		if err != nil || lsn.String() != want || tli != int64(name[7]-'0') {
			t.Errorf("%s: timeline %d at %s (%v), want %s", name, tli, lsn, err, want)
		}
	}
	for _, bad := range []string{"00000001000000000000003", "00000002.history", "0000000100000000000000G3"} {
		if _, _, err := segmentStart(bad, 16<<20); err == nil {
			t.Errorf("%q taken for a segment", bad)
		}
	}
}

func TestSwitchPoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "pg_wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	history := "1\t0/4000000\tno recovery target specified\n\n2\t0/5012678\tno recovery target specified\n"
	if err := os.WriteFile(filepath.Join(dir, "pg_wal", "00000003.history"), []byte(history), 0o600); err != nil {
		t.Fatal(err)
	}
	parent, lsn, err := switchPoint(dir, 3)
	if err != nil || parent != 2 || lsn.String() != "0/5012678" {
		t.Errorf("switch point: timeline %d at %s (%v)", parent, lsn, err)
	}
	if _, _, err := switchPoint(dir, 4); err == nil {
		t.Error("a missing history file was read")
	}
}

// TestArchiveEndFollowsTheLatestLine: the segment a recovery to the end
// must reach is the latest timeline's last, or, while it has none yet, the
// last of the timeline it left at its switch point; an abandoned
// timeline's later segments do not count (found by a second reader: a
// replay short on timeline 1 passed once timeline 2's history was
// archived).
func TestArchiveEndFollowsTheLatestLine(t *testing.T) {
	history := "1\t0/40800000\tno recovery target specified\n"
	for name, c := range map[string]struct {
		a    archiveEnd
		want string
	}{
		"one timeline": {archiveEnd{segments: []string{"000000010000000000000003", "000000010000000000000004"}, latest: "00000001"}, "000000010000000000000004"},
		"the new timeline's segments": {archiveEnd{segments: []string{"00000001000000000000003F", "000000010000000000000040",
			"000000010000000000000041", "000000020000000000000040", "000000020000000000000042"}, latest: "00000002", history: history}, "000000020000000000000042"},
		"only its history archived yet": {archiveEnd{segments: []string{"00000001000000000000003E", "00000001000000000000003F",
			"000000010000000000000040", "000000010000000000000041"}, latest: "00000002", history: history}, "00000001000000000000003F"},
		"nothing": {archiveEnd{latest: "00000001"}, ""},
	} {
		if got, err := c.a.last(16 << 20); err != nil || got != c.want {
			t.Errorf("%s: %q (%v), want %q", name, got, err, c.want)
		}
	}
}

// TestArchiveEndReachesTheStream: a recovery to the end must reach into
// the segment the latest timeline's primary was streaming, past the last
// segment archived whole; an older timeline's streamed segment does not
// count (wal-fetch never serves it).
func TestArchiveEndReachesTheStream(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	o := Options{Store: storage.NewDir(root), Archive: "shop/orders/_wal/uid", Scratch: t.TempDir()}
	a := wal.Archive{Store: o.Store, Prefix: o.Archive}
	seg := filepath.Join(t.TempDir(), "000000010000000000000003")
	if err := os.WriteFile(seg, []byte("whole"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Push(ctx, seg); err != nil {
		t.Fatal(err)
	}
	piece := func(name string) {
		t.Helper()
		if err := a.PushPiece(ctx, name, bytes.NewReader([]byte("wal")), 0, 3, wal.StreamInfo{Size: 3, SegmentSize: 16 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	piece("000000010000000000000004")
	end, err := readArchiveEnd(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if last, err := end.last(16 << 20); err != nil || last != "000000010000000000000004" {
		t.Fatalf("the end %q (%v), want the streamed 000000010000000000000004", last, err)
	}
}
