package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"example.com/database-operator/tests/utils/testservers"
)

func pgExec(_ testing.TB, p *testservers.Postgres, sql string) error {
	return p.Exec(context.Background(), sql)
}

func pgCount(t testing.TB, p *testservers.Postgres) int { return p.Count(t, "orders") }

func mariaExec(_ testing.TB, m *testservers.MariaDB, stmt string) error {
	return m.AppExec(context.Background(), stmt)
}

func mariaCount(t testing.TB, m *testservers.MariaDB) int { return m.Count(t, "shop.orders") }

// mariaWrite writes n rows with note through the application account.
func mariaWrite(t testing.TB, m *testservers.MariaDB, n int, note string) {
	t.Helper()
	for range n {
		if err := mariaExec(t, m, "INSERT INTO shop.orders (note) VALUES ('"+note+"')"); err != nil {
			t.Fatal(err)
		}
	}
}

// waitReplicaRows waits until every replica has n rows.
func waitReplicaRows(t testing.TB, n int, replicas ...*testservers.MariaDB) {
	t.Helper()
	eventually(t, 30*time.Second, "replicas caught up", func() string {
		for _, r := range replicas {
			if got := mariaCount(t, r); got != n {
				return fmt.Sprintf("%s has %d rows, want %d", r.Pod, got, n)
			}
		}
		return ""
	})
}
