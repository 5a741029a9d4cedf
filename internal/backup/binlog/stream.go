package binlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

// Streaming. The file the server writes is archived as it grows, in
// pieces, each ending where the server's own size of the file said (at a
// transaction's end): a transaction waits about a second to reach the
// archive, not the archive timeout. The pieces of file F of a source are
// <source>/F.part/<from>-<to>, with info.json beside them (what F holds up
// to the last piece). Once F is closed and archived whole its pieces go.

const (
	partSuffix = ".part"
	partInfo   = "info.json"
)

func (a Archive) partDir(source, name string) string {
	return path.Join(a.Prefix, source, name+partSuffix)
}

// PushPart archives bytes [from, to) of name, the file source's server
// writes, read from r; info is what the file holds up to to. The piece
// goes first, then the info that counts it: a reader never takes pieces
// for more than they hold.
func (a Archive) PushPart(ctx context.Context, source, name string, r io.Reader, from, to int64, info Info) error {
	if _, err := a.source(source); err != nil {
		return err
	}
	if !ValidName(name) || from >= to || info.Size != to {
		return fmt.Errorf("streaming %s: bytes %d to %d of a file holding %d", name, from, to, info.Size)
	}
	dir := a.partDir(source, name)
	n, err := a.Store.Put(ctx, path.Join(dir, fmt.Sprintf("%016d-%016d", from, to)), io.LimitReader(r, to-from))
	if err != nil {
		return err
	}
	if n != to-from {
		return fmt.Errorf("streaming %s: read %d bytes of %d", name, n, to-from)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = a.Store.Put(ctx, path.Join(dir, partInfo), bytes.NewReader(b))
	return err
}

// streamedInfo is what was streamed of name so far (false: nothing).
func (a Archive) streamedInfo(ctx context.Context, source, name string) (Info, bool, error) {
	rc, err := a.Store.Get(ctx, path.Join(a.partDir(source, name), partInfo))
	if errors.Is(err, storage.ErrNotFound) {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, err
	}
	defer func() { _ = rc.Close() }()
	var info Info
	if err := json.NewDecoder(rc).Decode(&info); err != nil {
		return Info{}, false, fmt.Errorf("%s: %w", a.Store.Location(path.Join(a.partDir(source, name), partInfo)), err)
	}
	return info, true, nil
}

// deletePart deletes what was streamed of name: its info first, so that
// no reader takes the pieces left for a file.
func (a Archive) deletePart(ctx context.Context, source, name string) error {
	dir := a.partDir(source, name)
	if err := a.Store.Delete(ctx, path.Join(dir, partInfo)); err != nil {
		return err
	}
	keys, err := a.Store.List(ctx, dir)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := a.Store.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// streamedFiles reads the info of every streamed file in keys (the
// archive's listing); List keeps those not archived whole.
func (a Archive) streamedFiles(ctx context.Context, keys []string) ([]File, error) {
	var out []File
	for _, k := range keys {
		rel, ok := strings.CutPrefix(k, path.Clean(a.Prefix)+"/")
		parts := strings.Split(rel, "/")
		if !ok || len(parts) != 3 || parts[2] != partInfo || !sourceName.MatchString(parts[0]) {
			continue
		}
		source := parts[0]
		name, ok := strings.CutSuffix(parts[1], partSuffix)
		if !ok || !ValidName(name) {
			continue
		}
		info, found, err := a.streamedInfo(ctx, source, name)
		if err != nil {
			return nil, err
		}
		if !found {
			continue // archived whole since: its whole entry is read after this
		}
		f := File{Source: source, Info: info, Streamed: true}
		f.Name, f.Size = name, info.Size
		out = append(out, f)
	}
	return out, nil
}

func wholeIn(files []File, name string) bool {
	for _, f := range files {
		if f.Name == name && !f.Streamed {
			return true
		}
	}
	return false
}

// fetchStreamed writes the streamed file f to dest from its pieces, which
// must cover it from its first byte to the size its info gives, and
// verifies every event.
func (a Archive) fetchStreamed(ctx context.Context, f File, dest string) error {
	dir := a.partDir(f.Source, f.Name)
	keys, err := a.Store.List(ctx, dir)
	if err != nil {
		return err
	}
	// The pieces by where they begin; of two beginning at the same byte
	// (an agent restarted mid-file sends its file again from there) the
	// longer.
	pieces := map[int64]int64{}
	for _, k := range keys {
		from, to, ok := pieceRange(path.Base(k))
		if ok && to > pieces[from] {
			pieces[from] = to
		}
	}
	out, err := os.Create(dest)
	if err != nil {
		return err
	}
	defer func() { _ = out.Close() }()
	for at := int64(0); at < f.Size; {
		to, ok := pieces[at]
		if !ok {
			return fmt.Errorf("%w: %s: no streamed piece begins at byte %d of %d", wal.ErrCorrupt, a.Store.Location(dir), at, f.Size)
		}
		rc, err := a.Store.Get(ctx, path.Join(dir, fmt.Sprintf("%016d-%016d", at, to)))
		if err != nil {
			return err
		}
		n, err := io.Copy(out, rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
		if n != to-at {
			return fmt.Errorf("%w: %s: the piece at byte %d holds %d bytes, not %d", wal.ErrCorrupt, a.Store.Location(dir), at, n, to-at)
		}
		at = to
	}
	if err := out.Truncate(f.Size); err != nil { // a longer last piece: only what the info counts
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	info, err := ScanFile(dest)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", wal.ErrCorrupt, err)
	case info.Size != f.Size || !samePosition(info.End, f.Info.End):
		return fmt.Errorf("%w: %s: the pieces hold %d bytes up to %s, the info %d bytes up to %s", wal.ErrCorrupt, a.Store.Location(dir), info.Size, info.End, f.Size, f.Info.End)
	}
	return nil
}

// pieceRange reads a piece's name: <from>-<to>.
func pieceRange(name string) (from, to int64, ok bool) {
	a, b, ok := strings.Cut(name, "-")
	if !ok {
		return 0, 0, false
	}
	from, err1 := strconv.ParseInt(a, 10, 64)
	to, err2 := strconv.ParseInt(b, 10, 64)
	return from, to, err1 == nil && err2 == nil && from < to
}
