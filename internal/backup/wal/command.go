package wal

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"example.com/database-operator/internal/backup/storage"
)

// PushCommand is the manager's "wal-push" subcommand, PostgreSQL's
// archive_command: wal-push <target flags> --prefix P %p. An error (a
// non-zero exit) makes the server keep the file and retry.
func PushCommand(ctx context.Context, args []string, log io.Writer) error {
	a, rest, err := parse(ctx, "wal-push", args, log, "FILE")
	if err != nil {
		return err
	}
	e, err := a.Push(ctx, rest[0])
	if err != nil {
		fmt.Fprintf(log, "wal-push: %v\n", err)
		return err
	}
	fmt.Fprintf(log, "wal-push: archived %s (%d bytes, sha256 %s)\n", e.Name, e.Size, e.SHA256)
	// What the primary's agent streamed of it is not needed any more. A
	// failure leaves pieces for retention to delete: the file is archived.
	// A .partial (the old timeline's last segment, archived by a promoted
	// standby) ends what its old primary streamed of that segment too.
	if err := a.DeletePieces(ctx, strings.TrimSuffix(e.Name, ".partial")); err != nil {
		fmt.Fprintf(log, "wal-push: deleting what was streamed of %s: %v\n", e.Name, err)
	}
	return nil
}

// FetchCommand is the manager's "wal-fetch" subcommand, PostgreSQL's
// restore_command: wal-fetch <target flags> --prefix P %f %p. A file the
// archive does not hold, or holds corrupt, is an error (a non-zero exit):
// the server takes it as the end of the archive, so a recovery stops at
// the last good point; a corrupt file is said so in the server's log.
func FetchCommand(ctx context.Context, args []string, log io.Writer) error {
	a, rest, err := parse(ctx, "wal-fetch", args, log, "NAME", "DEST")
	if err != nil {
		return err
	}
	done, err := a.fetchAny(ctx, rest[0], rest[1])
	switch {
	case errors.Is(err, ErrNotArchived):
		fmt.Fprintf(log, "wal-fetch: %s is not in the archive\n", rest[0])
		return err
	case errors.Is(err, ErrCorrupt):
		fmt.Fprintf(log, "wal-fetch: CORRUPT ARCHIVE: %v: recovery cannot go past the WAL before %s\n", err, rest[0])
		return err
	case err != nil:
		fmt.Fprintf(log, "wal-fetch: %v\n", err)
		return err
	}
	fmt.Fprintf(log, "wal-fetch: %s\n", done)
	return nil
}

func parse(ctx context.Context, name string, args []string, log io.Writer, operands ...string) (Archive, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var t storage.Flags
	var a Archive
	t.Register(fs)
	fs.StringVar(&a.Prefix, "prefix", "", "where the Database's WAL archive lives in the target (<namespace>/<database>/wal)")
	fs.SetOutput(log)
	if err := fs.Parse(args); err != nil {
		return Archive{}, nil, err
	}
	if fs.NArg() != len(operands) {
		return Archive{}, nil, fmt.Errorf("%s: want %v, got %q", name, operands, fs.Args())
	}
	if a.Prefix == "" {
		return Archive{}, nil, fmt.Errorf("%s: --prefix is required", name)
	}
	var err error
	if a.Store, err = t.Open(ctx); err != nil {
		return Archive{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	return a, fs.Args(), nil
}
