package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A promoted standby archives only the WAL it writes itself: the segments
// it received from its old primary were marked archived as they arrived
// (archive_mode on), so those the old primary completed and never archived
// (it died first, or its target was failing) would leave a gap in the
// archive, and every recovery would stop at it. The new primary's agent
// hands them back to the server's archiver (MarkBacklog) once it sees the
// promotion.

var segmentFile = regexp.MustCompile(`^[0-9A-F]{24}$`)

// Backlog lists the WAL segments in dataDir's pg_wal that a promotion left
// unarchived: of each timeline the current one (named by the newest
// timeline history file) descends from, the complete segments before the
// one holding its switch point (that one is partial on the old timeline:
// the next timeline's copy holds it). Segments of timelines off that line
// are not its history. segSize is wal_segment_size. Nothing when the
// server never changed timeline.
func Backlog(dataDir string, segSize int64) ([]string, error) {
	if segSize <= 0 {
		return nil, fmt.Errorf("WAL segment size %d", segSize)
	}
	walDir := filepath.Join(dataDir, "pg_wal")
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return nil, err
	}
	var histories, segments []string
	for _, e := range entries {
		switch name := e.Name(); {
		case strings.HasSuffix(name, ".history") && ValidName(name):
			histories = append(histories, name)
		case segmentFile.MatchString(name):
			segments = append(segments, name)
		}
	}
	if len(histories) == 0 {
		return nil, nil
	}
	sort.Strings(histories)
	latest := histories[len(histories)-1]
	b, err := os.ReadFile(filepath.Join(walDir, latest))
	if err != nil {
		return nil, err
	}
	ends, err := SwitchSegments(string(b), segSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", latest, err)
	}
	var out []string
	for _, s := range segments {
		if end, ok := ends[s[:8]]; ok && s[8:] < end {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out, nil
}

// SwitchSegments reads a timeline history file: for each timeline the
// current one descends from (8 hex digits, as in segment names), the
// segment (16 hex digits: log and segment numbers) holding the point where
// it was left.
func SwitchSegments(history string, segSize int64) (map[string]string, error) {
	ends := map[string]string{}
	perLog := uint64(1<<32) / uint64(segSize)
	for _, line := range strings.Split(history, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		tli, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil || len(fields) < 2 {
			return nil, fmt.Errorf("history line %q", line)
		}
		hi, lo, ok := strings.Cut(fields[1], "/")
		h, herr := strconv.ParseUint(hi, 16, 32)
		l, lerr := strconv.ParseUint(lo, 16, 32)
		if !ok || herr != nil || lerr != nil {
			return nil, fmt.Errorf("switch point %q", fields[1])
		}
		seg := (h<<32 | l) / uint64(segSize)
		ends[fmt.Sprintf("%08X", tli)] = fmt.Sprintf("%08X%08X", seg/perLog, seg%perLog)
	}
	return ends, nil
}

// MarkBacklog has the server archive its Backlog itself: each segment's
// archive status goes from done back to ready, and the archiver (running
// now that the server is a primary) archives it through archive_command
// like any segment, with its retries and pg_stat_archiver's report, and
// keeps it in pg_wal until it is archived. A segment ready already, or
// removed meanwhile, is skipped. It returns the segments it marked.
func MarkBacklog(dataDir string, segSize int64) ([]string, error) {
	files, err := Backlog(dataDir, segSize)
	if err != nil {
		return nil, err
	}
	status := filepath.Join(dataDir, "pg_wal", "archive_status")
	var marked []string
	for _, f := range files {
		// Renamed, not made anew: the file keeps the server's account as
		// its owner, and the archiver opens it to mark it done again (a
		// file it cannot open has it archive the segment over and over).
		err := os.Rename(filepath.Join(status, f+".done"), filepath.Join(status, f+".ready"))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // ready already, or removed since it was listed
		case err != nil:
			return marked, fmt.Errorf("marking %s for the archiver: %w", f, err)
		}
		marked = append(marked, f)
	}
	return marked, nil
}
