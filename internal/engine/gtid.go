package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MariaDB GTID positions: a comma-separated list of domain-server-sequence,
// one per replication domain.

type mariaGTID struct {
	server uint64
	seq    uint64
}

func parseMariaDBGTID(s string) (map[uint64]mariaGTID, error) {
	out := map[uint64]mariaGTID{}
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("MariaDB GTID %q: want domain-server-sequence", part)
		}
		var n [3]uint64
		for i, x := range f {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("MariaDB GTID %q: %w", part, err)
			}
			n[i] = v
		}
		out[n[0]] = mariaGTID{server: n[1], seq: n[2]}
	}
	return out, nil
}

// compareMariaDBGTID orders two MariaDB positions domain by domain. A
// domain where both stand at the same sequence number written by different
// servers, or where each is ahead in a different domain, has diverged.
func compareMariaDBGTID(a, b string) (int, error) {
	pa, err := parseMariaDBGTID(a)
	if err != nil {
		return 0, err
	}
	pb, err := parseMariaDBGTID(b)
	if err != nil {
		return 0, err
	}
	ahead, behind := false, false
	domains := map[uint64]bool{}
	for d := range pa {
		domains[d] = true
	}
	for d := range pb {
		domains[d] = true
	}
	for d := range domains {
		x, y := pa[d], pb[d]
		switch {
		case x.seq > y.seq:
			ahead = true
		case x.seq < y.seq:
			behind = true
		case x.server != y.server:
			return 0, fmt.Errorf("%w: domain %d has transaction %d from server %d on one side and %d on the other", ErrDiverged, d, x.seq, x.server, y.server)
		}
	}
	return order(ahead, behind, a, b)
}

func order(ahead, behind bool, a, b string) (int, error) {
	switch {
	case ahead && behind:
		return 0, fmt.Errorf("%w: %q and %q each hold transactions the other lacks", ErrDiverged, a, b)
	case ahead:
		return 1, nil
	case behind:
		return -1, nil
	}
	return 0, nil
}

// MySQL GTID sets: comma-separated uuid:interval[:interval...], where an
// interval is n or n-m.

type interval struct{ lo, hi uint64 }

type gtidSet map[string][]interval // source uuid (lower case) -> sorted, merged intervals

func parseMySQLGTIDSet(s string) (gtidSet, error) {
	out := gtidSet{}
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", "")
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ":")
		if len(f) < 2 {
			return nil, fmt.Errorf("MySQL GTID set %q: want uuid:interval", part)
		}
		uuid := strings.ToLower(f[0])
		for _, iv := range f[1:] {
			loS, hiS, isRange := strings.Cut(iv, "-")
			lo, err := strconv.ParseUint(loS, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("MySQL GTID set %q: %w", part, err)
			}
			hi := lo
			if isRange {
				if hi, err = strconv.ParseUint(hiS, 10, 64); err != nil {
					return nil, fmt.Errorf("MySQL GTID set %q: %w", part, err)
				}
			}
			if hi < lo {
				return nil, fmt.Errorf("MySQL GTID set %q: interval %s is backwards", part, iv)
			}
			out[uuid] = append(out[uuid], interval{lo, hi})
		}
	}
	for uuid, ivs := range out {
		out[uuid] = merge(ivs)
	}
	return out, nil
}

func merge(ivs []interval) []interval {
	slices.SortFunc(ivs, func(a, b interval) int {
		if a.lo < b.lo {
			return -1
		} else if a.lo > b.lo {
			return 1
		}
		return 0
	})
	var out []interval
	for _, iv := range ivs {
		if n := len(out); n > 0 && iv.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, iv.hi)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// contains reports whether s holds every transaction of t.
func (s gtidSet) contains(t gtidSet) bool {
	for uuid, tivs := range t {
		sivs := s[uuid]
		for _, ti := range tivs {
			if !slices.ContainsFunc(sivs, func(si interval) bool { return si.lo <= ti.lo && ti.hi <= si.hi }) {
				return false
			}
		}
	}
	return true
}

// compareMySQLGTIDSet orders two GTID sets by inclusion: a superset is
// ahead; sets that each hold transactions the other lacks have diverged
// (errant transactions).
func compareMySQLGTIDSet(a, b string) (int, error) {
	sa, err := parseMySQLGTIDSet(a)
	if err != nil {
		return 0, err
	}
	sb, err := parseMySQLGTIDSet(b)
	if err != nil {
		return 0, err
	}
	aHasAll, bHasAll := sa.contains(sb), sb.contains(sa)
	return order(!bHasAll, !aHasAll, a, b)
}

// mariaDBGTIDLag counts, domain by domain, the sequence numbers the primary
// has beyond the replica.
func mariaDBGTIDLag(replica, primary string) (int64, error) {
	r, err := parseMariaDBGTID(replica)
	if err != nil {
		return 0, err
	}
	p, err := parseMariaDBGTID(primary)
	if err != nil {
		return 0, err
	}
	var n int64
	for domain, pg := range p {
		if rg := r[domain]; pg.seq > rg.seq {
			n += int64(pg.seq - rg.seq)
		}
	}
	return n, nil
}

// mysqlGTIDLag counts the transactions in the primary's set that are not in
// the replica's.
func mysqlGTIDLag(replica, primary string) (int64, error) {
	r, err := parseMySQLGTIDSet(replica)
	if err != nil {
		return 0, err
	}
	p, err := parseMySQLGTIDSet(primary)
	if err != nil {
		return 0, err
	}
	var n int64
	for uuid, pivs := range p {
		for _, pi := range pivs {
			missing := pi.hi - pi.lo + 1
			for _, ri := range r[uuid] {
				if lo, hi := max(pi.lo, ri.lo), min(pi.hi, ri.hi); lo <= hi {
					missing -= hi - lo + 1
				}
			}
			n += int64(missing)
		}
	}
	return n, nil
}
