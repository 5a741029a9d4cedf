package wal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"example.com/database-operator/internal/backup/storage"
)

// Pieces. The file a server is writing (PostgreSQL's current WAL segment,
// MariaDB's current binary log) is archived as it grows, in pieces, so a
// transaction waits about a second to reach the archive instead of the
// whole file. The pieces of file F are <prefix>/F.part/<from>-<to>-<sha256>
// (bytes [from, to) of F and their checksum), with info.json beside them:
// what F holds up to the last piece, in the archiver's own terms. Once F is
// archived whole, its pieces go.

const (
	// PieceSuffix names the directory of a file's pieces.
	PieceSuffix = ".part"
	pieceInfo   = "info.json"
)

func (a Archive) pieceDir(name string) string { return a.key(name) + PieceSuffix }

func pieceName(from, to int64, sum string) string {
	return fmt.Sprintf("%016d-%016d-%s", from, to, sum)
}

// PushPiece archives bytes [from, to) of name, read from r, then info (what
// the file holds up to to). The piece goes first: a reader never takes
// pieces for more than they hold. r is read twice (the checksum is part of
// the piece's name), never held in memory: a MariaDB agent's first piece
// after a restart can be a whole binary log file.
func (a Archive) PushPiece(ctx context.Context, name string, r io.ReadSeeker, from, to int64, info any) error {
	if !a.valid(name) || from < 0 || from >= to {
		return fmt.Errorf("streaming %q: bytes %d to %d", name, from, to)
	}
	sum, n, err := checksum(io.LimitReader(r, to-from))
	if err != nil {
		return fmt.Errorf("streaming %s: %w", name, err)
	}
	if n != to-from {
		return fmt.Errorf("streaming %s: read %d bytes of %d", name, n, to-from)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	key := path.Join(a.pieceDir(name), pieceName(from, to, sum))
	if _, err := a.Store.Put(ctx, key, io.TeeReader(io.LimitReader(r, to-from), h)); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		// What was read changed between the two reads: the piece is not
		// what its name says. Gone before any info counts it.
		_ = a.Store.Delete(ctx, key)
		return fmt.Errorf("streaming %s: bytes %d to %d changed while they were read", name, from, to)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = a.Store.Put(ctx, path.Join(a.pieceDir(name), pieceInfo), bytes.NewReader(b))
	return err
}

func checksum(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// PieceInfo reads into info what was streamed of name so far; false when
// nothing was (or its pieces went: the file was archived whole since).
func (a Archive) PieceInfo(ctx context.Context, name string, info any) (bool, error) {
	key := path.Join(a.pieceDir(name), pieceInfo)
	rc, err := a.Store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = rc.Close() }()
	if err := json.NewDecoder(io.LimitReader(rc, 1<<16)).Decode(info); err != nil {
		return false, fmt.Errorf("%s: %w", a.Store.Location(key), err)
	}
	return true, nil
}

// DeletePieces deletes what was streamed of name: its info first, so that
// no reader takes the pieces left for a file.
func (a Archive) DeletePieces(ctx context.Context, name string) error {
	dir := a.pieceDir(name)
	if err := a.Store.Delete(ctx, path.Join(dir, pieceInfo)); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	keys, err := a.Store.List(ctx, dir+"/")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := a.Store.Delete(ctx, k); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Streamed lists the files that have pieces under the archive's prefix
// (keys is its listing), by name.
func (a Archive) Streamed(keys []string) []string {
	var out []string
	for _, k := range keys {
		rel, ok := strings.CutPrefix(k, path.Clean(a.Prefix)+"/")
		dir, file, _ := strings.Cut(rel, "/")
		name, isDir := strings.CutSuffix(dir, PieceSuffix)
		if ok && isDir && file == pieceInfo && a.valid(name) {
			out = append(out, name)
		}
	}
	return out
}

// FetchPieces writes bytes [0, size) of the streamed file name to w, from
// its pieces, each verified against its checksum. It stops at the first
// piece missing or corrupt, with an error wrapping ErrCorrupt (w then
// holds the bad piece's bytes too: the caller drops it), and returns how
// many bytes of verified pieces it wrote.
func (a Archive) FetchPieces(ctx context.Context, name string, size int64, w io.Writer) (int64, error) {
	dir := a.pieceDir(name)
	keys, err := a.Store.List(ctx, dir+"/")
	if err != nil {
		return 0, err
	}
	type piece struct {
		from, to int64
		key, sum string
	}
	var pieces []piece
	for _, k := range keys {
		if from, to, sum, ok := parsePiece(path.Base(k)); ok {
			pieces = append(pieces, piece{from, to, k, sum})
		}
	}
	var at int64
	for at < size {
		// The piece that covers byte at and reaches furthest: a streamer
		// that started again sends the file again from an earlier byte,
		// cut elsewhere, and the same bytes of a file never differ.
		var p piece
		for _, c := range pieces {
			if c.from <= at && at < c.to && c.to > p.to {
				p = c
			}
		}
		if p.key == "" {
			return at, fmt.Errorf("%w: %s: no streamed piece holds byte %d of %d", ErrCorrupt, a.Store.Location(dir), at, size)
		}
		rc, err := a.Store.Get(ctx, p.key)
		if err != nil {
			return at, err
		}
		// The piece's bytes from at go to w as they are read, the whole
		// piece to the checksum; a mismatch fails the fetch (its caller
		// drops what was written).
		h := sha256.New()
		take := min(p.to, size) - at
		skipped, err := io.CopyN(h, rc, at-p.from)
		var wrote, rest int64
		if err == nil {
			wrote, err = io.CopyN(io.MultiWriter(w, h), rc, take)
		}
		if err == nil {
			rest, err = io.Copy(h, io.LimitReader(rc, p.to-p.from-skipped-wrote+1))
		}
		_ = rc.Close()
		n := skipped + wrote + rest
		if err != nil && !errors.Is(err, io.EOF) {
			return at, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != p.to-p.from || (p.sum != "" && got != p.sum) {
			return at, fmt.Errorf("%w: %s: %d bytes with sha256 %s, streamed as %d bytes with sha256 %s",
				ErrCorrupt, a.Store.Location(p.key), n, got, p.to-p.from, p.sum)
		}
		at += take
	}
	return at, nil
}

// parsePiece reads a piece's name: <from>-<to>-<sha256>, or <from>-<to>
// as MariaDB's agent named them before pieces had checksums (its binary
// log events carry their own).
func parsePiece(name string) (from, to int64, sum string, ok bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 2 && len(parts) != 3 {
		return 0, 0, "", false
	}
	from, err1 := strconv.ParseInt(parts[0], 10, 64)
	to, err2 := strconv.ParseInt(parts[1], 10, 64)
	if len(parts) == 3 {
		if sum = parts[2]; len(sum) != sha256.Size*2 {
			return 0, 0, "", false
		}
	}
	return from, to, sum, err1 == nil && err2 == nil && from < to
}
