package integration

import (
	"context"
	"testing"

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
