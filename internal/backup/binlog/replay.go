package binlog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"example.com/database-operator/internal/backup/wal"
)

// Target is where a replay stops: at most one of a time and a GTID
// position; neither is the archive's end.
type Target struct {
	// Time: the transactions the binary log dates before it. The binary
	// log keeps whole seconds, so the target's own second is replayed
	// whole: every transaction acknowledged before Time is there, and
	// those of the same second after it may be too.
	Time time.Time
	// GTID: up to and with these transactions.
	GTID Position
}

// Client is how the replay reaches the restored server: the mariadb
// command line client's connection arguments and environment (the
// password, never on a command line).
type Client struct {
	Command string   // mariadb
	Args    []string // --host, --port, --user...
	Env     []string
	// Init is run in the replay's session before the binary log (a
	// recovery's server started without grant checks loads them: the
	// replayed GRANTs and ALTER USERs need them).
	Init string
}

// ReplayOptions is one replay of archived binary logs into a server.
type ReplayOptions struct {
	Archive Archive
	// From is the base backup's GTID position: the replay starts after it.
	From Position
	// Taken is when the base backup completed: a time target before it
	// is refused (a dump's snapshot is at some moment while it runs).
	Taken   time.Time
	Target  Target
	Client  Client
	Scratch string // where the files are fetched to (removed after)
	Logf    func(format string, args ...any)
}

// Outcome is what a replay did.
type Outcome struct {
	Files        int
	Bytes        int64
	Transactions int
	// End is the last archived position the replay read to; Until is how
	// far the archive reaches (the last file's close): the latest moment
	// it can restore.
	End   Position
	Until time.Time
	// Fetch and Apply are how long fetching (and verifying) and applying
	// took.
	Fetch, Apply time.Duration
}

// ErrOutsideWindow is wrapped by Replay's error for a target the archive
// cannot reach.
var ErrOutsideWindow = errors.New("the target is outside what the backup and the archive can restore")

// Replay prepares and applies a replay: Prepare, then Apply.
func Replay(ctx context.Context, o ReplayOptions) (*Outcome, error) {
	p, err := Prepare(ctx, o)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Apply(ctx)
}

// Prepared is a replay whose files are fetched and verified, ready to be
// applied.
type Prepared struct {
	o     ReplayOptions
	chain []File
	dir   string
	local []string
	out   Outcome
}

// Prepare picks the archived files from o.From to the target, checks the
// target against what they reach, then fetches and verifies every one: a
// target outside the window, or a corrupt or missing file, fails here,
// before the caller changes anything (loads the base backup), naming the
// last point the archive can restore.
func Prepare(ctx context.Context, o ReplayOptions) (*Prepared, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	all, err := o.Archive.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the binary log archive: %w", err)
	}
	chain, err := Chain(all, o.From)
	if err != nil {
		return nil, err
	}
	last := chain[len(chain)-1]
	p := &Prepared{o: o, out: Outcome{Until: last.Info.ClosedAt, End: last.Info.End}}
	if err := checkWindow(o, p.out); err != nil {
		return nil, err
	}
	// Only the files up to the target.
	for i, f := range chain {
		afterTime := !o.Target.Time.IsZero() && f.Info.Transactions > 0 && !f.Info.First.Before(stopTime(o.Target.Time))
		afterGTID := o.Target.GTID != nil && f.Info.Start.Covers(o.Target.GTID)
		if afterTime || afterGTID {
			chain = chain[:i]
			break
		}
	}
	p.chain = chain
	if err := p.fetch(ctx); err != nil {
		p.Close()
		return nil, err
	}
	o.Logf("fetched and verified %d binary log files (%d bytes) of %s in %s", p.out.Files, p.out.Bytes, last.Source, p.out.Fetch.Round(time.Millisecond))
	return p, nil
}

// checkWindow refuses a target the backup and the archive (out) cannot
// reach.
func checkWindow(o ReplayOptions, out Outcome) error {
	switch t := o.Target; {
	case !t.Time.IsZero() && !o.Taken.IsZero() && t.Time.Before(o.Taken):
		return fmt.Errorf("%w: %s is before the backup completed (%s)", ErrOutsideWindow, t.Time.UTC().Format(time.RFC3339Nano), o.Taken.UTC().Format(time.RFC3339))
	case !t.Time.IsZero() && t.Time.After(out.Until):
		return fmt.Errorf("%w: %s is after the archive's end (%s, position %s): later transactions are not archived yet",
			ErrOutsideWindow, t.Time.UTC().Format(time.RFC3339Nano), out.Until.Format(time.RFC3339), out.End)
	case t.GTID != nil && !out.End.Covers(t.GTID):
		return fmt.Errorf("%w: GTID %s is past the archive's end (%s)", ErrOutsideWindow, t.GTID, out.End)
	case t.GTID != nil && !t.GTID.Covers(restrict(o.From, t.GTID)):
		return fmt.Errorf("%w: GTID %s is before the backup's position (%s)", ErrOutsideWindow, t.GTID, o.From)
	}
	return nil
}

// fetch fetches and verifies the chain's files into a directory of its
// own, naming the last good point when one fails.
func (p *Prepared) fetch(ctx context.Context) error {
	var err error
	if p.dir, err = os.MkdirTemp(p.o.Scratch, "binlog-"); err != nil {
		return err
	}
	started := time.Now()
	for i, f := range p.chain {
		dest := filepath.Join(p.dir, f.Name)
		if err := p.o.Archive.Fetch(ctx, f, dest); err != nil {
			good := "nothing after the backup"
			if i > 0 {
				good = fmt.Sprintf("%s (position %s)", p.chain[i-1].Info.ClosedAt.Format(time.RFC3339), p.chain[i-1].Info.End)
			}
			if errors.Is(err, wal.ErrCorrupt) {
				return fmt.Errorf("CORRUPT ARCHIVE: %w: nothing was replayed; the archive can restore up to %s", err, good)
			}
			return fmt.Errorf("fetching %s: %w: nothing was replayed; the archive can restore up to %s", f, err, good)
		}
		p.local = append(p.local, dest)
		p.out.Files++
		p.out.Bytes += f.Size
	}
	p.out.Fetch = time.Since(started)
	return nil
}

// Close removes the fetched files.
func (p *Prepared) Close() {
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// Apply replays the fetched files through the client.
func (p *Prepared) Apply(ctx context.Context) (*Outcome, error) {
	out := p.out
	if len(p.local) == 0 {
		out.End = p.o.From // the target is before the first file's first transaction
		return &out, nil
	}
	started := time.Now()
	seen, err := apply(ctx, p.o, p.local)
	out.Apply, out.Transactions = time.Since(started), seen.n
	if err != nil {
		return nil, err
	}
	// Where the replay stopped, by the transactions it read: a replay to
	// the end or to a GTID must reach it, never stop short quietly.
	want := p.o.Target.GTID
	if want == nil && p.o.Target.Time.IsZero() {
		want = p.chain[len(p.chain)-1].Info.End
	}
	reached := maps(p.o.From)
	for d, g := range seen.last {
		reached[d] = g
	}
	if want != nil && !reached.Covers(want) {
		return nil, fmt.Errorf("the replay stopped at %s, short of %s: the archive's files end early", reached, want)
	}
	for d, g := range p.o.Target.GTID {
		if reached[d] != g && g.Sequence > p.o.From[d].Sequence {
			// The same sequence number by another server: the target
			// is on a line the Database left (a failover's).
			return nil, fmt.Errorf("the replay reached %s, not the target %s: the target is on another server's line than the archive's (diverged at a failover)", reached[d], g)
		}
	}
	out.End = reached
	p.o.Logf("replayed %d transactions from %s in %s", seen.n, p.o.From, out.Apply.Round(time.Millisecond))
	return &out, nil
}

// stopTime is where a time target stops the replay: at the first event
// dated at or after it rounded up to a whole second (the binary log keeps
// whole seconds: a target inside a second replays that second whole, one
// on a whole second nothing of it).
func stopTime(t time.Time) time.Time {
	t = t.UTC()
	if w := t.Truncate(time.Second); !w.Equal(t) {
		return w.Add(time.Second)
	}
	return t
}

// replayed is what the SQL stream held: transactions, and the last GTID
// of each domain.
type replayed struct {
	n    int
	last Position
}

// apply pipes mariadb-binlog's SQL for the files into the client.
func apply(ctx context.Context, o ReplayOptions, files []string) (replayed, error) {
	args := []string{"--no-defaults", "--start-position=" + o.From.String()}
	switch {
	case !o.Target.Time.IsZero():
		args = append(args, "--stop-datetime="+stopTime(o.Target.Time).Format(time.DateTime))
	case o.Target.GTID != nil:
		args = append(args, "--stop-position="+o.Target.GTID.String())
	}
	reader := exec.CommandContext(ctx, "mariadb-binlog", append(args, files...)...)
	// --stop-datetime is read in the local time zone.
	reader.Env = append(os.Environ(), "TZ=UTC")
	readErr := &bytes.Buffer{}
	reader.Stderr = readErr
	sql, err := reader.StdoutPipe()
	if err != nil {
		return replayed{}, err
	}
	client := exec.CommandContext(ctx, o.Client.Command, append(append([]string{}, o.Client.Args...), "--binary-mode")...)
	client.Env = o.Client.Env
	clientErr := &bytes.Buffer{}
	client.Stderr, client.Stdout = clientErr, io.Discard
	// An OS pipe, not an io.Pipe: a client that exits (a statement
	// failed) makes the next write fail rather than wait forever.
	stdin, err := client.StdinPipe()
	if err != nil {
		return replayed{}, err
	}
	if err := reader.Start(); err != nil {
		return replayed{}, fmt.Errorf("starting mariadb-binlog: %w", err)
	}
	if err := client.Start(); err != nil {
		_ = reader.Process.Kill()
		_ = reader.Wait()
		return replayed{}, fmt.Errorf("starting %s: %w", o.Client.Command, err)
	}
	var n replayed
	_, rewriteErr := io.WriteString(stdin, o.Client.Init)
	if rewriteErr == nil {
		n, rewriteErr = rewrite(sql, stdin)
	}
	_ = stdin.Close()
	if rewriteErr != nil {
		_ = reader.Process.Kill() // it would wait on its full pipe
	}
	clientWait := client.Wait()
	readWait := reader.Wait()
	switch {
	case clientWait != nil: // the cause when both failed
		return n, fmt.Errorf("applying the binary log: %s failed: %w: %s", o.Client.Command, clientWait, bytes.TrimSpace(clientErr.Bytes()))
	case readWait != nil:
		return n, fmt.Errorf("mariadb-binlog failed: %w: %s", readWait, bytes.TrimSpace(readErr.Bytes()))
	case rewriteErr != nil:
		return n, rewriteErr
	}
	return n, nil
}

// The statements mariadb-binlog writes before each transaction that give
// it the source's server id and GTID sequence number. Applied as they
// are, the restored server would log the source's GTIDs (refused, by
// gtid_strict_mode, when its own domain went past them loading the dump)
// under the source's server id, which a replica of the same id would skip
// as its own events. The replayed transactions take the restored server's
// own instead.
// (mariadb-binlog writes them on lines of their own, in versioned
// comments: /*M!100001 SET @@session.gtid_seq_no=3*//*!*/;)
var (
	sourceServerID = regexp.MustCompile(`^/\*M?!100001 SET @@session\.server_id=[0-9]+\*/`)
	sourceSeqNo    = regexp.MustCompile(`^/\*M?!100001 SET @@session\.gtid_seq_no=[0-9]+\*/`)
	// The comment before each transaction: "#261207  7:20:05 server id
	// 1000  end_log_pos 367 CRC32 0x5b9a8602 \tGTID 0-1000-1 ddl".
	gtidComment = regexp.MustCompile(`^#.*\tGTID ([0-9]+-[0-9]+-[0-9]+)`)
)

// rewrite copies mariadb-binlog's SQL from r to w with the source's server
// ids and sequence numbers taken out, counting the transactions and
// noting the last GTID of each domain.
func rewrite(r io.Reader, w io.Writer) (replayed, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriterSize(w, 1<<20)
	out := replayed{last: Position{}}
	long := false // inside a line longer than the buffer
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line (a row event's base64): no statement to change.
			if _, werr := bw.Write(line); werr != nil {
				return out, werr
			}
			long = true
			continue
		}
		if len(line) > 0 && !long {
			switch line[0] {
			case '#':
				if m := gtidComment.FindSubmatch(line); m != nil {
					if p, perr := ParsePosition(string(m[1])); perr == nil {
						for d, g := range p {
							out.last[d] = g
						}
						out.n++
					}
				}
			case '/':
				line = sourceServerID.ReplaceAll(line, []byte("/*M!100001 SET @@session.server_id=@@global.server_id*/"))
				line = sourceSeqNo.ReplaceAll(line, []byte("/*M!100001 DO 0*/"))
			}
		}
		long = false
		if len(line) > 0 {
			if _, werr := bw.Write(line); werr != nil {
				return out, werr
			}
		}
		if err == io.EOF {
			return out, bw.Flush()
		}
		if err != nil {
			return out, err
		}
	}
}

// FormatTarget is a target as the outcome reports it.
func FormatTarget(t Target) string {
	switch {
	case !t.Time.IsZero():
		return "time " + t.Time.UTC().Format(time.RFC3339Nano)
	case t.GTID != nil:
		return "GTID " + t.GTID.String()
	}
	return "the archive's end"
}

// restrict is p in the domains of q only.
func restrict(p, q Position) Position {
	out := Position{}
	for d := range q {
		if g, ok := p[d]; ok {
			out[d] = g
		}
	}
	return out
}
