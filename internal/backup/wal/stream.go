package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"
)

// StreamInfo is what the pieces of a streamed WAL segment hold (the
// primary's agent streams the segment the server writes: package agent).
type StreamInfo struct {
	// Size is how many bytes of the segment the pieces hold, from its
	// first; SegmentSize the server's wal_segment_size.
	Size        int64 `json:"size"`
	SegmentSize int64 `json:"segmentSize"`
	// End is the LSN the pieces reach (Size bytes into the segment).
	End string `json:"end"`
	// RecoverableAt: every transaction the server acknowledged before it
	// is in the pieces (the server had flushed its commit record to a
	// point the pieces reach). Zero when not known yet.
	RecoverableAt time.Time `json:"recoverableAt,omitzero"`
}

// FetchStreamed writes the streamed segment name to dest: its pieces, each
// verified, then zeros up to the segment's size, as the server wants a
// restored segment (it replays to the last whole record, and the recovery
// ends there). ErrNotArchived when nothing of it was streamed; a piece
// missing or corrupt is refused as a corrupt whole segment is.
func (a Archive) FetchStreamed(ctx context.Context, name, dest string) (StreamInfo, error) {
	var info StreamInfo
	found, err := a.PieceInfo(ctx, name, &info)
	switch {
	case err != nil:
		return StreamInfo{}, err
	case !found:
		return StreamInfo{}, fmt.Errorf("%s: %w", name, ErrNotArchived)
	case info.Size <= 0 || info.SegmentSize < info.Size:
		return StreamInfo{}, fmt.Errorf("%s: %w: its stream info counts %d bytes of a %d-byte segment", a.Store.Location(a.pieceDir(name)), ErrCorrupt, info.Size, info.SegmentSize)
	}
	tmp := dest + ".fetching"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return StreamInfo{}, err
	}
	_, err = a.FetchPieces(ctx, name, info.Size, f)
	if err == nil {
		err = f.Truncate(info.SegmentSize) // zeros past the last piece
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dest)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return StreamInfo{}, err
	}
	return info, nil
}

// fetchAny fetches name whole, or else as streamed; whole wins (a segment
// archived whole is complete).
func (a Archive) fetchAny(ctx context.Context, name, dest string) (string, error) {
	e, err := a.Fetch(ctx, name, dest)
	if !errors.Is(err, ErrNotArchived) {
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("restored %s (%d bytes, sha256 verified)", e.Name, e.Size), nil
	}
	if ended, herr := a.timelineEnded(ctx, name); herr != nil || ended {
		// A later timeline branched off this one: what this timeline's
		// primary streamed may run past the switch, where the Database's
		// history went on elsewhere. Only whole files of it are served.
		return "", errors.Join(err, herr)
	}
	info, serr := a.FetchStreamed(ctx, name, dest)
	if errors.Is(serr, ErrNotArchived) {
		return "", err
	}
	if serr != nil {
		return "", serr
	}
	return fmt.Sprintf("restored %s as streamed: %d bytes to %s (every piece's sha256 verified), zeros to its %d bytes", name, info.Size, info.End, info.SegmentSize), nil
}

// StreamedUntil is the latest moment the streamed segments are recoverable
// to (StreamInfo.RecoverableAt); zero when none says.
func (a Archive) StreamedUntil(ctx context.Context) (time.Time, error) {
	keys, err := a.Store.List(ctx, a.Prefix)
	if err != nil {
		return time.Time{}, err
	}
	var last time.Time
	for _, name := range a.Streamed(keys) {
		var info StreamInfo
		found, err := a.PieceInfo(ctx, name, &info)
		if err != nil {
			return time.Time{}, err
		}
		if found && info.RecoverableAt.After(last) {
			last = info.RecoverableAt
		}
	}
	return last, nil
}

// timelineEnded says whether the archive holds the history file of a
// timeline after the one segment name is on. One listing, no entry read:
// an entry's key is enough to know the file was archived.
func (a Archive) timelineEnded(ctx context.Context, name string) (bool, error) {
	if len(name) < 8 || SegmentNumber(name) == "" {
		return false, nil
	}
	keys, err := a.Store.List(ctx, a.Prefix)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		file, isEntry := strings.CutSuffix(path.Base(k), entrySuffix)
		if tli, ok := strings.CutSuffix(file, ".history"); isEntry && ok && path.Dir(k) == path.Clean(a.Prefix) && tli > name[:8] {
			return true, nil
		}
	}
	return false, nil
}
