package binlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

// Archive is a Database's binary log archive: under Prefix, one directory
// per source (one server's binary log, from the data directory it was
// started in: file names restart with every server, so they would
// collide), each file with its entry (wal.Archive: size, checksum, and the
// file's Info).
type Archive struct {
	Store  storage.Store
	Prefix string // Prefix(namespace, database, uid)
	Now    func() time.Time
}

// Prefix is where a Database's binary log archive lives in its backup
// target: beside its backups under a name no Backup can have, apart for
// each incarnation of the Database (its UID), as the WAL archive.
func Prefix(namespace, database, uid string) string {
	return path.Join(namespace, database, "_binlog", uid)
}

// names the server gives its binary log files (log-bin basename, a dot,
// six or more digits); the index file is not archived.
var fileName = regexp.MustCompile(`^[A-Za-z0-9_-]+\.[0-9]{6,}$`)

// ValidName reports whether name is a binary log file's name.
func ValidName(name string) bool { return fileName.MatchString(name) }

var sourceName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,100}[a-z0-9])?$`)

func (a Archive) source(source string) (wal.Archive, error) {
	if !sourceName.MatchString(source) {
		return wal.Archive{}, fmt.Errorf("%q is not a binary log source name (lower-case letters, digits, dots and dashes)", source)
	}
	return wal.Archive{Store: a.Store, Prefix: path.Join(a.Prefix, source), Now: a.Now, Names: ValidName}, nil
}

// File is one archived binary log file.
type File struct {
	Source string
	wal.Entry
	Info Info
	// Streamed: the file the server was writing, archived in pieces as
	// far as Info says (stream.go); not archived whole (yet).
	Streamed bool
}

func (f File) String() string { return f.Source + "/" + f.Name }

// Push archives the binary log file at file for source: one the server
// finished (it writes a later one). A file it closed is archived whole; one
// it was writing when it crashed (still flagged in use, perhaps ending in
// half an event) up to its last whole event. Pushing the same contents
// again is accepted; other contents under the same name are refused
// (wal.ErrConflict).
func (a Archive) Push(ctx context.Context, source, file string) (File, error) {
	arch, err := a.source(source)
	if err != nil {
		return File{}, err
	}
	info, err := ScanFile(file)
	if err == nil && info.Closed {
		e, err := arch.PushInfo(ctx, file, info)
		if err != nil {
			return File{}, err
		}
		return File{Source: source, Entry: e, Info: info}, nil
	}
	// Not closed: the server crashed while writing it.
	if info, err = scanOpen(file); err != nil {
		return File{}, err
	}
	info.ClosedAt = info.LastEvent // the last moment it holds, a transaction or not
	whole, err := wholePart(file, info.Size)
	if err != nil {
		return File{}, err
	}
	defer func() { _ = os.RemoveAll(filepath.Dir(whole)) }()
	e, err := arch.PushInfo(ctx, whole, info)
	if err != nil {
		return File{}, err
	}
	return File{Source: source, Entry: e, Info: info}, nil
}

// wholePart copies the first size bytes of file to a file of the same
// name in a new temporary directory.
func wholePart(file string, size int64) (string, error) {
	dir, err := os.MkdirTemp("", "binlog-crashed-")
	if err != nil {
		return "", err
	}
	dest := filepath.Join(dir, filepath.Base(file))
	if err := copyPrefix(file, dest, size); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dest, nil
}

func copyPrefix(src, dest string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(dest)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, in, size); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// Last returns the last file archived for source, if any.
func (a Archive) Last(ctx context.Context, source string) (File, bool, error) {
	files, err := a.sourceFiles(ctx, source)
	if err != nil || len(files) == 0 {
		return File{}, false, err
	}
	return files[len(files)-1], true, nil
}

// List returns every archived file, by source and, within a source, in the
// server's order: a source's last may be one streamed as the server wrote
// it.
func (a Archive) List(ctx context.Context) (map[string][]File, error) {
	keys, err := a.Store.List(ctx, a.Prefix)
	if err != nil {
		return nil, err
	}
	sources := map[string]bool{}
	for _, k := range keys {
		rel, ok := strings.CutPrefix(k, path.Clean(a.Prefix)+"/")
		if dir, _, nested := strings.Cut(rel, "/"); ok && nested && sourceName.MatchString(dir) {
			sources[dir] = true
		}
	}
	// The streamed files first: the agent archives a file whole before it
	// deletes its pieces, so a file whose pieces go meanwhile is found
	// whole below.
	streamed, err := a.streamedFiles(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := map[string][]File{}
	for source := range sources {
		if out[source], err = a.sourceFiles(ctx, source); err != nil {
			return nil, err
		}
	}
	for _, f := range streamed {
		if !wholeIn(out[f.Source], f.Name) {
			out[f.Source] = append(out[f.Source], f)
			sortFiles(out[f.Source])
		}
	}
	return out, nil
}

// sourceFiles returns source's archived files in the server's order.
func (a Archive) sourceFiles(ctx context.Context, source string) ([]File, error) {
	arch, err := a.source(source)
	if err != nil {
		return nil, err
	}
	entries, err := arch.List(ctx)
	if err != nil {
		return nil, err
	}
	files := make([]File, 0, len(entries))
	for _, e := range entries {
		var info Info
		if err := json.Unmarshal(e.Info, &info); err != nil {
			return nil, fmt.Errorf("%s: its archive entry holds no readable binary log info: %w", a.Store.Location(path.Join(arch.Prefix, e.Name)), err)
		}
		files = append(files, File{Source: source, Entry: e, Info: info})
	}
	sortFiles(files)
	return files, nil
}

// sortFiles puts one source's files in the server's order.
func sortFiles(files []File) {
	sort.Slice(files, func(i, j int) bool { return logNumber(files[i].Name) < logNumber(files[j].Name) })
}

// logNumber is the sequence number of a binary log file's name, zero-padded
// so that names compare in the server's order past 999999.
func logNumber(name string) string {
	n := name[strings.LastIndex(name, ".")+1:]
	return strings.Repeat("0", max(0, 20-len(n))) + n
}

// Fetch writes the archived file f to dest, verified twice: its checksum
// against the entry (a streamed file: its pieces against its info), then
// every event's own checksum.
func (a Archive) Fetch(ctx context.Context, f File, dest string) error {
	arch, err := a.source(f.Source)
	if err != nil {
		return err
	}
	if f.Streamed {
		err := a.fetchStreamed(ctx, f, dest)
		if err == nil {
			return nil
		}
		// Its pieces go once it is archived whole: take the whole file.
		if _, werr := arch.Entry(ctx, f.Name); werr != nil {
			return err
		}
	}
	if _, err := arch.Fetch(ctx, f.Name, dest); err != nil {
		return err
	}
	if _, err := ScanFile(dest); err != nil {
		return fmt.Errorf("%w: %w", wal.ErrCorrupt, err)
	}
	return nil
}

// Prune deletes the archived files no replay from the given positions (the
// kept backups') can read: in each source, a file followed by one that
// begins at or before every position. Chain starts a source's run at its
// latest file beginning at or before the backup's position, so such a file
// is never in a run, and the run Chain picks from each position is the
// same before and after. A source's last file, and its last file archived
// whole, always stay: the agent checks its next file against the latter
// for a gap. Pieces left of a deleted file go with it. Without positions
// nothing is deleted. It returns the files it deleted.
func (a Archive) Prune(ctx context.Context, positions []Position) ([]File, error) {
	if len(positions) == 0 {
		return nil, nil
	}
	files, err := a.List(ctx)
	if err != nil {
		return nil, err
	}
	sources := make([]string, 0, len(files))
	for source := range files {
		sources = append(sources, source)
	}
	sort.Strings(sources)
	var deleted []File
	for _, source := range sources {
		fs := files[source]
		arch, err := a.source(source)
		if err != nil {
			return deleted, err
		}
		lastWhole := -1
		for i, f := range fs {
			if !f.Streamed {
				lastWhole = i
			}
		}
		for i := 0; i+1 < len(fs) && i != lastWhole; i++ {
			if !coveredByAll(positions, StartOf(fs[i+1].Info)) {
				break // this file, or a later one, begins a run
			}
			if !fs[i].Streamed {
				if err := arch.Delete(ctx, fs[i].Name); err != nil {
					return deleted, err
				}
			}
			// Pieces left of it (a delete after its whole upload failed).
			if err := a.deletePart(ctx, source, fs[i].Name); err != nil {
				return deleted, err
			}
			deleted = append(deleted, fs[i])
		}
	}
	return deleted, nil
}

func coveredByAll(positions []Position, p Position) bool {
	for _, q := range positions {
		if !q.Covers(p) {
			return false
		}
	}
	return true
}

// ErrNoChain is wrapped by Chain's error when no source's archive reaches
// from the base backup's position to the target.
var ErrNoChain = errors.New("the archive holds no unbroken binary log from the backup's position")

// Chain picks the files to replay after from (a base backup's GTID
// position): one source's consecutive files, the first beginning at or
// before from, each beginning where the one before ended. Of the sources
// that have such a run, it takes the one reaching furthest (the latest
// primary: with log_slave_updates every server's binary log holds the
// transactions it replicated too, so the newest primary's covers the
// others' from the moment it was created).
func Chain(files map[string][]File, from Position) ([]File, error) {
	var best []File
	var why []string
	for source, fs := range files {
		start := -1
		for i, f := range fs {
			if from.Covers(StartOf(f.Info)) {
				start = i // the latest file beginning at or before from
			}
		}
		if start < 0 {
			if len(fs) > 0 {
				why = append(why, fmt.Sprintf("%s begins at %s, after it", source, StartOf(fs[0].Info)))
			}
			continue
		}
		run := []File{fs[start]}
		for _, f := range fs[start+1:] {
			fresh, ok := continues(run[len(run)-1].Info.End, StartOf(f.Info))
			if ok && !from.Covers(fresh) {
				// A domain this server logs for the first time here:
				// its transactions before this file are not in this
				// source, and the backup does not have them.
				why = append(why, fmt.Sprintf("%s logs domains %s first in %s, after the backup's position", source, fresh, f.Name))
				break
			}
			if !ok {
				why = append(why, fmt.Sprintf("%s has a gap before %s (%s ends at %s, %s begins at %s)", source, f.Name,
					run[len(run)-1].Name, run[len(run)-1].Info.End, f.Name, StartOf(f.Info)))
				break
			}
			run = append(run, f)
		}
		if !run[len(run)-1].Info.End.Covers(from) {
			continue // ends before the backup: a server that stopped early
		}
		if best == nil || later(run[len(run)-1], best[len(best)-1]) {
			best = run
		}
	}
	if best == nil {
		if len(why) == 0 {
			why = []string{"no archived file reaches it"}
		}
		sort.Strings(why)
		return nil, fmt.Errorf("%w %s: %s", ErrNoChain, from, strings.Join(why, "; "))
	}
	return best, nil
}

// later orders two runs' last files: the one closed later (the latest
// primary's: after a failover the old primary's unreplicated
// transactions, archived before it died, are not the Database's history,
// though their sequence numbers may run further), then the one whose end
// covers the other's.
func later(a, b File) bool {
	if !a.Info.ClosedAt.Equal(b.Info.ClosedAt) {
		return a.Info.ClosedAt.After(b.Info.ClosedAt)
	}
	if a.Info.End.Covers(b.Info.End) != b.Info.End.Covers(a.Info.End) {
		return a.Info.End.Covers(b.Info.End)
	}
	return a.Source < b.Source // the same every time
}

// continues says whether a file beginning at next follows one that ended
// at prev: the same last transaction in every domain prev had. A domain
// next has and prev lacks is one the server logs for the first time (its
// binary log state never had it: a replica cloned from a dump, whose load
// was not logged, or a new domain): returned as fresh, it continues
// nothing and breaks nothing.
func continues(prev, next Position) (fresh Position, ok bool) {
	fresh = Position{}
	for d, g := range next {
		if _, had := prev[d]; !had {
			fresh[d] = g
		}
	}
	for d, g := range prev {
		if h, has := next[d]; !has || g != h {
			return fresh, false
		}
	}
	return fresh, true
}

// StartOf is where a file's transactions begin: its GTID list, and for a
// domain the list lacks, just before the file's first transaction there.
func StartOf(info Info) Position {
	p := maps(info.Start)
	for d, g := range info.FirstGTIDs {
		if _, ok := p[d]; !ok && g.Sequence > 1 { // 1: the domain's first ever
			p[d] = GTID{Domain: d, Server: g.Server, Sequence: g.Sequence - 1}
		}
	}
	return p
}

// samePosition: the same transaction last in every domain (sequence and
// server: two servers' diverged lines may share sequence numbers).
func samePosition(a, b Position) bool {
	if len(a) != len(b) {
		return false
	}
	for d, g := range a {
		h, ok := b[d]
		if !ok || g != h {
			return false
		}
	}
	return true
}
