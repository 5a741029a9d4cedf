package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// OpenPostgresConn opens a bare PostgreSQL connection to ep, with the same
// TLS and timeouts as Open; with replication, a physical replication one
// (the walsender protocol): the primary's agent streams the WAL it writes
// to the archive through one.
func OpenPostgresConn(ctx context.Context, ep Endpoint, creds Credentials, opts Options, replication bool) (*pgconn.PgConn, error) {
	opts = opts.withDefaults()
	cfg, err := pgconn.ParseConfig("")
	if err != nil {
		return nil, err
	}
	connectTo(cfg, ep, creds, opts, "database-operator-archiver")
	if replication {
		cfg.RuntimeParams["replication"] = "true"
	}
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL at %s (replication %v): %w", ep, replication, err)
	}
	return conn, nil
}

// connectTo points cfg at ep as creds, with the options' connect timeout
// and TLS (verified TLS or nothing).
func connectTo(cfg *pgconn.Config, ep Endpoint, creds Credentials, opts Options, application string) {
	cfg.Host, cfg.Port = ep.Host, uint16(ep.Port)
	cfg.User, cfg.Password, cfg.Database = creds.User, creds.Password, "postgres"
	cfg.ConnectTimeout = opts.ConnectTimeout
	cfg.DialFunc = dialer(opts.ConnectTimeout).DialContext
	cfg.RuntimeParams["application_name"] = application
	if c := opts.tlsFor(ep); c != nil {
		cfg.TLSConfig, cfg.Fallbacks = c, nil
	}
}
