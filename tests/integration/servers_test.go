package integration

import (
	"context"
	"testing"

	"example.com/database-operator/internal/testservers"
)

func pgExec(_ testing.TB, p *testservers.Postgres, sql string) error {
	return p.Exec(context.Background(), sql)
}

func pgCount(t testing.TB, p *testservers.Postgres) int { return p.Count(t, "orders") }

func mariaExec(_ testing.TB, m *testservers.MariaDB, stmt string) error {
	return m.AppExec(context.Background(), stmt)
}

func mariaCount(t testing.TB, m *testservers.MariaDB) int { return m.Count(t, "shop.orders") }
