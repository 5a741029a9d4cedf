package wal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamedSegment: the pieces of the segment the server writes come
// back as one file of the segment's size, zeros after the last piece; a
// piece corrupt or missing is refused before the server reads anything;
// once the segment is archived whole, the whole one is fetched and its
// pieces go; retention deletes old pieces with old segments.
func TestStreamedSegment(t *testing.T) {
	ctx := context.Background()
	a, root := newArchive(t)
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	const segSize = 4096
	data := bytes.Repeat([]byte("0123456789abcdef"), 100) // 1600 bytes streamed
	push := func(from, to int64) {
		t.Helper()
		info := StreamInfo{Size: to, SegmentSize: segSize, End: "0/3000640"}
		if err := a.PushPiece(ctx, segment, bytes.NewReader(data[from:to]), from, to, info); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.fetchAny(ctx, segment, dest); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("nothing streamed: %v, want not archived", err)
	}
	push(0, 1000)
	push(1000, 1600)
	msg, err := a.fetchAny(ctx, segment, dest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	want := append(append([]byte{}, data...), make([]byte, segSize-len(data))...)
	if !bytes.Equal(got, want) || !strings.Contains(msg, "as streamed: 1600 bytes") {
		t.Fatalf("fetched %d bytes (%q), want the 1600 streamed and zeros to %d", len(got), msg, segSize)
	}

	// A damaged piece: refused, and nothing at dest.
	pieces, _ := filepath.Glob(filepath.Join(root, "shop/orders/wal", segment+PieceSuffix, "0000000000001000-*"))
	if len(pieces) != 1 {
		t.Fatalf("pieces %v", pieces)
	}
	good, _ := os.ReadFile(pieces[0])
	if err := os.WriteFile(pieces[0], append([]byte("X"), good[1:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(dest)
	if _, err := a.fetchAny(ctx, segment, dest); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a damaged piece: %v, want corrupt", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("a damaged piece left %s: %v", dest, err)
	}
	os.Remove(pieces[0])
	if _, err := a.fetchAny(ctx, segment, dest); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "no streamed piece holds byte 1000") {
		t.Fatalf("a missing piece: %v, want corrupt", err)
	}

	// A streamer that started again sent the segment again from its first
	// byte, cut elsewhere: the pieces still make the segment.
	push(0, 1200)
	push(1200, 1600)
	if _, err := a.fetchAny(ctx, segment, dest); err != nil {
		t.Fatalf("pieces cut elsewhere by a restarted streamer: %v", err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, want) {
		t.Fatal("pieces cut elsewhere by a restarted streamer: not the segment")
	}

	// A later timeline's history in the archive: this timeline ended, and
	// what its primary streamed past the switch was never the Database's
	// (PostgreSQL archives that segment as .partial, never under its name).
	if err := PushCommand(ctx, []string{"--dir=" + root, "--prefix=shop/orders/wal", writeFile(t, t.TempDir(), "00000002.history", []byte("1\t0/3000500\tno recovery target specified\n"))}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.fetchAny(ctx, segment, dest); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("timeline 1 ended (00000002.history): its streamed segment was served (%v)", err)
	}
	// Its .partial, archived by the new primary, takes its pieces with it.
	if err := PushCommand(ctx, []string{"--dir=" + root, "--prefix=shop/orders/wal", writeFile(t, t.TempDir(), segment+".partial", data)}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "shop/orders/wal", segment+PieceSuffix, "*")); len(left) != 0 {
		t.Fatalf("%s.partial archived, the pieces of %s are left: %v", segment, segment, left)
	}
	push(0, 1600) // (a streamer of timeline 1 still at it: only whole files of it are served)

	// Archived whole: the whole one, and the pieces go.
	whole := bytes.Repeat([]byte("w"), segSize)
	if err := PushCommand(ctx, []string{"--dir=" + root, "--prefix=shop/orders/wal", writeFile(t, t.TempDir(), segment, whole)}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.fetchAny(ctx, segment, dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, whole) {
		t.Fatal("archived whole: not the whole segment")
	}
	if left, _ := filepath.Glob(filepath.Join(root, "shop/orders/wal", segment+PieceSuffix, "*")); len(left) != 0 {
		t.Fatalf("archived whole, its pieces are left: %v", left)
	}

	// Retention: an old segment's pieces go with the segments before the bound.
	const old = "000000010000000000000002"
	if err := a.PushPiece(ctx, old, bytes.NewReader(data[:10]), 0, 10, StreamInfo{Size: 10, SegmentSize: segSize}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PruneBefore(ctx, segment); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "shop/orders/wal", old+PieceSuffix, "*")); len(left) != 0 {
		t.Fatalf("pruned before %s, pieces of %s are left: %v", segment, old, left)
	}
}
