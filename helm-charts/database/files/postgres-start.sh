#!/bin/sh
# Starts one PostgreSQL instance of a Database. It runs as the container's
# entrypoint on every start and decides from the data directory and the
# operator's topology (which instance is primary) what must happen first:
#
#   primary, no data          initdb with the superuser from the Secret
#   replica, no data          clone the primary (pg_basebackup) as a standby
#   replica, data, no standby.signal
#                             a former primary coming back: starts fenced;
#                             once the operator asks (topology key
#                             "rewind-<pod>"), pg_rewind onto the new
#                             primary's timeline, restart as standby
#   rewind asked for          a standby past the new timeline's fork point:
#                             pg_rewind too (what it discards kept aside)
#   rebuild asked for         set the data aside (never deleted) and clone
#
# Then it execs postgres with the container's arguments. A clone or rewind
# that cannot reach the primary fails the start; the kubelet retries.
#
# Environment: POD_NAME, PGDATA, POSTGRES_USER, POSTGRES_PASSWORD,
# REPLICATION_USER, REPLICATION_PASSWORD (the account standbys stream with:
# never the superuser; both passwords written to <volume>/.pgpass,
# PGPASSFILE for the clients and the server),
# PEER_DOMAIN (<name>-headless.<namespace>.svc), TOPOLOGY_DIR (the operator's
# topology ConfigMap: key "primary", keys "rebuild-<pod>" with a token, key
# "initialized" once the Database has served),
# PRIMARY_HOST/PRIMARY_PORT (override the primary's address; tests use
# them), TLS_DIR (the mounted certificate Secret: tls.crt, tls.key, ca.crt;
# when set, every connection to the primary is TLS verified against its
# name), INITDB_EXTRA_ARGS, BASEBACKUP_EXTRA_ARGS.
set -eu

: "${POD_NAME:?}" "${PGDATA:?}" "${POSTGRES_USER:?}" "${POSTGRES_PASSWORD:?}" "${REPLICATION_USER:?}" "${REPLICATION_PASSWORD:?}"
log_name=postgres-start data="$PGDATA" default_port=5432
. "$(dirname "$0")/topology.sh"

# The password is in a password file on the volume, never on a command line
# nor in primary_conninfo (the server logs every change of that setting,
# value included): the clients here (pg_basebackup, pg_rewind, psql) and
# the server's WAL receiver, which inherits PGPASSFILE, read it from there.
PGPASSFILE="$volume/.pgpass"
export PGPASSFILE
pgpass_field() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/:/\\:/g'; }
(
	umask 077
	for who in "$POSTGRES_USER:$POSTGRES_PASSWORD" "$REPLICATION_USER:$REPLICATION_PASSWORD"; do
		printf '*:*:*:%s:%s\n' "$(pgpass_field "${who%%:*}")" "$(pgpass_field "${who#*:}")"
	done >"$PGPASSFILE.new"
)
mv "$PGPASSFILE.new" "$PGPASSFILE"

# With certificates, the clients here (psql, pg_basebackup, pg_rewind)
# verify the primary: TLS, the CA's signature and its name; never plain
# text. The replica's own stream says so in primary_conninfo. Only a
# primary the operator marks as serving plain text (started before its
# Database had a certificate, not rolled yet) is reached without: libpq's
# default then, TLS when offered.
tls_conninfo=""
if [ -n "${TLS_DIR:-}" ] && [ -z "$(topology_key "plain-$primary")" ]; then
	PGSSLMODE=verify-full PGSSLROOTCERT="$TLS_DIR/ca.crt"
	export PGSSLMODE PGSSLROOTCERT
	tls_conninfo=" sslmode=verify-full sslrootcert='$TLS_DIR/ca.crt'"
fi

has_data() { [ -s "$PGDATA/PG_VERSION" ]; }

init_primary() {
	log "initializing a new primary"
	pwfile="$(mktemp)"
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	rm -rf "$PGDATA.init"
	# shellcheck disable=SC2086 # extra args are words
	initdb -D "$PGDATA.init" -U "$POSTGRES_USER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C ${INITDB_EXTRA_ARGS:-} >&2
	rm -f "$pwfile"
	# The replication account exists before any standby asks for it. The
	# single-user server reads the statement from stdin: the password is on
	# no command line, and is stored as a SCRAM verifier.
	printf 'CREATE ROLE "%s" WITH LOGIN REPLICATION PASSWORD '"'%s'"'\n' \
		"$REPLICATION_USER" "$(printf '%s' "$REPLICATION_PASSWORD" | sed "s/'/''/g")" |
		postgres --single -D "$PGDATA.init" postgres >/dev/null
	mv "$PGDATA.init" "$PGDATA"
}

# follow_primary points this standby at the primary as the replication
# account. pg_basebackup -R and pg_rewind -R write their own connection's
# settings, the password read from the password file included: those are
# replaced by settings without it (the WAL receiver reads the file).
follow_primary() {
	auto="$PGDATA/postgresql.auto.conf"
	{
		grep -v '^primary_conninfo\|^primary_slot_name' "$auto" || true
		printf "primary_conninfo = '%s'\n" "$(printf 'host=%s port=%s user=%s%s' "$host" "$port" "$REPLICATION_USER" "$tls_conninfo" | sed "s/'/''/g")"
		printf "primary_slot_name = '%s'\n" "$slot"
	} >"$auto.new"
	chmod 0600 "$auto.new"
	mv "$auto.new" "$auto"
}

# This standby's replication slot on the primary (the operator keeps one
# per instance there): the primary keeps the WAL the standby has not
# received yet, up to max_slot_wal_keep_size.
slot="$(printf '%s' "$POD_NAME" | tr -- - _)"

# keep_slot_name names the slot in a standby's settings (a standby made
# before slots were kept has none); the operator's re-pointing keeps it.
keep_slot_name() {
	auto="$PGDATA/postgresql.auto.conf"
	[ -f "$PGDATA/standby.signal" ] && ! grep -q '^primary_slot_name' "$auto" 2>/dev/null || return 0
	printf "primary_slot_name = '%s'\n" "$slot" >>"$auto"
}

# ensure_slot makes this standby's slot on the primary if the operator has
# not yet (before a clone, or a rewind after a failover): it then keeps
# the WAL the standby needs next. It fails when the slot is not there.
ensure_slot() {
	psql -h "$host" -p "$port" -U "$POSTGRES_USER" -d postgres -qAt -v slot="$slot" 2>/dev/null <<-'SQL' | grep -qx t
		SELECT pg_create_physical_replication_slot(:'slot', true)
		  WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = :'slot');
		SELECT count(*) > 0 FROM pg_replication_slots WHERE slot_name = :'slot';
	SQL
}

# slot_option prints pg_basebackup's option to stream a clone's WAL
# through the slot; nothing when there is none.
slot_option() {
	if ensure_slot; then
		printf -- '-S %s' "$slot"
	else
		log "no replication slot $slot on $primary; cloning without it"
	fi
}

clone() {
	log "cloning $primary ($host:$port)"
	rm -rf "$PGDATA.clone"
	# -R writes standby.signal and primary_conninfo; -X stream copies the WAL
	# the backup needs. The clone lands under a temporary name first, so a
	# failed copy is never mistaken for data.
	# shellcheck disable=SC2086
	pg_basebackup -h "$host" -p "$port" -U "$REPLICATION_USER" -D "$PGDATA.clone" \
		-R -X stream -c fast $(slot_option) ${BASEBACKUP_EXTRA_ARGS:-} >&2
	mv "$PGDATA.clone" "$PGDATA"
	chmod 0700 "$PGDATA"
	follow_primary
	# A fresh clone has nothing to rewind: a request already in the
	# topology (kept there after an earlier rewind) is done.
	topology_key "rewind-$POD_NAME" >"$volume/rewound"
}

rewind() {
	# An unreachable primary is no reason to touch the data: fail the start
	# and let the kubelet retry.
	if ! psql -h "$host" -p "$port" -U "$POSTGRES_USER" -d postgres -qAtc 'SELECT 1' >/dev/null; then
		log "rewind: $primary ($host:$port) does not answer yet; not rewinding"
		exit 1
	fi
	log "rewinding onto $primary ($host:$port)"
	# pg_rewind reads the source's timeline from its control file, which a
	# just-promoted primary updates at its first checkpoint: ask for it.
	psql -h "$host" -p "$port" -U "$POSTGRES_USER" -d postgres -qc CHECKPOINT >&2 || true
	# pg_rewind runs crash recovery first when the server died, copies what
	# changed since the timelines forked, and (-R) makes it a standby. The
	# recovery must read the server's own configuration (outside the data
	# directory, named by the container's arguments): with the data
	# directory's, its checkpoint records wal_log_hints off and the rewind
	# refuses, so a crashed primary was always cloned instead.
	# shellcheck disable=SC2086 # the option is one word or none
	# (The superuser: pg_rewind reads the source's files through functions
	# the replication account may not call.)
	if rewind_keeping_diverged -D "$PGDATA" --source-server="host=$host port=$port user=$POSTGRES_USER dbname=postgres" -R \
		${config_file:+--config-file="$config_file"}; then
		ensure_slot || log "no replication slot $slot on $primary yet; the operator makes it"
		follow_primary
		return
	fi
	log "pg_rewind failed: cloning instead"
	set_aside rewind-failed
	clone
}

# fits_twice: the volume has room for two more copies of directory $1.
fits_twice() {
	size="$(du -sk "$1" | cut -f1)"
	free="$(df -Pk "$volume" | awk 'NR == 2 {print $4}')"
	[ -n "$size" ] && [ -n "$free" ] && [ "$free" -gt $((size * 2)) ]
}

# rewind_keeping_diverged runs pg_rewind (its arguments), keeping aside
# (never deleting) what this server wrote after its timeline forked from
# the new primary's: the writes the new primary never received, which
# pg_rewind removes from the data directory. In <volume>/diverged-wal-<time>:
# that WAL (readable with pg_waldump), and, when the volume has room for
# it twice over, a copy of the whole data directory as it was (pgdata/):
# a server started on the copy shows those writes as rows. Only pg_rewind
# knows the fork point (a dry run refuses a server that was not shut down
# cleanly), so both are copied first and kept only when it discarded
# something; what precedes the fork is dropped from the WAL copy.
rewind_keeping_diverged() {
	aside="$volume/diverged-wal-$(date -u +%Y%m%dT%H%M%SZ)"
	rm -rf "$aside.tmp"
	mkdir -p "$aside.tmp"
	for f in "$PGDATA"/pg_wal/*; do
		if [ -f "$f" ]; then cp -p "$f" "$aside.tmp/"; fi
	done
	kept="the WAL only (the volume has no room for a copy of the data directory)"
	if fits_twice "$PGDATA"; then
		if cp -a "$PGDATA" "$aside.tmp/pgdata"; then
			kept="the WAL, and a copy of the whole data directory in pgdata/ (start a server on it to read those writes)"
		else
			rm -rf "$aside.tmp/pgdata"
		fi
	fi
	if ! pg_rewind "$@" >"$aside.tmp/pg_rewind.log" 2>&1; then
		cat "$aside.tmp/pg_rewind.log" >&2
		rm -rf "$aside.tmp" # a copy: the failed rewind sets the whole data directory aside
		return 1
	fi
	cat "$aside.tmp/pg_rewind.log" >&2
	fork="$(sed -n 's|.*servers diverged at WAL location \([0-9A-Fa-f]*/[0-9A-Fa-f]*\) on timeline \([0-9]*\).*|\1 \2|p' "$aside.tmp/pg_rewind.log")"
	if [ -z "$fork" ] || grep -q "no rewind required" "$aside.tmp/pg_rewind.log"; then
		rm -rf "$aside.tmp" # nothing past the fork: nothing was discarded
		return 0
	fi
	lsn="${fork% *}" tli="${fork#* }"
	# The segment holding the fork point (16 MB segments: the top byte of
	# the LSN's low word) and every later one of that timeline are kept.
	first="$(printf '%08X%08X%08X' "$tli" "0x${lsn%/*}" "$((0x${lsn#*/} >> 24))")"
	for f in "$aside.tmp"/*; do
		name="$(basename "$f")"
		case "$name" in "$(printf '%08X' "$tli")"*) ;; pg_rewind.log | pgdata) continue ;; *) rm -f "$f"; continue ;; esac
		if [ "$(printf '%s\n%s\n' "$first" "$name" | LC_ALL=C sort | head -n 1)" != "$first" ]; then
			rm -f "$f"
		fi
	done
	mv "$aside.tmp" "$aside"
	log "diverged WAL: what this server holds after $lsn on timeline $tli, which $primary never received, is kept in $aside: $kept (pg_rewind removed it from the data directory)"
}

# A standby has standby.signal; a former primary has not, and may hold WAL
# the new primary never got. It starts as it was, fenced (read-only,
# superuser logins only), until the operator has recorded what a rewind
# would discard (an Event with the WAL range) and asks for the rewind with
# a token in the topology ("rewind-<pod>"), carried out once: then it is
# rewound at this start. A former primary its agent stopped (it could no
# longer prove it held the primary Lease: AGENT_FENCED=1) is fenced the
# same way.
# A standby is rewound too when the operator asks: one that received WAL
# from a former primary past the point where the new primary's timeline
# forked can never follow it.
fenced=""
rejoin() {
	token="$(topology_key "rewind-$POD_NAME")"
	if [ "${AGENT_FENCED:-}" != 1 ] && [ -n "$token" ] && [ "$token" != "$(cat "$volume/rewound" 2>/dev/null || true)" ]; then
		log "rewind $token asked for by the operator"
		rewind
		printf '%s\n' "$token" >"$volume/rewound"
		return
	fi
	[ ! -f "$PGDATA/standby.signal" ] || return 0
	log "former primary: starting it fenced (read-only, superuser logins only) until the operator has recorded what a rewind would discard and asks for it"
	fenced=1
}

# adopt_data starts a kept volume's data as it is until the operator has
# chosen the primary among the kept volumes (topology key "adopt"): a
# standby replays what it holds and streams from nobody (its old primary
# may be anyone now); a former primary starts fenced. The operator reads
# each one's position, promotes the most advanced one, and re-points or
# rewinds the others.
adopt_data() {
	if [ -f "$PGDATA/standby.signal" ]; then
		log "kept volume: starting as a standby that streams from nobody until the operator chooses the primary"
		auto="$PGDATA/postgresql.auto.conf"
		{ grep -v '^primary_conninfo\|^primary_slot_name' "$auto" || true; } >"$auto.new"
		chmod 0600 "$auto.new"
		mv "$auto.new" "$auto"
		return
	fi
	log "kept volume: a former primary; starting it fenced until the operator chooses the primary"
	fenced=1
}

# The configuration file the server is started with (-c config_file=...).
config_file=""
for arg in "$@"; do
	case "$arg" in config_file=*) config_file="${arg#config_file=}" ;; esac
done

prepare_data
[ -n "$adopting" ] || keep_slot_name

# A standby that streamed before its Database had certificates is pointed
# at the primary again with verification, now that both have them.
if [ -z "$adopting" ] && [ -n "$tls_conninfo" ] && [ "$POD_NAME" != "$primary" ] && [ -f "$PGDATA/standby.signal" ] &&
	! grep -q "^primary_conninfo = .*sslmode=verify-full" "$PGDATA/postgresql.auto.conf" 2>/dev/null; then
	log "streaming from $primary with TLS from now on"
	follow_primary
fi

# pg_hba.conf is read from the volume (hba_file in the configuration), a
# fresh copy of the configuration's at every start: the operator fences a
# primary by adding rules to it, and no fence outlives a restart.
# With a certificate every host rule becomes hostssl: no rule admits a
# plain-text connection over the network.
hosttype=host
[ -z "${TLS_DIR:-}" ] || hosttype=hostssl
if [ -n "$config_file" ] && [ -f "$(dirname "$config_file")/pg_hba.conf" ]; then
	sed "s/^host[[:space:]]/$hosttype /" "$(dirname "$config_file")/pg_hba.conf" >"$volume/pg_hba.conf.new"
	chmod 0600 "$volume/pg_hba.conf.new"
	mv "$volume/pg_hba.conf.new" "$volume/pg_hba.conf"
fi

if [ -n "$fenced" ]; then
	# Only the superuser (the operator) logs in; new transactions default
	# to read-only.
	su="\"$(printf '%s' "$POSTGRES_USER" | sed 's/"/""/g')\""
	printf 'local all %s trust\n%s all %s all scram-sha-256\nlocal all all reject\nhost all all all reject\n' "$su" "$hosttype" "$su" >"$volume/pg_hba.conf.new"
	chmod 0600 "$volume/pg_hba.conf.new"
	mv "$volume/pg_hba.conf.new" "$volume/pg_hba.conf"
	set -- "$@" -c default_transaction_read_only=on
fi

# The server serves TLS with the mounted certificate (reloaded when it is
# renewed: the agent asks). Its WAL receiver takes its TLS settings from
# primary_conninfo alone (the operator's re-pointing writes them too).
unset PGSSLMODE PGSSLROOTCERT
if [ -n "${TLS_DIR:-}" ]; then
	set -- "$@" -c ssl=on -c "ssl_cert_file=$TLS_DIR/tls.crt" -c "ssl_key_file=$TLS_DIR/tls.key" \
		-c "ssl_ca_file=$TLS_DIR/ca.crt" -c ssl_min_protocol_version=TLSv1.2
fi
# JSON logs (jsonlog) go through the logging collector, which writes
# files: the agent has made them named pipes in AGENT_LOG_PIPES, and relays
# what comes through them to the container's output. Set here, not in the
# configuration: only a server whose agent reads the pipes may write there.
if [ -n "${AGENT_LOG_PIPES:-}" ]; then
	set -- "$@" -c logging_collector=on -c log_destination=jsonlog -c "log_directory=$AGENT_LOG_PIPES" \
		-c log_filename=postgresql -c log_rotation_age=0 -c log_rotation_size=0
fi
exec postgres -D "$PGDATA" "$@"
