package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/engine"
)

// EnvWALStream passes the WAL archive to the agent (PostgreSQL with
// spec.backup.archive), as EnvBinlogArchive does for MariaDB: the primary's
// agent streams the segment the server writes into it, so a transaction
// reaches the archive about a second after its commit instead of when its
// segment completes (archive_command archives the segment whole then).
const EnvWALStream = "WAL_STREAM"

// walStreamRound is how often the streamer uploads what it received.
const walStreamRound = time.Second

// WALStreamStatus is the WAL streamer's state, in GET /v1/archiver.
type WALStreamStatus struct {
	// Segment and End: the segment streamed last and the LSN its pieces
	// reach; Pieces how many were uploaded since the agent started.
	Segment string `json:"segment,omitempty"`
	End     string `json:"end,omitempty"`
	Pieces  int64  `json:"pieces"`
	// RecoverableAt: every transaction the server acknowledged before it
	// is in the archive (streamed or archived whole).
	RecoverableAt time.Time `json:"recoverableAt,omitzero"`
	LastError     string    `json:"lastError,omitempty"`
	LastErrorAt   time.Time `json:"lastErrorAt,omitzero"`
}

// walStreamer is one agent's streamer: its status outlives its sessions.
type walStreamer struct {
	arch wal.Archive
	mu   sync.Mutex
	st   WALStreamStatus
}

func (w *walStreamer) status() WALStreamStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}

func (w *walStreamer) update(f func(*WALStreamStatus)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.st)
}

// walStreamLoop streams the WAL while this server is the primary (as
// binlogLoop archives binary logs): one replication session at a time,
// started again a second after it ends.
func (a *Agent) walStreamLoop(ctx context.Context) {
	if a.walStream == nil {
		return
	}
	var lastErr string
	for ctx.Err() == nil {
		if a.isArchivingPrimary() {
			err := a.streamWAL(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				a.walStream.update(func(st *WALStreamStatus) { st.LastError, st.LastErrorAt = err.Error(), time.Now() })
				if err.Error() != lastErr {
					a.cfg.Log.Error(err, "streaming the WAL to the archive (started again every second; archive_command still archives each segment whole)")
				}
				lastErr = err.Error()
			default:
				lastErr = ""
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(walStreamRound):
		}
	}
}

// isArchivingPrimary: writable, running, and holding the primary Lease.
func (a *Agent) isArchivingPrimary() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.writable && a.running && a.holdsLocked()
}

// streamWAL is one replication session while the server is the archiving
// primary.
func (a *Agent) streamWAL(ctx context.Context) error {
	return a.walStream.session(ctx, a.cfg, a.isArchivingPrimary)
}

// StreamWAL runs one streaming session into arch from the server cfg names
// (Server, Superuser, TLSDir, Log) until primary says false, ctx ends or it
// fails, and returns the streamer's status: the engine tests run it
// against a real server.
func StreamWAL(ctx context.Context, cfg Config, arch wal.Archive, primary func() bool) (WALStreamStatus, error) {
	s := &walStreamer{arch: arch}
	err := s.session(ctx, cfg, primary)
	return s.status(), err
}

// session is one replication session: from the start of the segment the
// server writes, each round's WAL goes to the archive as a piece of its
// segment. It ends when primary says the server no longer is the
// archiving primary.
func (w *walStreamer) session(ctx context.Context, cfg Config, primary func() bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts, err := localOptions(cfg, 30*time.Second)
	if err != nil {
		return err
	}
	repl, err := engine.OpenPostgresConn(ctx, cfg.Server, cfg.Superuser, opts, true)
	if err != nil {
		return err
	}
	defer func() { _ = repl.Close(context.Background()) }()
	// A plain session beside it reads the server's clock and insert point.
	plain, err := engine.OpenPostgresConn(ctx, cfg.Server, cfg.Superuser, opts, false)
	if err != nil {
		return err
	}
	defer func() { _ = plain.Close(context.Background()) }()
	s, err := w.start(ctx, repl, plain)
	if err != nil {
		return err
	}
	cfg.Log.Info("streaming the WAL to the archive", "from", pglogrepl.LSN(s.at).String(), "timeline", s.timeline)

	var mark clockMark // the server's clock and insert point, read each round
	next := time.Now().Add(walStreamRound)
	for {
		if !primary() {
			return nil
		}
		if !time.Now().Before(next) {
			if mark, err = w.round(ctx, s, mark, repl, plain); err != nil {
				return err
			}
			next = time.Now().Add(walStreamRound)
			continue
		}
		rctx, rcancel := context.WithDeadline(ctx, next)
		msg, err := repl.ReceiveMessage(rctx)
		rcancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue // the round is due
			}
			return fmt.Errorf("receiving WAL: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.take(m.Data); err != nil {
				return err
			}
			if s.buf.Len() >= uploadAt {
				next = time.Now() // a burst of writes: upload now
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the WAL stream")
		}
	}
}

// start starts the stream at the beginning of the segment the server
// writes, on its timeline.
func (w *walStreamer) start(ctx context.Context, repl, plain *pgconn.PgConn) (*segmentStream, error) {
	segSize, err := walSegmentSize(ctx, plain)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sys, err := pglogrepl.IdentifySystem(sctx, repl)
	if err != nil {
		return nil, fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	start := sys.XLogPos - sys.XLogPos%pglogrepl.LSN(segSize)
	if err := startPhysical(sctx, repl, start, sys.Timeline); err != nil {
		return nil, fmt.Errorf("START_REPLICATION at %s on timeline %d: %w", start, sys.Timeline, err)
	}
	s := &segmentStream{arch: w.arch, segSize: uint64(segSize), timeline: uint32(sys.Timeline), at: uint64(start), sent: uint64(start), uploadedTo: uint64(start)}
	return s, nil
}

// round uploads what was received since the last one, moves the status's
// recoverable time to the last mark once the pieces reach its point,
// reads the next mark and replies to the server.
func (w *walStreamer) round(ctx context.Context, s *segmentStream, mark clockMark, repl, plain *pgconn.PgConn) (clockMark, error) {
	if err := s.upload(ctx, mark); err != nil {
		return mark, err
	}
	// The status says what the archive says (the last piece's info): a
	// recovery's window check reads that.
	w.update(func(st *WALStreamStatus) {
		if !s.recoverable.IsZero() {
			st.RecoverableAt = s.recoverable
		}
		if s.uploadedTo > 0 {
			st.Segment, st.End = s.segmentName(s.uploadedTo-1), pglogrepl.LSN(s.uploadedTo).String()
		}
		st.Pieces += s.pieces
		st.LastError = ""
	})
	s.pieces = 0
	next, err := readMark(ctx, plain)
	if err != nil {
		return mark, err
	}
	// A reply every round keeps the session (wal_sender_timeout). Its
	// positions stay invalid: synchronous_standby_names is 'ANY n (*)',
	// and a walsender with a valid flush position would count as a
	// synchronous standby, so a commit could be acknowledged with no
	// replica holding it, and a failover then lose it (TestWALStream).
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{}); err != nil {
		return mark, fmt.Errorf("replying to the server: %w", err)
	}
	return next, nil
}

// startPhysical starts streaming the WAL from start without a replication
// slot (pglogrepl's StartReplication always names one): the stream only
// needs the segment being written, which the server keeps anyway, and a
// slot would hold WAL back for an archiver that stopped.
func startPhysical(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN, timeline int32) error {
	conn.Frontend().SendQuery(&pgproto3.Query{String: fmt.Sprintf("START_REPLICATION PHYSICAL %s TIMELINE %d", start, timeline)})
	if err := conn.Frontend().Flush(); err != nil {
		return err
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			return nil
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.NoticeResponse:
		default:
			return fmt.Errorf("unexpected %T", msg)
		}
	}
}

// clockMark is the server's clock, then its insert point: every
// transaction acknowledged before at has its commit record before lsn
// (the insert point, not the flush point: with synchronous_commit off a
// commit is acknowledged before its record is flushed).
type clockMark struct {
	at  time.Time
	lsn uint64
}

func readMark(ctx context.Context, conn *pgconn.PgConn) (clockMark, error) {
	// clock_timestamp() is read before the insert point: the select list
	// is evaluated in order.
	rows, err := simpleQuery(ctx, conn, `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), pg_current_wal_insert_lsn()`)
	if err != nil {
		return clockMark{}, fmt.Errorf("reading the server's clock and insert point: %w", err)
	}
	at, err := time.Parse(time.RFC3339Nano, rows[0])
	if err != nil {
		return clockMark{}, err
	}
	lsn, err := pglogrepl.ParseLSN(rows[1])
	if err != nil {
		return clockMark{}, err
	}
	return clockMark{at: at, lsn: uint64(lsn)}, nil
}

// walSegmentSize is the server's wal_segment_size in bytes.
func walSegmentSize(ctx context.Context, conn *pgconn.PgConn) (int64, error) {
	rows, err := simpleQuery(ctx, conn, `SELECT setting::bigint * CASE unit WHEN 'B' THEN 1 WHEN '8kB' THEN 8192 WHEN 'MB' THEN 1048576 ELSE 1 END FROM pg_settings WHERE name = 'wal_segment_size'`)
	if err != nil {
		return 0, fmt.Errorf("reading wal_segment_size: %w", err)
	}
	n, err := strconv.ParseInt(rows[0], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("wal_segment_size %q", rows[0])
	}
	return n, nil
}

// simpleQuery runs a query returning one row and gives its values as text.
func simpleQuery(ctx context.Context, conn *pgconn.PgConn, sql string) ([]string, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := conn.Exec(qctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return nil, errors.New("no row")
	}
	var out []string
	for _, v := range res[0].Rows[0] {
		out = append(out, string(v))
	}
	return out, nil
}

// segmentStream holds the WAL received and not yet uploaded, and uploads
// it as pieces of its segments.
type segmentStream struct {
	arch     wal.Archive
	segSize  uint64
	timeline uint32
	// at is where the WAL received so far ends; buf holds it from sent.
	at, sent   uint64
	buf        bytes.Buffer
	uploadedTo uint64
	pieces     int64
	// recoverable is the RecoverableAt of the last piece's info.
	recoverable time.Time
}

// take adds a CopyData message of the stream: WAL (XLogData) or a
// keepalive, which needs no answer here (the round reports every second).
func (s *segmentStream) take(data []byte) error {
	if len(data) == 0 || data[0] != pglogrepl.XLogDataByteID {
		return nil
	}
	x, err := pglogrepl.ParseXLogData(data[1:])
	if err != nil {
		return fmt.Errorf("reading WAL from the stream: %w", err)
	}
	if uint64(x.WALStart) != s.at {
		return fmt.Errorf("the stream jumped from %s to %s", pglogrepl.LSN(s.at), x.WALStart)
	}
	if s.buf.Len()+len(x.WALData) > maxUnsent {
		// The target has been failing for a while: start again later from
		// the segment then written (archive_command keeps whole segments).
		return fmt.Errorf("%d MiB of WAL received and not uploaded yet: the archive takes it slower than the server writes it", maxUnsent>>20)
	}
	s.buf.Write(x.WALData)
	s.at += uint64(len(x.WALData))
	return nil
}

// maxUnsent bounds the WAL the streamer holds in memory for the archive;
// a round starts early once it holds uploadAt.
const (
	maxUnsent = 64 << 20
	uploadAt  = 8 << 20
)

// walPage is the size of a WAL page (XLOG_BLCKSZ).
const walPage = 8192

func (s *segmentStream) segmentName(lsn uint64) string {
	seg := lsn / s.segSize
	perID := uint64(0x100000000) / s.segSize
	return fmt.Sprintf("%08X%08X%08X", s.timeline, seg/perID, seg%perID)
}

// upload sends what was received since the last round, one piece per
// segment it touches. A failed upload ends the session (the next one
// starts again from the segment then written).
func (s *segmentStream) upload(ctx context.Context, mark clockMark) error {
	for s.sent < s.at {
		segStart := s.sent - s.sent%s.segSize
		end := min(s.at, segStart+s.segSize)
		n := end - s.sent
		// A segment ended by a switch (archive_timeout, pg_switch_wal) is
		// zero pages after its last record: they are not sent, a fetch
		// pads the segment with zeros anyway.
		keep := n
		if end == segStart+s.segSize {
			keep = trimZeroPages(s.buf.Bytes()[:n], s.sent)
		}
		if keep > 0 {
			// The mark's moment once the pieces reach its point; until
			// then the last one's (never back to none).
			recoverable := s.recoverable
			if end >= mark.lsn && !mark.at.IsZero() {
				recoverable = mark.at
			}
			info := wal.StreamInfo{Size: int64(s.sent + keep - segStart), SegmentSize: int64(s.segSize), End: pglogrepl.LSN(s.sent + keep).String(), RecoverableAt: recoverable}
			uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.arch.PushPiece(uctx, s.segmentName(s.sent), bytes.NewReader(s.buf.Bytes()[:keep]), int64(s.sent-segStart), int64(s.sent+keep-segStart), info)
			cancel()
			if err != nil {
				return fmt.Errorf("uploading WAL %s to %s: %w", pglogrepl.LSN(s.sent), pglogrepl.LSN(s.sent+keep), err)
			}
			s.pieces++
			s.recoverable = recoverable
		}
		s.buf.Next(int(n))
		s.sent, s.uploadedTo = end, end
	}
	return nil
}

// trimZeroPages is how much of data (WAL from LSN from) is left without
// the whole zero pages at its end.
func trimZeroPages(data []byte, from uint64) uint64 {
	end := from + uint64(len(data))
	for end > from {
		pageStart := max(end-(end-1)%walPage-1, from) // the page holding byte end-1
		if end%walPage != 0 || !allZero(data[pageStart-from:end-from]) || pageStart%walPage != 0 {
			break
		}
		end = pageStart
	}
	return end - from
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// walStreamFromEnv reads EnvWALStream; nil when it is not set.
func walStreamFromEnv(ctx context.Context) (*wal.Archive, error) {
	store, prefix, err := archiveFromEnv(ctx, EnvWALStream)
	if err != nil || store == nil {
		return nil, err
	}
	return &wal.Archive{Store: store, Prefix: prefix}, nil
}
