#!/bin/sh
# Starts one MariaDB or MySQL instance of a Database. It runs as the
# container's entrypoint on every start and decides from the data directory
# and the operator's topology (which instance is primary) what must happen
# first:
#
#   primary, no data          initialize, set the superuser's password
#   replica, no data          clone the primary (a consistent dump with its
#                             GTID position) and replicate from there
#   rebuild asked for         set the data aside (never deleted) and clone:
#                             the operator asks when a former primary holds
#                             transactions the new primary lacks
#
# Every instance but the primary starts read-only, so a former primary that
# comes back never takes an application's write; the operator re-points it
# (or asks for a rebuild when it diverged). Then the container's arguments
# are exec'd (the server, or the image's entrypoint with the server).
#
# Environment: ENGINE (mariadb or mysql), POD_NAME, POD_INDEX (the ordinal:
# server id 1000+POD_INDEX), DATADIR, ROOT_PASSWORD, REPLICATION_USER and
# REPLICATION_PASSWORD (the account replicas stream with: never root),
# PEER_DOMAIN (<name>-headless.<namespace>.svc), TOPOLOGY_DIR (key
# "primary", keys "rebuild-<pod>" with a token), PRIMARY_HOST/PRIMARY_PORT
# (override the primary's address; tests use them), MYSQLD_OPTS (options
# put first on every server and initializer command line),
# SYNCHRONOUS_REPLICAS (above 0: the primary starts semi-synchronous),
# TLS_DIR (the mounted certificate Secret: tls.crt, tls.key, ca.crt; when
# set, the clone and the replication stream are TLS, the primary verified
# against its name).
set -eu

: "${ENGINE:?}" "${POD_NAME:?}" "${DATADIR:?}" "${ROOT_PASSWORD:?}" "${REPLICATION_USER:?}" "${REPLICATION_PASSWORD:?}"
log_name=mysql-start data="$DATADIR" default_port=3306
. "$(dirname "$0")/topology.sh"

if [ "$ENGINE" = mariadb ]; then
	server=mariadbd client=mariadb dump=mariadb-dump admin=mariadb-admin
else
	server=mysqld client=mysql dump=mysqldump admin=mysqladmin
fi
# Clients read the password from the environment, never a command line.
export MYSQL_PWD="$ROOT_PASSWORD"

# With certificates, the dump verifies the primary (TLS, the CA, its name)
# and so does the replication stream; only a primary the operator marks as
# serving plain text (started before its Database had a certificate, not
# rolled yet) is reached without TLS. Without TLS a MySQL replica takes
# the source's RSA key on trust. (A running replica without the CA yet is
# re-pointed by the operator, encrypted to a primary that has one.)
tls_client="" tls_mariadb=", MASTER_SSL = 0" tls_mysql=", GET_SOURCE_PUBLIC_KEY = 1" tls_server=""
if [ -n "${TLS_DIR:-}" ] && [ -z "$(topology_key "plain-$primary")" ]; then
	ca="$TLS_DIR/ca.crt"
	if [ "$ENGINE" = mariadb ]; then
		tls_client="--ssl --ssl-ca=$ca --ssl-verify-server-cert"
	else
		tls_client="--ssl-mode=VERIFY_IDENTITY --ssl-ca=$ca"
	fi
	tls_mariadb=", MASTER_SSL = 1, MASTER_SSL_CA = '$ca', MASTER_SSL_VERIFY_SERVER_CERT = 1"
	tls_mysql=", SOURCE_SSL = 1, SOURCE_SSL_CA = '$ca', SOURCE_SSL_VERIFY_SERVER_CERT = 1"
fi
# The server takes TLS only over the network, with the mounted certificate
# (reloaded when it is renewed: the agent asks); the local socket stays.
if [ -n "${TLS_DIR:-}" ]; then
	tls_server="--ssl-cert=$TLS_DIR/tls.crt --ssl-key=$TLS_DIR/tls.key --ssl-ca=$TLS_DIR/ca.crt --require-secure-transport=ON --tls-version=TLSv1.2,TLSv1.3"
fi

has_data() { [ -d "$DATADIR/mysql" ]; }

# Replication state written by the temporary server must be found by the
# real one: fixed relay log names on both, whatever the host is called.
relay_opts="--relay-log=relay-bin --relay-log-index=relay-bin.index"

sock="$(mktemp -d)/init.sock"
temp_pid=""

# initialize makes an empty data directory under a temporary name and
# starts a server on it that listens on a private socket only.
initialize() {
	rm -rf "$DATADIR.init"
	# shellcheck disable=SC2086 # options are words
	if [ "$ENGINE" = mariadb ]; then
		mariadb-install-db ${MYSQLD_OPTS:-} --datadir="$DATADIR.init" \
			--auth-root-authentication-method=normal --skip-test-db >&2
	else
		mysqld ${MYSQLD_OPTS:-} --datadir="$DATADIR.init" --initialize-insecure >&2
	fi
	# shellcheck disable=SC2086
	$server ${MYSQLD_OPTS:-} --datadir="$DATADIR.init" --socket="$sock" \
		--skip-networking --skip-slave-start --pid-file="$sock.pid" $relay_opts >&2 &
	temp_pid=$!
	i=0
	until MYSQL_PWD="" $admin --socket="$sock" -uroot ping >/dev/null 2>&1 ||
		MYSQL_PWD="$ROOT_PASSWORD" $admin --socket="$sock" -uroot ping >/dev/null 2>&1; do
		i=$((i + 1))
		[ "$i" -lt 600 ] || { log "temporary server did not start"; exit 1; }
		kill -0 "$temp_pid" 2>/dev/null || { log "temporary server exited"; exit 1; }
		sleep 0.1
	done
}

sql() { $client --socket="$sock" -uroot "$@"; }

finish() {
	$admin --socket="$sock" -uroot shutdown
	wait "$temp_pid" || true
	mv "$DATADIR.init" "$DATADIR"
}

quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/\\\\/\\\\\\\\/g; s/'/''/g")"; }

init_primary() {
	log "initializing a new primary"
	initialize
	pw="$(quote "$ROOT_PASSWORD")" repl="$(quote "$REPLICATION_USER")@'%'" repl_pw="$(quote "$REPLICATION_PASSWORD")"
	# Kept out of the binary log: every instance starts from an empty GTID
	# position, so no replica looks diverged from its first primary.
	cleanup=""
	# mariadb-install-db also makes password-less root accounts for the
	# loopback addresses and the host name: they would shadow root@'%'.
	[ "$ENGINE" != mariadb ] || cleanup="DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1';
		EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@', QUOTE(@@hostname));"
	MYSQL_PWD="" sql <<-SQL
		SET SESSION sql_log_bin = 0;
		$cleanup
		ALTER USER 'root'@'localhost' IDENTIFIED BY $pw;
		CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY $pw;
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
		CREATE USER IF NOT EXISTS $repl IDENTIFIED BY $repl_pw;
		GRANT REPLICATION SLAVE ON *.* TO $repl;
		FLUSH PRIVILEGES;
	SQL
	finish
}

clone() {
	log "cloning $primary ($host:$port)"
	initialize
	# The dump reads everything as root; the stream needs only the
	# replication account.
	user="$(quote "$REPLICATION_USER")" pw="$(quote "$REPLICATION_PASSWORD")"
	h="$(quote "$host")"
	# The dump goes to the volume first: a dump that stops half way must
	# fail the clone, never load as if it were whole (sh has no pipefail).
	dumpfile="$DATADIR.dump.sql"
	if [ "$ENGINE" = mariadb ]; then
		# --gtid with --master-data sets gtid_slave_pos to the snapshot's
		# position; the accounts come along with the mysql schema.
		# shellcheck disable=SC2086 # the TLS options are words
		$dump $tls_client -h "$host" -P "$port" -uroot --all-databases --single-transaction \
			--gtid --master-data=1 --routines --triggers --events \
			--ignore-table=mysql.gtid_slave_pos >"$dumpfile"
		# Loaded without binary logging, so the replica's own GTID position
		# is exactly the primary's; the privileges reload in the same session.
		{
			echo "SET SESSION sql_log_bin = 0;"
			cat "$dumpfile"
			echo "FLUSH PRIVILEGES;"
		} | MYSQL_PWD="" sql
		rm -f "$dumpfile"
		sql <<-SQL
			CHANGE MASTER TO MASTER_HOST = $h, MASTER_PORT = $port, MASTER_USER = $user,
			  MASTER_PASSWORD = $pw, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1$tls_mariadb;
		SQL
	else
		# The dump sets gtid_purged to the snapshot's GTID set; auto-position
		# streams the rest.
		# shellcheck disable=SC2086
		$dump $tls_client -h "$host" -P "$port" -uroot --all-databases --single-transaction \
			--set-gtid-purged=ON --routines --triggers --events >"$dumpfile"
		{
			echo "RESET BINARY LOGS AND GTIDS;"
			cat "$dumpfile"
			echo "FLUSH NO_WRITE_TO_BINLOG PRIVILEGES;"
		} | MYSQL_PWD="" sql
		rm -f "$dumpfile"
		sql <<-SQL
			CHANGE REPLICATION SOURCE TO SOURCE_HOST = $h, SOURCE_PORT = $port, SOURCE_USER = $user,
			  SOURCE_PASSWORD = $pw, SOURCE_AUTO_POSITION = 1, SOURCE_CONNECT_RETRY = 1$tls_mysql;
		SQL
	fi
	finish
}

# A non-primary with data starts read-only; the operator re-points it, or
# asks for a rebuild when it diverged.
rejoin() { :; }

# adopt_data: a kept volume's data starts read-only and replicating from
# nobody (its old primary may be anyone now) until the operator has chosen
# the primary among the kept volumes (topology key "adopt").
skip_replica_opt=""
adopt_data() {
	log "kept volume: starting read-only, replicating from nobody, until the operator chooses the primary"
	skip_replica_opt="--skip-slave-start"
	[ "$ENGINE" = mariadb ] || skip_replica_opt="--skip-replica-start"
}

prepare_data
readonly_opt=""
if [ "$POD_NAME" != "$primary" ]; then
	readonly_opt="--read-only=ON"
	[ "$ENGINE" = mariadb ] || readonly_opt="--super-read-only=ON"
fi
rm -rf "$(dirname "$sock")"

# Each instance needs its own server id for replication (and for GTIDs to
# tell who wrote what): 1000 + the StatefulSet ordinal.
# With synchronous replication the primary starts with the semi-synchronous
# primary side on (replicas never: they would wait for replicas of their
# own); a promotion turns it on for the new primary.
semisync_opt=""
if [ "$POD_NAME" = "$primary" ] && [ "${SYNCHRONOUS_REPLICAS:-0}" -gt 0 ]; then
	semisync_opt="--rpl-semi-sync-master-enabled=ON"
	[ "$ENGINE" = mariadb ] || semisync_opt="--rpl-semi-sync-source-enabled=ON"
fi

server_id_opt=""
[ -z "${POD_INDEX:-}" ] || server_id_opt="--server-id=$((1000 + POD_INDEX))"

unset MYSQL_PWD
# shellcheck disable=SC2086
exec "$@" $server_id_opt $relay_opts $readonly_opt $semisync_opt $skip_replica_opt $tls_server
