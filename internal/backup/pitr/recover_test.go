package pitr

import (
	"os"
	"path/filepath"
	"testing"
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
