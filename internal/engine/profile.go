package engine

import (
	"syscall"

	dbv1 "example.com/database-operator/api/v1"
)

// Profile is what an engine is beyond its SQL (the dialects of postgres.go
// and mysql.go): the facts the operator, the chart's values, the agent and
// the backup tools share, kept here once.
type Profile struct {
	// Port is where the server listens: the chart's container port,
	// Services and NetworkPolicy, the operator's connections.
	Port int32
	// PortName names that port in the pod and the Services.
	PortName string
	// Scheme is the URI scheme of a connection string (the application
	// Secret's uri).
	Scheme string
	// Superuser is the account the operator, the agent and the backup
	// Jobs connect as.
	Superuser string
	// Client is the command-line client a restore loads SQL with.
	Client string
	// Dump is the logical dump program of a backup.
	Dump string
	// RejoinByRestart: a former primary becomes a replica only through a
	// restart of its server (PostgreSQL: its start script rewinds it with
	// pg_rewind); otherwise it is pointed at the new primary in place.
	RejoinByRestart bool
	// StopSignal stops the server at once, ending its sessions (the
	// agent sends it when its pod stops, once the primary role was handed
	// over): PostgreSQL's fast shutdown (SIGTERM is its smart shutdown,
	// which lets open sessions go on committing until they end);
	// MySQL's and MariaDB's normal shutdown.
	StopSignal syscall.Signal
}

var profiles = map[dbv1.Engine]Profile{
	dbv1.EnginePostgreSQL: {Port: 5432, PortName: "postgresql", Scheme: "postgresql", Superuser: "postgres", Client: "psql", Dump: "pg_dump", RejoinByRestart: true, StopSignal: syscall.SIGINT},
	dbv1.EngineMySQL:      {Port: 3306, PortName: "mysql", Scheme: "mysql", Superuser: "root", Client: "mysql", Dump: "mysqldump", StopSignal: syscall.SIGTERM},
	dbv1.EngineMariaDB:    {Port: 3306, PortName: "mysql", Scheme: "mysql", Superuser: "root", Client: "mariadb", Dump: "mariadb-dump", StopSignal: syscall.SIGTERM},
}

// ProfileOf is e's profile. The API admits only the engines listed here;
// anything else is a MySQL-protocol server, as the dialects treat it.
func ProfileOf(e dbv1.Engine) Profile {
	if p, ok := profiles[e]; ok {
		return p
	}
	return profiles[dbv1.EngineMySQL]
}
