package binlog

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"example.com/database-operator/internal/backup/wal"
)

// Streaming. The file the server writes is archived as it grows, in
// pieces (wal.Archive.PushPiece), each ending where the server's own size
// of the file said (at a transaction's end): a transaction waits about a
// second to reach the archive, not the archive timeout. The pieces of
// file F of a source are <source>/F.part/..., with the Info of F up to the
// last piece beside them. Once F is closed and archived whole its pieces go.

// PushPart archives bytes [from, to) of name, the file source's server
// writes, read from r; info is what the file holds up to to.
func (a Archive) PushPart(ctx context.Context, source, name string, r io.ReadSeeker, from, to int64, info Info) error {
	arch, err := a.source(source)
	if err != nil {
		return err
	}
	if info.Size != to {
		return fmt.Errorf("streaming %s: bytes %d to %d of a file holding %d", name, from, to, info.Size)
	}
	return arch.PushPiece(ctx, name, r, from, to, info)
}

// streamedInfo is what was streamed of name so far (false: nothing).
func (a Archive) streamedInfo(ctx context.Context, source, name string) (Info, bool, error) {
	arch, err := a.source(source)
	if err != nil {
		return Info{}, false, err
	}
	var info Info
	found, err := arch.PieceInfo(ctx, name, &info)
	return info, found, err
}

// deletePart deletes what was streamed of name.
func (a Archive) deletePart(ctx context.Context, source, name string) error {
	arch, err := a.source(source)
	if err != nil {
		return err
	}
	return arch.DeletePieces(ctx, name)
}

// streamedFiles reads the info of every streamed file in keys (the
// archive's listing); List keeps those not archived whole.
func (a Archive) streamedFiles(ctx context.Context, keys []string) ([]File, error) {
	var out []File
	sources := map[string]bool{}
	for _, k := range keys {
		rel, ok := strings.CutPrefix(k, path.Clean(a.Prefix)+"/")
		if source, _, found := strings.Cut(rel, "/"); ok && found && sourceName.MatchString(source) {
			sources[source] = true
		}
	}
	for source := range sources {
		arch, _ := a.source(source)
		for _, name := range arch.Streamed(keys) {
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
	arch, err := a.source(f.Source)
	if err != nil {
		return err
	}
	out, err := os.Create(dest)
	if err != nil {
		return err
	}
	defer func() { _ = out.Close() }()
	if _, err := arch.FetchPieces(ctx, f.Name, f.Size, out); err != nil {
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
		return fmt.Errorf("%w: %s: the pieces hold %d bytes up to %s, the info %d bytes up to %s", wal.ErrCorrupt,
			a.Store.Location(path.Join(arch.Prefix, f.Name+wal.PieceSuffix)), info.Size, info.End, f.Size, f.Info.End)
	}
	return nil
}
