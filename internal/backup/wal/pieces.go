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
// pieces for more than they hold.
func (a Archive) PushPiece(ctx context.Context, name string, r io.Reader, from, to int64, info any) error {
	if !a.valid(name) || from < 0 || from >= to {
		return fmt.Errorf("streaming %q: bytes %d to %d", name, from, to)
	}
	// Read first: the checksum is part of the piece's name.
	var buf bytes.Buffer
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(r, to-from))
	if err != nil {
		return fmt.Errorf("streaming %s: %w", name, err)
	}
	if n != to-from {
		return fmt.Errorf("streaming %s: read %d bytes of %d", name, n, to-from)
	}
	dir := a.pieceDir(name)
	if _, err := a.Store.Put(ctx, path.Join(dir, pieceName(from, to, hex.EncodeToString(h.Sum(nil)))), &buf); err != nil {
		return err
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = a.Store.Put(ctx, path.Join(dir, pieceInfo), bytes.NewReader(b))
	return err
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
// piece missing or corrupt, with an error wrapping ErrCorrupt, and
// returns how many bytes it wrote: all good ones before that point.
func (a Archive) FetchPieces(ctx context.Context, name string, size int64, w io.Writer) (int64, error) {
	dir := a.pieceDir(name)
	keys, err := a.Store.List(ctx, dir+"/")
	if err != nil {
		return 0, err
	}
	// The pieces by where they begin; of two beginning at the same byte
	// (an archiver restarted mid-file sends its file again from there)
	// the longer.
	type piece struct {
		to  int64
		key string
		sum string
	}
	pieces := map[int64]piece{}
	for _, k := range keys {
		from, to, sum, ok := parsePiece(path.Base(k))
		if ok && to > pieces[from].to {
			pieces[from] = piece{to, k, sum}
		}
	}
	var at int64
	for at < size {
		p, ok := pieces[at]
		if !ok {
			return at, fmt.Errorf("%w: %s: no streamed piece begins at byte %d of %d", ErrCorrupt, a.Store.Location(dir), at, size)
		}
		rc, err := a.Store.Get(ctx, p.key)
		if err != nil {
			return at, err
		}
		var buf bytes.Buffer
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(rc, p.to-at+1))
		_ = rc.Close()
		if err != nil {
			return at, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != p.to-at || (p.sum != "" && got != p.sum) {
			return at, fmt.Errorf("%w: %s: %d bytes with sha256 %s, streamed as %d bytes with sha256 %s",
				ErrCorrupt, a.Store.Location(p.key), n, got, p.to-at, p.sum)
		}
		take := min(p.to, size) - at // a longer last piece: only what the info counts
		if _, err := w.Write(buf.Bytes()[:take]); err != nil {
			return at, err
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
