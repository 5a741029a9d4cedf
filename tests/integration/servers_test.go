package integration

import (
	"context"
	"testing"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/testservers"
)

func openMariaInstance(t testing.TB, m *testservers.MariaDB) engine.Instance {
	t.Helper()
	inst, err := engine.Open(context.Background(), dbv1.EngineMariaDB, engine.Endpoint{Host: "127.0.0.1", Port: m.Port},
		engine.Credentials{User: "root", Password: testservers.MariaDBRootPassword}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close() })
	return inst
}

func pgExec(_ testing.TB, p *testservers.Postgres, sql string) error {
	return p.Exec(context.Background(), sql)
}

func pgCount(t testing.TB, p *testservers.Postgres) int { return p.Count(t, "orders") }

func mariaExec(_ testing.TB, m *testservers.MariaDB, stmt string) error {
	return m.AppExec(context.Background(), stmt)
}

func mariaCount(t testing.TB, m *testservers.MariaDB) int { return m.Count(t, "shop.orders") }
