package backup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/wal"
)

// Reasons of a restore that replays the binary log (MariaDB).
const (
	// ReasonOutsideWindow: the recovery target is not inside what the
	// backup and the archive reach; nothing was loaded.
	ReasonOutsideWindow = "TargetOutsideWindow"
	// ReasonArchiveCorrupt: an archived binary log file is corrupt or
	// missing; nothing was loaded.
	ReasonArchiveCorrupt = "ArchiveCorrupt"
	// ReasonReplayFailed: the dump was loaded and the replay after it
	// failed.
	ReasonReplayFailed = "ReplayFailed"
)

// binlogFlags are the restore command's point-in-time recovery flags
// (MariaDB): the Database's binary log archive in the backup's target,
// replayed after the dump to the target.
type binlogFlags struct {
	archive string
	target  binlog.Target
}

func (f *binlogFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.archive, "binlog-archive", "", "the binary log archive in the target (MariaDB): replayed after the dump, to the target or its end")
	fs.Func("target-time", "replay the binary log up to this moment (RFC 3339)", func(s string) (err error) {
		f.target.Time, err = time.Parse(time.RFC3339Nano, s)
		return err
	})
	fs.Func("target-gtid", "replay the binary log up to and with this GTID position", func(s string) (err error) {
		f.target.GTID, err = binlog.ParsePosition(s)
		return err
	})
}

// prepare fetches and verifies what the replay needs (nil without an
// archive): the dump's manifest gives the position it starts after.
func (f *binlogFlags) prepare(ctx context.Context, o RestoreOptions, log io.Writer) (*binlog.Prepared, error) {
	if f.archive == "" {
		if !f.target.Time.IsZero() || f.target.GTID != nil {
			return nil, fail(ReasonInvalid, "a recovery target needs --binlog-archive")
		}
		return nil, nil
	}
	m, err := ReadManifest(ctx, o.Store, o.Path)
	if err != nil {
		return nil, err
	}
	from, err := binlog.ParsePosition(m.Position)
	if err != nil || len(from) == 0 {
		return nil, fail(ReasonInvalid, "backup %s records no GTID position (%q) to replay the binary log from: %v", o.Path, m.Position, err)
	}
	p, err := binlog.Prepare(ctx, binlog.ReplayOptions{Archive: binlog.Archive{Store: o.Store, Prefix: f.archive}, From: from, Taken: m.CompletedAt,
		Target: f.target, Client: o.Server.BinlogClient(), Scratch: o.Scratch,
		Logf: func(format string, args ...any) { fmt.Fprintf(log, "restore: "+format+"\n", args...) }})
	switch {
	case errors.Is(err, binlog.ErrOutsideWindow):
		return nil, fail(ReasonOutsideWindow, "nothing was loaded: %w", err)
	case errors.Is(err, wal.ErrCorrupt) || errors.Is(err, wal.ErrNotArchived) || errors.Is(err, binlog.ErrNoChain):
		return nil, fail(ReasonArchiveCorrupt, "nothing was loaded: %w", err)
	case err != nil:
		return nil, fail(ReasonTargetFailed, "nothing was loaded: %w", err)
	}
	return p, nil
}

// replayMessage says what a replay did, for the Restored condition.
func replayMessage(t binlog.Target, out *binlog.Outcome) string {
	msg := fmt.Sprintf("replayed %d transactions of the binary log (%d files, %.1f MB, fetched and verified in %s, applied in %s) to %s",
		out.Transactions, out.Files, float64(out.Bytes)/1e6, out.Fetch.Round(time.Millisecond), out.Apply.Round(time.Millisecond), binlog.FormatTarget(t))
	if out.End != nil {
		msg += ", position " + out.End.String()
	}
	return msg
}
