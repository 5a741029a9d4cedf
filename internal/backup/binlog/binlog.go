// Package binlog archives MariaDB's binary logs to a backup target and
// replays them into a restored server: the base of point-in-time recovery
// for MariaDB (and MySQL, whose binary log shares the format this package
// reads, though not MariaDB's GTID events; MySQL has no server on the
// machines these tests run on).
//
// The primary's agent copies each binary log file the server has closed
// (Archiver), with its checksum and what it holds: the GTID state at its
// start, the last GTID of each domain, and its first and last event time
// (Scan). A recovery loads a logical backup (whose dump records its GTID
// position) and replays the archived events from that position to the
// target with the server's own mariadb-binlog (Replay).
package binlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Event types this package reads (the rest are walked over).
const (
	stopEvent              = 3
	rotateEvent            = 4
	formatDescriptionEvent = 15
	gtidEvent              = 162 // MariaDB
	gtidListEvent          = 163 // MariaDB
)

const (
	headerLen = 19
	// logEventBinlogInUse is the format description's flag of a file the
	// server has not closed (it is being written, or the server crashed).
	logEventBinlogInUse = 0x1
	checksumCRC32       = 1
)

var magic = []byte{0xfe, 'b', 'i', 'n'}

// GTID is one MariaDB global transaction id: domain-server-sequence.
type GTID struct {
	Domain   uint32 `json:"domain"`
	Server   uint32 `json:"server"`
	Sequence uint64 `json:"sequence"`
}

func (g GTID) String() string { return fmt.Sprintf("%d-%d-%d", g.Domain, g.Server, g.Sequence) }

// Position is a GTID position: the last transaction of each domain.
type Position map[uint32]GTID

// String is the position as MariaDB prints it (gtid_binlog_pos), by domain.
func (p Position) String() string {
	domains := make([]uint32, 0, len(p))
	for d := range p {
		domains = append(domains, d)
	}
	sort.Slice(domains, func(i, j int) bool { return domains[i] < domains[j] })
	parts := make([]string, len(domains))
	for i, d := range domains {
		parts[i] = p[d].String()
	}
	return strings.Join(parts, ",")
}

// ParsePosition reads a GTID position as MariaDB prints it ("0-1001-57,1-1002-3";
// "" is the empty position).
func ParsePosition(s string) (Position, error) {
	p := Position{}
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("%q is not a GTID (domain-server-sequence)", part)
		}
		d, err1 := strconv.ParseUint(f[0], 10, 32)
		sv, err2 := strconv.ParseUint(f[1], 10, 32)
		seq, err3 := strconv.ParseUint(f[2], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%q is not a GTID (domain-server-sequence): %w", part, err)
		}
		if _, dup := p[uint32(d)]; dup {
			return nil, fmt.Errorf("GTID position %q names domain %d twice", s, d)
		}
		p[uint32(d)] = GTID{Domain: uint32(d), Server: uint32(sv), Sequence: seq}
	}
	return p, nil
}

// Covers reports whether every transaction of q is at or before p in its
// domain (a domain p lacks is covered only when q's sequence there is 0).
func (p Position) Covers(q Position) bool {
	for d, g := range q {
		if g.Sequence > p[d].Sequence {
			return false
		}
	}
	return true
}

// Info is what one binary log file holds.
type Info struct {
	// Start is the GTID state when the file began (its Gtid_list event):
	// every transaction in it comes after.
	Start Position `json:"start"`
	// End is the GTID state at the file's end: Start advanced by its own
	// transactions.
	End Position `json:"end"`
	// FirstGTIDs is each domain's first transaction in the file. A
	// server's first file may begin with an empty GTID list although its
	// data is past it (a replica cloned from a dump logs nothing of the
	// load): its first transaction says where it really begins.
	FirstGTIDs Position `json:"firstGTIDs,omitempty"`
	// Transactions counts its GTID events.
	Transactions int `json:"transactions"`
	// First and Last are the times of its first and last transactions
	// (whole seconds, as the binary log records them); zero when it holds
	// none.
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
	// Closed: the server finished the file (rotated or shut down); a file
	// still in use is never archived. ClosedAt is when (its last event):
	// every transaction before then is in this file or an earlier one.
	Closed   bool      `json:"closed"`
	ClosedAt time.Time `json:"closedAt,omitzero"`
	// LastEvent is the time of its last event of any kind.
	LastEvent time.Time `json:"lastEvent,omitzero"`
	// Size is the file's length in bytes.
	Size int64 `json:"size"`
}

// ErrCorrupt is wrapped by Scan's error for a file that is not a whole,
// valid binary log: a bad checksum, a truncated or malformed event.
var ErrCorrupt = errors.New("binary log is corrupt")

// ScanFile reads the binary log file at path (Scan).
func ScanFile(path string) (Info, error) {
	return scanFile(path, false)
}

func scanFile(path string, partial bool) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer func() { _ = f.Close() }()
	info, err := scan(f, partial)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// Scan reads a binary log from r, verifying each event's checksum when the
// file has them (MariaDB's default binlog_checksum=CRC32).
func Scan(r io.Reader) (Info, error) { return scan(r, false) }

// scan is Scan; partial stops without an error at a truncated event (a
// file the server is writing).
func scan(r io.Reader, partial bool) (Info, error) {
	s := newScanner()
	if err := s.read(r, partial); err != nil {
		return Info{}, err
	}
	return s.info, nil
}

// scanner reads a binary log's events in order, verifying each; it can be
// fed a file in pieces (the file the server writes, streamed as it grows).
type scanner struct {
	info      Info
	checksums bool
	buf       []byte
}

func newScanner() *scanner {
	return &scanner{info: Info{Start: Position{}, End: Position{}, FirstGTIDs: Position{}}}
}

// clone is a copy that reads on independently (a piece that turns out not
// to be whole leaves the original as it was).
func (s *scanner) clone() *scanner {
	c := *s
	c.info.Start, c.info.End, c.info.FirstGTIDs = maps(s.info.Start), maps(s.info.End), maps(s.info.FirstGTIDs)
	c.buf = nil
	return &c
}

// read reads events from r, the file's next bytes, to its end: the file's
// header first when nothing was read yet. partial stops without an error
// at a truncated event, which is then not counted.
func (s *scanner) read(r io.Reader, partial bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	info := &s.info
	if info.Size == 0 {
		head := make([]byte, len(magic))
		if _, err := io.ReadFull(br, head); err != nil || string(head) != string(magic) {
			return fmt.Errorf("%w: no binary log header", ErrCorrupt)
		}
		info.Size = int64(len(magic))
	}
	hdr := make([]byte, headerLen)
	for {
		if _, err := io.ReadFull(br, hdr); err == io.EOF || partial && err != nil {
			return nil
		} else if err != nil {
			return fmt.Errorf("%w: a truncated event header at byte %d", ErrCorrupt, info.Size)
		}
		at := info.Size
		when := binary.LittleEndian.Uint32(hdr[0:])
		typ := hdr[4]
		server := binary.LittleEndian.Uint32(hdr[5:])
		size := binary.LittleEndian.Uint32(hdr[9:])
		flags := binary.LittleEndian.Uint16(hdr[17:])
		if size < headerLen || size > 1<<30 {
			return fmt.Errorf("%w: an event at byte %d claims %d bytes", ErrCorrupt, at, size)
		}
		if cap(s.buf) < int(size) {
			s.buf = make([]byte, size)
		}
		ev := s.buf[:size]
		copy(ev, hdr)
		if _, err := io.ReadFull(br, ev[headerLen:]); err != nil {
			if partial {
				return nil
			}
			return fmt.Errorf("%w: a truncated event at byte %d (%d bytes announced)", ErrCorrupt, at, size)
		}
		if at == int64(len(magic)) {
			if typ != formatDescriptionEvent || size < headerLen+57+5 {
				return fmt.Errorf("%w: it does not start with a format description", ErrCorrupt)
			}
			s.checksums = ev[size-5] == checksumCRC32
			info.Closed = flags&logEventBinlogInUse == 0
		}
		info.Size += int64(size)
		body := ev[headerLen:]
		if s.checksums {
			if !checksumOK(ev, typ) {
				return fmt.Errorf("%w: the event at byte %d fails its checksum", ErrCorrupt, at)
			}
			body = ev[headerLen : size-4]
		}
		if err := info.take(typ, when, server, body); err != nil {
			return fmt.Errorf("%w: the event at byte %d: %w", ErrCorrupt, at, err)
		}
	}
}

// take adds what one event says to info.
func (info *Info) take(typ byte, when, server uint32, body []byte) error {
	info.LastEvent = time.Unix(int64(when), 0).UTC()
	switch typ {
	case gtidListEvent:
		list, err := gtidList(body)
		if err != nil {
			return fmt.Errorf("a GTID list: %w", err)
		}
		if info.Transactions == 0 {
			info.Start = list
			info.End = maps(list)
		}
	case gtidEvent:
		if len(body) < 13 {
			return fmt.Errorf("a GTID event of %d bytes", len(body))
		}
		g := GTID{Sequence: binary.LittleEndian.Uint64(body), Domain: binary.LittleEndian.Uint32(body[8:]), Server: server}
		info.End[g.Domain] = g
		if _, seen := info.FirstGTIDs[g.Domain]; !seen {
			info.FirstGTIDs[g.Domain] = g
		}
		t := time.Unix(int64(when), 0).UTC()
		if info.Transactions == 0 {
			info.First = t
		}
		info.Last = t
		info.Transactions++
	case rotateEvent, stopEvent:
		// The last event of a finished file.
		info.ClosedAt = time.Unix(int64(when), 0).UTC()
	}
	return nil
}

// checksumOK verifies an event's CRC32. The server computes a format
// description's with its in-use flag cleared (it clears the flag in place
// when it closes the file, and the checksum must hold before and after).
func checksumOK(ev []byte, typ byte) bool {
	size := len(ev)
	sum := binary.LittleEndian.Uint32(ev[size-4:])
	if crc32.ChecksumIEEE(ev[:size-4]) == sum {
		return true
	}
	if typ != formatDescriptionEvent || ev[17]&logEventBinlogInUse == 0 {
		return false
	}
	c := append([]byte(nil), ev[:size-4]...)
	c[17] &^= logEventBinlogInUse
	return crc32.ChecksumIEEE(c) == sum
}

func maps(p Position) Position {
	out := make(Position, len(p))
	for d, g := range p {
		out[d] = g
	}
	return out
}

// gtidList decodes a Gtid_list event's body: a count (its low 28 bits),
// then domain, server and sequence of each.
func gtidList(b []byte) (Position, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes", len(b))
	}
	count := int(binary.LittleEndian.Uint32(b) & 0x0fffffff)
	b = b[4:]
	if len(b) < count*16 {
		return nil, fmt.Errorf("%d entries in %d bytes", count, len(b))
	}
	p := Position{}
	for i := range count {
		e := b[i*16:]
		g := GTID{Domain: binary.LittleEndian.Uint32(e), Server: binary.LittleEndian.Uint32(e[4:]), Sequence: binary.LittleEndian.Uint64(e[8:])}
		// The list holds each server's last GTID in a domain; the
		// domain's position is the latest (strict mode: the highest).
		if old, ok := p[g.Domain]; !ok || g.Sequence >= old.Sequence {
			p[g.Domain] = g
		}
	}
	return p, nil
}
