package processnode

// The database images the operator's chart uses, run from the host's Debian
// packages. The official images run their server as uid 999 and the chart
// relies on that and on a few files inside the images; the node stands in
// for exactly those parts (docs/development.md lists them):
//
//	postgres:15     the postgres user (uid 999, home /var/lib/postgresql) and
//	                PostgreSQL 15's binaries first on PATH, as the image's ENV has it
//	mariadb:10.11   the mysql user (uid 999), /etc/mysql/my.cnf (the image's
//	                includes conf.d, where the chart mounts its settings, and
//	                not Debian's mariadb.conf.d, which binds to loopback only),
//	                and docker-entrypoint.sh (below)
//
// Other versions of these images have no local match: their pods fail with
// a reason that says which versions this node runs.

import "syscall"

// PostgresBin is where Debian's PostgreSQL 15 keeps its server binaries.
const PostgresBin = "/usr/lib/postgresql/15/bin"

// MariaDBServer is Debian's MariaDB 10.11 server binary.
const MariaDBServer = "/usr/sbin/mariadbd"

// DatabaseImages maps the images of the operator's PostgreSQL 15 and
// MariaDB 10.11 instances to the host's packages.
func DatabaseImages() Images {
	return Images{
		"postgres:15": {
			Path:     []string{PostgresBin},
			Env:      map[string]string{"PG_MAJOR": "15", "PGDATA": "/var/lib/postgresql/data", "LANG": "C.UTF-8"},
			Users:    []string{"postgres:999:999:/var/lib/postgresql"},
			Requires: []string{PostgresBin + "/postgres"},
			// The official image's STOPSIGNAL: a fast shutdown.
			StopSignal: syscall.SIGINT,
		},
		"mariadb:10.11": {
			Env:   map[string]string{"LANG": "C.UTF-8"},
			Users: []string{"mysql:999:999:/var/lib/mysql"},
			Files: map[string]File{
				"/etc/mysql/my.cnf":                   {Mode: 0o644, Content: mariadbConfig},
				"/usr/local/bin/docker-entrypoint.sh": {Mode: 0o755, Content: mariadbEntrypoint},
			},
			Requires: []string{MariaDBServer},
		},
	}
}

// mariadbConfig is the mariadb image's configuration: its own settings, then
// conf.d (the chart mounts zz-operator.cnf there).
const mariadbConfig = `# Stands in for the mariadb image's /etc/mysql/my.cnf (process node).
[client-server]
socket = /run/mysqld/mysqld.sock

[mariadbd]
skip-host-cache
skip-name-resolve

!includedir /etc/mysql/conf.d/
`

// mariadbEntrypoint stands in for the mariadb image's docker-entrypoint.sh
// in what the chart uses of it: the server's name is put first when the
// arguments start with an option, and with MARIADB_AUTO_UPGRADE a data
// directory written by another server version is upgraded before the server
// opens it. Only one version is installed here, so that upgrade never has
// anything to do; data from another version is refused rather than opened.
// (The image's first-start initialization is not needed: the chart's start
// script initializes the data itself.)
const mariadbEntrypoint = `#!/bin/sh
# Stands in for the mariadb image's docker-entrypoint.sh (process node).
set -eu
case "${1:-}" in -*) set -- mariadbd "$@" ;; esac
if [ "$1" = mariadbd ] && [ -n "${MARIADB_AUTO_UPGRADE:-}" ]; then
	datadir=/var/lib/mysql
	for a in "$@"; do case "$a" in --datadir=*) datadir="${a#--datadir=}" ;; esac; done
	server="$(mariadbd --version | sed -n 's/.*Ver \([0-9]*\.[0-9]*\).*/\1/p')"
	data="$(sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p' "$datadir/mysql_upgrade_info" 2>/dev/null || true)"
	if [ -n "$data" ] && [ "$data" != "$server" ]; then
		echo "docker-entrypoint.sh: the data was written by MariaDB $data; this node runs $server only and cannot upgrade it" >&2
		exit 1
	fi
fi
exec "$@"
`
