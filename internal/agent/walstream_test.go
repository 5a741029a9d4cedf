package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

// xlogData is a CopyData message of the walsender: WAL from start.
func xlogData(start uint64, data []byte) []byte {
	msg := []byte{pglogrepl.XLogDataByteID}
	msg = binary.BigEndian.AppendUint64(msg, start)
	msg = binary.BigEndian.AppendUint64(msg, start+uint64(len(data)))
	msg = binary.BigEndian.AppendUint64(msg, 0)
	return append(msg, data...)
}

// TestSegmentStream: the WAL received is uploaded as pieces of its
// segments, split where a segment ends, the zero pages after a switch left
// out; a fetch gives back each segment as the server wrote it; a jump in
// the stream is refused.
func TestSegmentStream(t *testing.T) {
	ctx := context.Background()
	const segSize = 4 * walPage
	arch := wal.Archive{Store: storage.NewDir(t.TempDir()), Prefix: "shop/orders/_wal/uid"}
	start := uint64(3 * segSize) // segment 3
	s := &segmentStream{arch: arch, segSize: segSize, timeline: 2, at: start, sent: start}
	if got := s.segmentName(start); got != "000000020000000000000003" {
		t.Fatalf("segment name %s", got)
	}
	// 1.5 pages, then the rest of the segment: one record and zero pages
	// (a switch), then half a page of the next segment.
	first := bytes.Repeat([]byte{1}, walPage+walPage/2)
	rest := append(bytes.Repeat([]byte{2}, walPage/2), make([]byte, 2*walPage)...)
	next := bytes.Repeat([]byte{3}, walPage/2)
	mark := clockMark{at: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), lsn: start + uint64(len(first))}
	for _, d := range [][]byte{first} {
		if err := s.take(xlogData(s.at, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.upload(ctx, mark); err != nil {
		t.Fatal(err)
	}
	var info wal.StreamInfo
	if _, err := arch.PieceInfo(ctx, "000000020000000000000003", &info); err != nil || !info.RecoverableAt.Equal(mark.at) {
		t.Fatalf("the pieces reach the mark's flush point: recoverable at %s (%v), want %s", info.RecoverableAt, err, mark.at)
	}
	// The next mark's flush point is past what comes: not recoverable to it.
	mark = clockMark{at: mark.at.Add(time.Second), lsn: start + 10*segSize}
	for _, d := range [][]byte{rest, next} {
		if err := s.take(xlogData(s.at, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.upload(ctx, mark); err != nil {
		t.Fatal(err)
	}
	if s.uploadedTo != start+segSize+walPage/2 || s.buf.Len() != 0 {
		t.Fatalf("uploaded to %d with %d bytes left, want to %d", s.uploadedTo, s.buf.Len(), start+segSize+walPage/2)
	}

	dir := t.TempDir()
	info, err := arch.FetchStreamed(ctx, "000000020000000000000003", filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "a"))
	want := append(append([]byte{}, first...), rest...)
	if !bytes.Equal(got, want) || info.Size != 2*walPage {
		t.Fatalf("segment 3: %d bytes, %d streamed; want the segment as written, its zero pages not sent (%d)", len(got), info.Size, 2*walPage)
	}
	if first := mark.at.Add(-time.Second); !info.RecoverableAt.Equal(first) {
		t.Fatalf("segment 3's last piece ends before the new mark's point: recoverable at %s, want the earlier mark's %s kept", info.RecoverableAt, first)
	}
	info, err = arch.FetchStreamed(ctx, "000000020000000000000004", filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(filepath.Join(dir, "b"))
	if !bytes.Equal(got[:len(next)], next) || len(got) != segSize || info.End != pglogrepl.LSN(start+segSize+walPage/2).String() {
		t.Fatalf("segment 4: %d bytes to %s", len(got), info.End)
	}

	if err := s.take(xlogData(s.at+1, []byte{9})); err == nil {
		t.Fatal("a jump in the stream was taken")
	}
}

func TestTrimZeroPages(t *testing.T) {
	page := func(b byte) []byte { return bytes.Repeat([]byte{b}, walPage) }
	for _, tt := range []struct {
		name string
		data []byte
		from uint64
		want uint64
	}{
		{"no zeros", page(1), 0, walPage},
		{"two zero pages", append(page(1), append(page(0), page(0)...)...), 0, walPage},
		{"zeros inside a record's page stay", append(page(1)[:100], make([]byte, walPage-100)...), 0, walPage},
		{"from mid-page: that page stays", make([]byte, walPage/2), walPage / 2, walPage / 2},
		{"all zero pages", append(page(0), page(0)...), 0, 0},
	} {
		if got := trimZeroPages(tt.data, tt.from); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}
