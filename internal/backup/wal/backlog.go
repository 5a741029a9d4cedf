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
// unarchived: every complete segment of the timelines before the current
// one (named by the newest timeline history file), that is every segment
// before the one holding the switch point. segSize is wal_segment_size.
// Nothing when the server never changed timeline.
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
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 2 {
		return nil, fmt.Errorf("%s ends with %q", latest, lines[len(lines)-1])
	}
	hi, lo, ok := strings.Cut(fields[1], "/")
	h, herr := strconv.ParseUint(hi, 16, 32)
	l, lerr := strconv.ParseUint(lo, 16, 32)
	if !ok || herr != nil || lerr != nil {
		return nil, fmt.Errorf("%s: switch point %q", latest, fields[1])
	}
	switchAt := h<<32 | l
	perLog := uint64(1<<32) / uint64(segSize)
	bound := fmt.Sprintf("%08X%08X", switchAt/uint64(segSize)/perLog, switchAt/uint64(segSize)%perLog)
	current := strings.TrimSuffix(latest, ".history")
	var out []string
	for _, s := range segments {
		if s[:8] < current && s[8:] < bound {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out, nil
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
