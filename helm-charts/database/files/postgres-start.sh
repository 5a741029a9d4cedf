#!/bin/sh
# Starts one PostgreSQL instance of a Database. It runs as the container's
# entrypoint on every start and decides from the data directory and the
# operator's topology (which instance is primary) what must happen first:
#
#   primary, no data          initdb with the superuser from the Secret
#   replica, no data          clone the primary (pg_basebackup) as a standby
#   replica, data, no standby.signal
#                             a former primary coming back: pg_rewind onto
#                             the new primary's timeline, restart as standby
#   rebuild asked for         set the data aside (never deleted) and clone
#
# Then it execs postgres with the container's arguments. A clone or rewind
# that cannot reach the primary fails the start; the kubelet retries.
#
# Environment: POD_NAME, PGDATA, POSTGRES_USER, POSTGRES_PASSWORD (written to
# <volume>/.pgpass, PGPASSFILE for the clients and the server),
# PEER_DOMAIN (<name>-headless.<namespace>.svc), TOPOLOGY_DIR (the operator's
# topology ConfigMap: key "primary", keys "rebuild-<pod>" with a token, key
# "initialized" once the Database has served),
# PRIMARY_HOST/PRIMARY_PORT (override the primary's address; tests use
# them), INITDB_EXTRA_ARGS, BASEBACKUP_EXTRA_ARGS.
set -eu

: "${POD_NAME:?}" "${PGDATA:?}" "${POSTGRES_USER:?}" "${POSTGRES_PASSWORD:?}"
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
	printf '*:*:*:%s:%s\n' "$(pgpass_field "$POSTGRES_USER")" "$(pgpass_field "$POSTGRES_PASSWORD")" >"$PGPASSFILE.new"
)
mv "$PGPASSFILE.new" "$PGPASSFILE"

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
	mv "$PGDATA.init" "$PGDATA"
}

clone() {
	log "cloning $primary ($host:$port)"
	rm -rf "$PGDATA.clone"
	# -R writes standby.signal and primary_conninfo; -X stream copies the WAL
	# the backup needs. The clone lands under a temporary name first, so a
	# failed copy is never mistaken for data.
	# shellcheck disable=SC2086
	pg_basebackup -h "$host" -p "$port" -U "$POSTGRES_USER" -D "$PGDATA.clone" \
		-R -X stream -c fast ${BASEBACKUP_EXTRA_ARGS:-} >&2
	mv "$PGDATA.clone" "$PGDATA"
	chmod 0700 "$PGDATA"
}

rewind() {
	# An unreachable primary is no reason to touch the data: fail the start
	# and let the kubelet retry.
	if ! psql -h "$host" -p "$port" -U "$POSTGRES_USER" -d postgres -qAtc 'SELECT 1' >/dev/null; then
		log "former primary: $primary ($host:$port) does not answer yet; not rewinding"
		exit 1
	fi
	log "former primary: rewinding onto $primary ($host:$port)"
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
	if pg_rewind -D "$PGDATA" --source-server="host=$host port=$port user=$POSTGRES_USER dbname=postgres" -R \
		${config_file:+--config-file="$config_file"} >&2; then
		return
	fi
	log "pg_rewind failed: cloning instead"
	set_aside rewind-failed
	clone
}

# A standby has standby.signal; a former primary has not, and may hold WAL
# the new primary never got.
rejoin() { [ -f "$PGDATA/standby.signal" ] || rewind; }

# The configuration file the server is started with (-c config_file=...).
config_file=""
for arg in "$@"; do
	case "$arg" in config_file=*) config_file="${arg#config_file=}" ;; esac
done

prepare_data

# pg_hba.conf is read from the volume (hba_file in the configuration), a
# fresh copy of the configuration's at every start: the operator fences a
# primary by adding rules to it, and no fence outlives a restart.
if [ -n "$config_file" ] && [ -f "$(dirname "$config_file")/pg_hba.conf" ]; then
	cp "$(dirname "$config_file")/pg_hba.conf" "$volume/pg_hba.conf.new"
	chmod 0600 "$volume/pg_hba.conf.new"
	mv "$volume/pg_hba.conf.new" "$volume/pg_hba.conf"
fi

exec postgres -D "$PGDATA" "$@"
