package binlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
)

// event encodes one binary log event with its CRC32.
func event(when uint32, typ byte, server uint32, body []byte) []byte {
	size := headerLen + len(body) + 4
	ev := make([]byte, headerLen, size)
	binary.LittleEndian.PutUint32(ev[0:], when)
	ev[4] = typ
	binary.LittleEndian.PutUint32(ev[5:], server)
	binary.LittleEndian.PutUint32(ev[9:], uint32(size))
	ev = append(ev, body...)
	return binary.LittleEndian.AppendUint32(ev, crc32.ChecksumIEEE(ev))
}

// fde is a format description; one of a file in use has the in-use flag,
// its checksum computed without it, as the server does.
func fde(when uint32, inUse bool) []byte {
	body := make([]byte, 2+50+4+1+5) // version, server version, created, header length, post-headers
	body = append(body, checksumCRC32)
	// The checksum algorithm byte is the body's last before the CRC.
	ev := event(when, formatDescriptionEvent, 1, body)
	if inUse {
		ev[17] |= logEventBinlogInUse
	}
	return ev
}

func gtidListBody(gs ...GTID) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(gs)))
	for _, g := range gs {
		b = binary.LittleEndian.AppendUint32(b, g.Domain)
		b = binary.LittleEndian.AppendUint32(b, g.Server)
		b = binary.LittleEndian.AppendUint64(b, g.Sequence)
	}
	return b
}

func gtidBody(seq uint64, domain uint32) []byte {
	b := binary.LittleEndian.AppendUint64(nil, seq)
	b = binary.LittleEndian.AppendUint32(b, domain)
	return append(b, 0)
}

// file is a binary log beginning after start, holding transactions
// seq from..to of domain 0 by server 7, closed unless open.
func file(start Position, from, to uint64, open bool) []byte {
	var gs []GTID
	for _, g := range start {
		gs = append(gs, g)
	}
	b := append([]byte(nil), magic...)
	b = append(b, fde(1000, open)...)
	b = append(b, event(1000, gtidListEvent, 7, gtidListBody(gs...))...)
	for s := from; s <= to && from > 0; s++ {
		b = append(b, event(1000+uint32(s), gtidEvent, 7, gtidBody(s, 0))...)
		b = append(b, event(1000+uint32(s), 2, 7, []byte("BEGIN; INSERT ...; COMMIT"))...)
	}
	if !open {
		b = append(b, event(2000, rotateEvent, 7, []byte("binlog.000009"))...)
	}
	return b
}

func pos(t *testing.T, s string) Position {
	t.Helper()
	p, err := ParsePosition(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestScan(t *testing.T) {
	b := file(Position{0: {0, 7, 4}, 1: {1, 3, 9}}, 5, 8, false)
	info, err := Scan(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if info.Start.String() != "0-7-4,1-3-9" || info.End.String() != "0-7-8,1-3-9" || info.Transactions != 4 || !info.Closed || info.Size != int64(len(b)) {
		t.Errorf("scanned %+v", info)
	}
	if !info.First.Equal(time.Unix(1005, 0)) || !info.Last.Equal(time.Unix(1008, 0)) || !info.ClosedAt.Equal(time.Unix(2000, 0)) {
		t.Errorf("times %s %s %s", info.First, info.Last, info.ClosedAt)
	}

	open := file(Position{}, 1, 3, true)
	if info, err := Scan(bytes.NewReader(open)); err != nil || info.Closed {
		t.Errorf("a file in use: %+v %v", info, err)
	}
	// The file the server writes may end in half an event: read as far
	// as it is whole; a finished file may not.
	if _, err := Scan(bytes.NewReader(open[:len(open)-5])); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a truncated file: %v", err)
	}
	if info, err := scan(bytes.NewReader(open[:len(open)-5]), true); err != nil || info.Transactions != 3 {
		t.Errorf("the whole part of a file in use: %+v %v", info, err)
	}

	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"a flipped byte", func() []byte { c := bytes.Clone(b); c[len(c)/2] ^= 1; return c }()},
		{"no header", b[4:]},
		{"an event size past the end", func() []byte { c := bytes.Clone(b); binary.LittleEndian.PutUint32(c[len(magic)+9:], 1<<31); return c }()},
		{"no format description", append(append([]byte(nil), magic...), event(1, gtidEvent, 1, gtidBody(1, 0))...)},
	} {
		if _, err := Scan(bytes.NewReader(tc.b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}

func TestPosition(t *testing.T) {
	p := pos(t, " 1-2-30, 0-1001-57 ")
	if p.String() != "0-1001-57,1-2-30" {
		t.Errorf("%s", p)
	}
	if !p.Covers(pos(t, "0-5-57")) || p.Covers(pos(t, "0-5-58")) || p.Covers(pos(t, "2-1-1")) || !p.Covers(Position{}) {
		t.Error("Covers")
	}
	for _, bad := range []string{"0-1", "a-b-c", "0-1-2,0-1-3", "0-1-2-3"} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if p, err := ParsePosition(""); err != nil || len(p) != 0 {
		t.Errorf("the empty position: %v %v", p, err)
	}
}

func archived(source, name string, start, end string, closed int64) File {
	s, _ := ParsePosition(start)
	e, _ := ParsePosition(end)
	f := File{Source: source, Info: Info{Start: s, End: e, Closed: true, ClosedAt: time.Unix(closed, 0)}}
	f.Name = name
	return f
}

func names(fs []File) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return strings.Join(out, " ")
}

func TestChain(t *testing.T) {
	// a: the first primary; b: its replica, promoted at 0-1-20 (its
	// files hold a's transactions too, log_slave_updates).
	files := map[string][]File{
		"a": {archived("a", "binlog.000001", "", "0-1-10", 100), archived("a", "binlog.000002", "0-1-10", "0-1-20", 200)},
		"b": {archived("b", "binlog.000001", "0-1-5", "0-1-15", 150), archived("b", "binlog.000002", "0-1-15", "0-2-30", 300)},
	}
	for _, tc := range []struct{ from, want string }{
		{"0-1-12", "b/binlog.000001 b/binlog.000002"}, // the newest primary reaches furthest
		{"0-1-3", "a/binlog.000001 a/binlog.000002"},  // b begins after it
		{"", "a/binlog.000001 a/binlog.000002"},
	} {
		got, err := Chain(files, pos(t, tc.from))
		if err != nil || names(got) != tc.want {
			t.Errorf("from %q: %s %v, want %s", tc.from, names(got), err, tc.want)
		}
	}
	// A replica cloned from a dump logs nothing of the load: its first
	// file's GTID list is empty though its first transaction is 0-1-41.
	// It begins there, not before the backup at 0-1-12.
	clone := archived("c", "binlog.000001", "", "0-1-60", 900)
	clone.Info.FirstGTIDs = pos(t, "0-1-41")
	withClone := map[string][]File{"a": files["a"], "c": {clone}}
	if got, err := Chain(withClone, pos(t, "0-1-12")); err != nil || names(got) != "a/binlog.000002" {
		t.Errorf("a clone's archive taken to begin before its first transaction: %s %v", names(got), err)
	}
	if got, err := Chain(withClone, pos(t, "0-1-45")); err != nil || names(got) != "c/binlog.000001" {
		t.Errorf("from inside the clone's file: %s %v", names(got), err)
	}
	// After a failover the old primary's archive may run further in
	// sequence numbers (transactions no replica received): the newest
	// primary's line is the Database's.
	diverged := map[string][]File{
		"old": {archived("old", "binlog.000001", "", "0-1-105", 200)},
		"new": {archived("new", "binlog.000001", "0-1-5", "0-1-100", 150), archived("new", "binlog.000002", "0-1-100", "0-2-103", 300)},
	}
	if got, err := Chain(diverged, pos(t, "0-1-50")); err != nil || names(got) != "new/binlog.000001 new/binlog.000002" {
		t.Errorf("diverged lines: %s %v, want the newest primary's", names(got), err)
	}
	// The same sequence number by another server is not the same point.
	if samePosition(pos(t, "0-1-100"), pos(t, "0-2-100")) {
		t.Error("0-1-100 and 0-2-100 taken for the same position")
	}
	// A file missing in the middle breaks a source's run there.
	gap := map[string][]File{"a": {archived("a", "binlog.000001", "", "0-1-10", 100), archived("a", "binlog.000003", "0-1-20", "0-1-30", 300)}}
	if got, err := Chain(gap, pos(t, "0-1-5")); err != nil || names(got) != "a/binlog.000001" {
		t.Errorf("over a gap: %s %v", names(got), err)
	}
	if _, err := Chain(gap, pos(t, "0-1-15")); !errors.Is(err, ErrNoChain) || !strings.Contains(err.Error(), "gap before binlog.000003") {
		t.Errorf("from past a gap: %v", err)
	}
	if _, err := Chain(map[string][]File{}, pos(t, "0-1-5")); !errors.Is(err, ErrNoChain) {
		t.Errorf("an empty archive: %v", err)
	}
}

func TestLogNumberOrder(t *testing.T) {
	if logNumber("binlog.999999") >= logNumber("binlog.1000000") {
		t.Error("file numbers past six digits sort before")
	}
}

func TestRewrite(t *testing.T) {
	// As mariadb-binlog 10.11 writes it; a statement quoting the same
	// text is left alone.
	in := "#261207  6:40:01 server id 1001  end_log_pos 589 CRC32 0x1  \tGTID 0-1001-3 trans\n" +
		"/*M!100101 SET @@session.skip_parallel_replication=0*//*!*/;\n" +
		"/*M!100001 SET @@session.gtid_domain_id=0*//*!*/;\n" +
		"/*M!100001 SET @@session.server_id=1001*//*!*/;\n" +
		"/*M!100001 SET @@session.gtid_seq_no=3*//*!*/;\n" +
		"START TRANSACTION\n" + "BINLOG '\n" + strings.Repeat("A", 3<<20) + "\n'/*!*/;\n" +
		"#261207  6:40:02 server id 1001  end_log_pos 700 CRC32 0x2  \tGTID 1-1001-9 ddl\n" +
		"/*M!100001 SET @@session.gtid_seq_no=9*//*!*/;\n" +
		"CREATE TABLE t (note TEXT DEFAULT 'SET @@session.server_id=5')\n"
	var out bytes.Buffer
	seen, err := rewrite(strings.NewReader(in), &out)
	if err != nil || seen.n != 2 || seen.last.String() != "0-1001-3,1-1001-9" {
		t.Fatal(seen, err)
	}
	got := out.String()
	for _, want := range []string{"SET @@session.server_id=@@global.server_id*/", "/*M!100001 DO 0*/", "gtid_domain_id=0", strings.Repeat("A", 3<<20) + "\n'", "DEFAULT 'SET @@session.server_id=5'"} {
		if !strings.Contains(got, want) {
			t.Errorf("rewritten SQL lacks %.60q", want)
		}
	}
	if strings.Contains(got, "server_id=1001") || strings.Contains(got, "gtid_seq_no=3") || strings.Contains(got, "gtid_seq_no=9") ||
		len(got) != len(in)-len("SET @@session.server_id=1001")+len("SET @@session.server_id=@@global.server_id")-len("SET @@session.gtid_seq_no=3")-len("SET @@session.gtid_seq_no=9")+2*len("DO 0") {
		t.Errorf("rewritten SQL keeps the source's ids or changed more: %d bytes from %d", len(got), len(in))
	}
}

type fakeServer struct {
	files   []LogFile
	pos     string
	flushes int
	onFlush func(*fakeServer)
}

func (f *fakeServer) BinlogPosition(context.Context) (string, error) { return f.pos, nil }

func (f *fakeServer) BinaryLogs(context.Context) ([]LogFile, error) { return f.files, nil }
func (f *fakeServer) FlushBinaryLogs(context.Context) error {
	f.flushes++
	f.onFlush(f)
	return nil
}

func TestArchiver(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := fileWriter(t, dir)
	srv := &fakeServer{pos: "0-7-2", files: []LogFile{
		{Name: "binlog.000001", Size: write("binlog.000001", file(Position{}, 1, 2, false))},
		{Name: "binlog.000002", Size: write("binlog.000002", file(pos(t, "0-7-2"), 0, 0, true))},
	}}
	srv.onFlush = func(f *fakeServer) {
		f.files[1].Size = write("binlog.000002", file(pos(t, "0-7-2"), 3, 3, false))
		f.files = append(f.files, LogFile{Name: "binlog.000003", Size: write("binlog.000003", file(pos(t, "0-7-3"), 0, 0, true))})
	}
	now := time.Unix(5000, 0)
	arch := Archive{Store: storage.NewDir(t.TempDir()), Prefix: "ns/db/_binlog/uid"}
	r := &Archiver{Archive: arch, Source: "db-0-x", Dir: dir, Server: srv, Timeout: 10 * time.Second, Log: logr.Discard(), Now: func() time.Time { return now }}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	// The finished file is archived; the current one holds no
	// transaction: nothing waits, nothing is closed.
	if st := r.Status(); st.Archived != 1 || st.LastArchived != "binlog.000001" || srv.flushes != 0 {
		t.Fatalf("%+v, %d flushes", st, srv.flushes)
	}
	// The server adds an event to the new file by itself (a binlog
	// checkpoint): no write, nothing waits.
	srv.files[1].Size += 40
	now = now.Add(time.Minute)
	if err := r.Once(ctx); err != nil || srv.flushes != 0 {
		t.Fatalf("a file grown without a write was closed: %v, %d flushes", err, srv.flushes)
	}
	// A write: the file is closed once it has waited Timeout, not before.
	srv.files[1].Size = write("binlog.000002", file(pos(t, "0-7-2"), 3, 3, true))
	srv.pos = "0-7-3"
	for i, step := range []time.Duration{0, 5 * time.Second, 5 * time.Second, time.Second} {
		now = now.Add(step)
		if err := r.Once(ctx); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[i >= 2]; srv.flushes != want {
			t.Fatalf("after %d rounds: %d flushes, want %d", i+1, srv.flushes, want)
		}
	}
	files, err := arch.List(ctx)
	if err != nil || len(files["db-0-x"]) != 2 || files["db-0-x"][1].Info.End.String() != "0-7-3" {
		t.Errorf("archived %+v %v", files, err)
	}
	// An agent restarted over a file holding a write closes it too.
	srv.files[2].Size = write("binlog.000003", file(pos(t, "0-7-3"), 4, 4, true))
	srv.pos = "0-7-4"
	r = &Archiver{Archive: arch, Source: "db-0-x", Dir: dir, Server: srv, Timeout: 10 * time.Second, Log: logr.Discard(), Now: func() time.Time { return now }}
	srv.onFlush = func(*fakeServer) {}
	_ = r.Once(ctx)
	now = now.Add(10 * time.Second)
	_ = r.Once(ctx)
	if srv.flushes != 2 {
		t.Errorf("a restarted archiver did not close the file holding a write (%d flushes)", srv.flushes)
	}
	// A file the archive holds with other contents stops the archiver and
	// counts as a failure (a restarted agent sends the archive's last file
	// again; those before it it takes as archived).
	write("binlog.000002", file(pos(t, "0-7-2"), 3, 5, false))
	r = &Archiver{Archive: arch, Source: "db-0-x", Dir: dir, Server: srv, Timeout: time.Hour, Log: logr.Discard()}
	if err := r.Once(ctx); err == nil || !r.Status().Failing() || !strings.Contains(r.Status().LastError, "other contents") {
		t.Errorf("a conflicting file: %v %+v", err, r.Status())
	}
}

// A file the server was writing when it crashed (flagged in use, ending in
// half an event) is archived up to its last whole event.
func TestPushCrashedFile(t *testing.T) {
	dir := t.TempDir()
	b := file(pos(t, "0-7-2"), 3, 5, true)
	full := len(b)
	b = append(b, event(1100, gtidEvent, 7, gtidBody(6, 0))[:10]...)
	path := filepath.Join(dir, "binlog.000004")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	arch := Archive{Store: storage.NewDir(t.TempDir()), Prefix: "ns/db/_binlog/uid"}
	f, err := arch.Push(context.Background(), "db-0-x", path)
	if err != nil || f.Size != int64(full) || f.Info.Closed || f.Info.End.String() != "0-7-5" || !f.Info.ClosedAt.Equal(f.Info.Last) {
		t.Fatalf("pushed %+v %v, want the %d whole bytes up to 0-7-5", f, err, full)
	}
	dest := filepath.Join(t.TempDir(), "binlog.000004")
	if err := arch.Fetch(context.Background(), f, dest); err != nil {
		t.Errorf("fetching it back: %v", err)
	}
}

// A file that does not begin where the one archived before ended (one was
// deleted before it was archived) is archived all the same, and the gap
// counted and said.
func TestArchiverGap(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := fileWriter(t, dir)
	srv := &fakeServer{pos: "0-7-9", files: []LogFile{
		{Name: "binlog.000001", Size: write("binlog.000001", file(Position{}, 1, 2, false))},
		{Name: "binlog.000003", Size: write("binlog.000003", file(pos(t, "0-7-5"), 6, 9, false))},
		{Name: "binlog.000004", Size: write("binlog.000004", file(pos(t, "0-7-9"), 0, 0, true))},
	}}
	r := &Archiver{Archive: Archive{Store: storage.NewDir(t.TempDir()), Prefix: "p"}, Source: "db-0-x", Dir: dir, Server: srv, Timeout: time.Hour, Log: logr.Discard()}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.Status(); st.Archived != 2 || st.Gaps != 1 || !strings.Contains(st.LastGap, "binlog.000003 begins at 0-7-5") {
		t.Errorf("%+v", st)
	}
}

// fileWriter writes files into dir, returning their sizes.
func fileWriter(t *testing.T, dir string) func(name string, b []byte) int64 {
	return func(name string, b []byte) int64 {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return int64(len(b))
	}
}

// A replica cloned from a dump: the load is not logged, so its first file
// holds nothing and the next begins, with an empty GTID list, at its first
// replicated transaction. That is no gap; a domain it logs for the first
// time continues a run only when the backup has that domain's past.
func TestCloneContinues(t *testing.T) {
	empty := archived("c", "binlog.000001", "", "", 100)
	second := archived("c", "binlog.000002", "", "0-1-60", 200)
	second.Info.FirstGTIDs = pos(t, "0-1-41")
	files := map[string][]File{"c": {empty, second}}
	if got, err := Chain(files, pos(t, "0-1-45")); err != nil || names(got) != "c/binlog.000002" {
		t.Errorf("from inside the second file: %s %v", names(got), err)
	}
	if _, err := Chain(files, pos(t, "0-1-12")); !errors.Is(err, ErrNoChain) {
		t.Errorf("from before the clone's first transaction: %v, want no chain", err)
	}
	if _, ok := continues(empty.Info.End, StartOf(second.Info)); !ok {
		t.Error("a clone's empty first file taken for a gap")
	}

	// The archiver says the same: no gap; and one restarted over a
	// server that lost files since (purged unarchived) finds the gap
	// against what the archive holds.
	ctx := context.Background()
	dir := t.TempDir()
	write := fileWriter(t, dir)
	srv := &fakeServer{pos: "0-7-60", files: []LogFile{
		{Name: "binlog.000001", Size: write("binlog.000001", file(Position{}, 0, 0, false))},
		{Name: "binlog.000002", Size: write("binlog.000002", file(Position{}, 41, 60, false))},
		{Name: "binlog.000003", Size: write("binlog.000003", file(pos(t, "0-7-60"), 0, 0, true))},
	}}
	arch := Archive{Store: storage.NewDir(t.TempDir()), Prefix: "p"}
	r := &Archiver{Archive: arch, Source: "db-1-x", Dir: dir, Server: srv, Timeout: time.Hour, Log: logr.Discard()}
	if err := r.Once(ctx); err != nil || r.Status().Gaps != 0 {
		t.Fatalf("a clone's files: %v, %+v", err, r.Status())
	}
	srv.files = []LogFile{
		{Name: "binlog.000005", Size: write("binlog.000005", file(pos(t, "0-7-80"), 81, 82, false))},
		{Name: "binlog.000006", Size: write("binlog.000006", file(pos(t, "0-7-82"), 0, 0, true))},
	}
	r = &Archiver{Archive: arch, Source: "db-1-x", Dir: dir, Server: srv, Timeout: time.Hour, Log: logr.Discard()}
	if err := r.Once(ctx); err != nil || r.Status().Gaps != 1 || !strings.Contains(r.Status().LastGap, "binlog.000005 begins at 0-7-80") {
		t.Errorf("a restarted archiver past lost files: %v, %+v", err, r.Status())
	}
}

// A file left by a crash right after a flush holds no transaction: it is
// dated by its last event all the same (a zero date would put the
// archive's end at year 1 and refuse every time target).
func TestPushCrashedIdleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "binlog.000007")
	if err := os.WriteFile(path, file(pos(t, "0-7-9"), 0, 0, true), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Archive{Store: storage.NewDir(t.TempDir()), Prefix: "p"}.Push(context.Background(), "db-0-x", path)
	if err != nil || f.Info.ClosedAt.IsZero() {
		t.Errorf("%+v %v", f.Info, err)
	}
}

// A GTID target names the domains it stops in; the backup's other domains
// do not make it "before the backup".
func TestWindowOfAGTIDTarget(t *testing.T) {
	o := ReplayOptions{From: pos(t, "0-1-100,1-2-7"), Target: Target{GTID: pos(t, "0-1-150")}}
	if err := checkWindow(o, Outcome{End: pos(t, "0-1-200,1-2-9")}); err != nil {
		t.Errorf("a one-domain target: %v", err)
	}
	o.Target.GTID = pos(t, "0-1-90")
	if err := checkWindow(o, Outcome{End: pos(t, "0-1-200,1-2-9")}); !errors.Is(err, ErrOutsideWindow) {
		t.Errorf("a target before the backup: %v", err)
	}
}

// Retention deletes only the files no replay from a kept backup reads: the
// run Chain picks from every kept position is the same afterwards, and
// each source keeps its last file.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := fileWriter(t, dir)
	arch := Archive{Store: storage.NewDir(t.TempDir()), Prefix: "ns/db/_binlog/uid"}
	push := func(source, name string, b []byte) {
		t.Helper()
		write(name, b)
		if _, err := arch.Push(ctx, source, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	push("a", "binlog.000001", file(Position{}, 1, 10, false))
	push("a", "binlog.000002", file(pos(t, "0-7-10"), 11, 20, false))
	push("a", "binlog.000003", file(pos(t, "0-7-20"), 21, 30, false))
	push("a", "binlog.000004", file(pos(t, "0-7-30"), 31, 31, false))
	push("b", "binlog.000001", file(pos(t, "0-7-5"), 6, 8, false))
	chains := func(from ...Position) string {
		files, err := arch.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range from {
			got, err := Chain(files, p)
			out = append(out, fmt.Sprintf("%s: %s %v", p, names(got), err))
		}
		return strings.Join(out, "\n")
	}
	if got, err := arch.Prune(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("no kept backup: deleted %d (%v)", len(got), err)
	}
	kept := []Position{pos(t, "0-7-25"), pos(t, "0-7-15")}
	before := chains(kept...)
	deleted, err := arch.Prune(ctx, kept)
	if err != nil || names(deleted) != "a/binlog.000001" {
		t.Fatalf("deleted %s (%v), want a/binlog.000001 only: a/binlog.000002 begins the run from 0-7-15", names(deleted), err)
	}
	if after := chains(kept...); after != before {
		t.Errorf("the runs changed:\n%s\nwant\n%s", after, before)
	}
	// Past every file: all but each source's last go.
	deleted, err = arch.Prune(ctx, []Position{pos(t, "0-7-99")})
	if err != nil || names(deleted) != "a/binlog.000002 a/binlog.000003" {
		t.Errorf("deleted %s (%v)", names(deleted), err)
	}
	files, err := arch.List(ctx)
	if err != nil || len(files["a"]) != 1 || files["a"][0].Name != "binlog.000004" || len(files["b"]) != 1 {
		t.Errorf("left %v %v", files, err)
	}
	// The file the server writes streamed after the last whole one: the
	// last whole one stays (an agent's gap check reads it).
	write("binlog.000005", file(pos(t, "0-7-31"), 32, 33, true))
	if err := arch.PushPart(ctx, "a", "binlog.000005", bytes.NewReader(file(pos(t, "0-7-31"), 32, 33, true)), 0,
		int64(len(file(pos(t, "0-7-31"), 32, 33, true))), mustScan(t, filepath.Join(dir, "binlog.000005"))); err != nil {
		t.Fatal(err)
	}
	if deleted, err := arch.Prune(ctx, []Position{pos(t, "0-7-99")}); err != nil || len(deleted) != 0 {
		t.Errorf("deleted %s (%v), want the last whole file kept", names(deleted), err)
	}
	// An agent restarted over a server that still has the deleted files
	// sends none of them again and finds no gap.
	srv := &fakeServer{pos: "0-7-33", files: []LogFile{}}
	for _, name := range []string{"binlog.000001", "binlog.000002", "binlog.000003", "binlog.000004", "binlog.000005"} {
		st, _ := os.Stat(filepath.Join(dir, name))
		srv.files = append(srv.files, LogFile{Name: name, Size: st.Size()})
	}
	r := &Archiver{Archive: arch, Source: "a", Dir: dir, Server: srv, Timeout: time.Hour, Log: logr.Discard()}
	if err := r.Once(ctx); err != nil || r.Status().Gaps != 0 || r.Status().Archived != 1 {
		t.Errorf("an agent restarted after retention: %v, %+v; want only the last archived file seen again, no gap", err, r.Status())
	}
	if files, _ := arch.List(ctx); len(files["a"]) != 2 {
		t.Errorf("files deleted by retention archived again: %s", names(files["a"]))
	}
}

func mustScan(t *testing.T, file string) Info {
	t.Helper()
	info, err := scanOpen(file)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// The file the server writes is archived as it grows, up to the size the
// server gives (a transaction's end), a piece per round; an agent
// restarted mid-file goes on from what the archive holds; a lost or
// damaged piece fails the fetch; once closed the file is archived whole
// and its pieces go.
func TestStream(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := fileWriter(t, dir)
	srv := &fakeServer{pos: "0-7-2", files: []LogFile{{Name: "binlog.000001", Size: write("binlog.000001", file(Position{}, 1, 2, true))}}}
	root := t.TempDir()
	arch := Archive{Store: storage.NewDir(root), Prefix: "p"}
	newArchiver := func() *Archiver {
		return &Archiver{Archive: arch, Source: "db-0-x", Dir: dir, Server: srv, Timeout: time.Hour, Stream: true, Log: logr.Discard()}
	}
	once := func(r *Archiver) {
		t.Helper()
		if err := r.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(f File) error {
		return arch.Fetch(ctx, f, filepath.Join(t.TempDir(), f.Name))
	}
	streamed := func(want string) File {
		t.Helper()
		files, err := arch.List(ctx)
		fs := files["db-0-x"]
		if err != nil || len(fs) != 1 || !fs[0].Streamed || fs[0].Info.End.String() != want || fs[0].Info.Closed {
			t.Fatalf("archived %+v (%v), want the file streamed up to %s", fs, err, want)
		}
		dest := filepath.Join(t.TempDir(), "f")
		if err := arch.Fetch(ctx, fs[0], dest); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(dest)
		onDisk, _ := os.ReadFile(filepath.Join(dir, fs[0].Name))
		if !bytes.Equal(got, onDisk[:fs[0].Size]) {
			t.Fatalf("fetched %d bytes unlike the file's first %d", len(got), fs[0].Size)
		}
		return fs[0]
	}
	r := newArchiver()
	once(r)
	streamed("0-7-2")
	// The disk holds a transaction the server's size does not count yet:
	// it waits for the next round.
	srv.files[0].Size = int64(len(file(Position{}, 1, 3, true)))
	write("binlog.000001", file(Position{}, 1, 4, true))
	once(r)
	streamed("0-7-3")
	if st := r.Status(); st.Streamed != srv.files[0].Size || st.Archived != 0 {
		t.Errorf("status %+v", st)
	}
	srv.files[0].Size = int64(len(file(Position{}, 1, 4, true)))
	r = newArchiver()
	once(r)
	f := streamed("0-7-4")
	partDir := filepath.Join(root, "p", "db-0-x", "binlog.000001.part")
	pieces, _ := filepath.Glob(filepath.Join(partDir, "0*"))
	starts := map[string]bool{}
	for _, p := range pieces {
		from, _, _ := strings.Cut(filepath.Base(p), "-")
		starts[from] = true
	}
	if len(pieces) != 3 || len(starts) != 3 {
		t.Fatalf("pieces %v, want 3 one after the other: the restarted agent goes on after what was sent", pieces)
	}
	// A piece lost, a piece damaged: the fetch fails, as corrupt.
	keep, _ := os.ReadFile(pieces[1])
	_ = os.Remove(pieces[1])
	if err := fetch(f); !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "no streamed piece holds byte") {
		t.Errorf("a lost piece: %v", err)
	}
	bad := append([]byte(nil), keep...)
	bad[len(bad)/2] ^= 0xff
	_ = os.WriteFile(pieces[1], bad, 0o600)
	if err := fetch(f); !errors.Is(err, wal.ErrCorrupt) {
		t.Errorf("a damaged piece: %v", err)
	}
	_ = os.WriteFile(pieces[1], keep, 0o600)
	// Closed: archived whole, its pieces gone; the next file streams. A
	// restore that listed it streamed takes the whole file.
	srv.files[0].Size = write("binlog.000001", file(Position{}, 1, 4, false))
	srv.files = append(srv.files, LogFile{Name: "binlog.000002", Size: write("binlog.000002", file(pos(t, "0-7-4"), 0, 0, true))})
	once(r)
	if err := fetch(f); err != nil {
		t.Errorf("a file listed streamed, archived whole since: %v", err)
	}
	files, err := arch.List(ctx)
	if fs := files["db-0-x"]; err != nil || len(fs) != 2 || fs[0].Streamed || !fs[1].Streamed || fs[1].Name != "binlog.000002" {
		t.Fatalf("archived %+v (%v)", fs, err)
	}
	if _, err := os.Stat(partDir); !os.IsNotExist(err) {
		t.Errorf("the pieces of the file archived whole are left: %v", err)
	}
}
