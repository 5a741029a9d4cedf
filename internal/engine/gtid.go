package engine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MariaDB GTID positions: a comma-separated list of domain-server-sequence.
// The operator reads a server's GTID state (gtid_binlog_state with
// gtid_current_pos): per replication domain, the last sequence number it
// holds from each server that wrote in that domain, not only the last
// transaction. Sequence numbers order a domain's transactions (strict
// mode); the server ids tell whose transaction stands at a number, so two
// servers that each wrote after a failover are seen to have diverged even
// when one holds higher numbers than the other.

// mariaState is a MariaDB GTID state: domain -> server -> last sequence.
type mariaState map[uint64]map[uint64]uint64

func parseMariaDBGTID(s string) (mariaState, error) {
	out := mariaState{}
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
		out.add(n[0], n[1], n[2])
	}
	return out, nil
}

// add records that the state holds server's transaction seq in domain.
func (st mariaState) add(domain, server, seq uint64) {
	if st[domain] == nil {
		st[domain] = map[uint64]uint64{}
	}
	st[domain][server] = max(st[domain][server], seq)
}

// last is a domain's last transaction: the highest sequence number, and
// the server that wrote it (0, 0 when the domain is empty).
func (st mariaState) last(domain uint64) (server, seq uint64) {
	for s, q := range st[domain] {
		if q > seq || (q == seq && s < server) {
			server, seq = s, q
		}
	}
	return server, seq
}

// String is the state as MariaDB writes it, sorted.
func (st mariaState) String() string {
	var parts []string
	for _, d := range slices.Sorted(maps.Keys(st)) {
		for _, s := range slices.Sorted(maps.Keys(st[d])) {
			parts = append(parts, fmt.Sprintf("%d-%d-%d", d, s, st[d][s]))
		}
	}
	return strings.Join(parts, ",")
}

// lastPositions is the state's last transaction per domain: what
// MASTER_GTID_WAIT takes (one GTID per domain).
func (st mariaState) lastPositions() string {
	var parts []string
	for _, d := range slices.Sorted(maps.Keys(st)) {
		if s, q := st.last(d); q > 0 {
			parts = append(parts, fmt.Sprintf("%d-%d-%d", d, s, q))
		}
	}
	return strings.Join(parts, ",")
}

// mergeMariaDBGTID is the union of MariaDB states (a replica's applied
// state and what its IO thread received), canonical; unparsable input is
// kept as it is (the caller's comparison reports it).
func mergeMariaDBGTID(states ...string) string {
	out := mariaState{}
	for _, s := range states {
		st, err := parseMariaDBGTID(s)
		if err != nil {
			return strings.Join(states, ",")
		}
		for d, servers := range st {
			for srv, q := range servers {
				out.add(d, srv, q)
			}
		}
	}
	return out.String()
}

// compareMariaDBGTID orders two MariaDB states domain by domain. In a
// domain where one side is further, it holds the other's last transaction
// only if it holds that transaction's server up to it: when it holds that
// server only up to an earlier number, the two have diverged (each wrote
// after a failover). Without an entry for that server it cannot tell, and
// orders by number. The same last number from different servers has
// diverged; each side ahead in a different domain too.
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
	for _, d := range slices.Sorted(maps.Keys(domains)) {
		xs, xq := pa.last(d)
		ys, yq := pb.last(d)
		switch {
		case xq == yq && xs != ys:
			return 0, fmt.Errorf("%w: domain %d has transaction %d from server %d on one side and %d on the other", ErrDiverged, d, xq, xs, ys)
		case xq > yq:
			if got, ok := pa[d][ys]; ok && got < yq {
				return 0, fmt.Errorf("%w: domain %d: %q holds server %d's transactions only up to %d, %q its %d", ErrDiverged, d, a, ys, got, b, yq)
			}
			ahead = true
		case xq < yq:
			if got, ok := pb[d][xs]; ok && got < xq {
				return 0, fmt.Errorf("%w: domain %d: %q holds server %d's transactions only up to %d, %q its %d", ErrDiverged, d, b, xs, got, a, xq)
			}
			behind = true
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
	for domain := range p {
		_, pq := p.last(domain)
		if _, rq := r.last(domain); pq > rq {
			n += int64(pq - rq)
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
