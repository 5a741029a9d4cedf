package integration

import (
	"context"
	"testing"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/testservers"
)

func pgExec(t *testing.T, p *testservers.Postgres, sql string) error {
	t.Helper()
	ctx := context.Background()
	c, err := p.Connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

func pgCount(t *testing.T, p *testservers.Postgres) int {
	t.Helper()
	ctx := context.Background()
	c, err := p.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func openMariaInstance(t *testing.T, m *testservers.MariaDB) engine.Instance {
	t.Helper()
	inst, err := engine.Open(context.Background(), dbv1.EngineMariaDB, engine.Endpoint{Host: "127.0.0.1", Port: m.Port},
		engine.Credentials{User: "root", Password: testservers.MariaDBRootPassword}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close() })
	return inst
}

func mariaExec(t *testing.T, m *testservers.MariaDB, stmt string) error {
	t.Helper()
	db, err := m.DB(context.Background(), "app", testservers.MariaDBAppPassword)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(stmt)
	return err
}

func mariaCount(t *testing.T, m *testservers.MariaDB) int {
	t.Helper()
	db, err := m.DB(context.Background(), "app", testservers.MariaDBAppPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM shop.orders").Scan(&n); err != nil {
		return -1
	}
	return n
}
