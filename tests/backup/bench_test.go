package backup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/tests/utils/testservers"
)

// benchRows is the table size the throughput figures are for.
const benchRows = 1_000_000

// BenchmarkBackupRestore prints backup and restore throughput (MB/s of
// backup data, and rows/s) for a table of 1M rows per engine, to a
// directory target, on real servers: `make bench-backup`.
func BenchmarkBackupRestore(b *testing.B) {
	ctx := context.Background()
	b.Run("postgresql", func(b *testing.B) {
		src := testservers.StartPostgresPrimary(b)
		pgExec(b, ctx, src, "postgres",
			"CREATE TABLE orders (id int PRIMARY KEY, note text NOT NULL, amount numeric(12,2), created timestamptz DEFAULT now())",
			fmt.Sprintf("INSERT INTO orders (id, note, amount) SELECT g, 'order ' || g || ' ' || md5(g::text), g %% 1000 FROM generate_series(1, %d) g", benchRows))
		dst := func() backup.Server { return pgServer(testservers.StartPostgresPrimary(b)) }
		benchEngine(b, ctx, pgServer(src), dst)
	})
	b.Run("mariadb", func(b *testing.B) {
		src := testservers.StartMariaDBPrimary(b)
		mariaExec(b, ctx, src,
			"CREATE DATABASE shop",
			"CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(100) NOT NULL, amount DECIMAL(12,2), created TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
			fmt.Sprintf("INSERT INTO shop.orders (id, note, amount) SELECT seq, CONCAT('order ', seq, ' ', MD5(seq)), seq %% 1000 FROM shop.seq_1_to_%d", benchRows))
		dst := func() backup.Server { return mariaServer(testservers.StartMariaDBPrimary(b)) }
		benchEngine(b, ctx, mariaServer(src), dst)
	})
}

func benchEngine(b *testing.B, ctx context.Context, src backup.Server, fresh func() backup.Server) {
	store := storage.NewDir(b.TempDir())
	var backupTime, restoreTime time.Duration
	var size int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := fmt.Sprintf("b%d", i)
		dst := fresh()
		b.StartTimer()
		start := time.Now()
		m, _, err := backup.Run(ctx, backup.Options{Server: src, Store: store, Namespace: "bench", Database: "db", Name: name})
		if err != nil {
			b.Fatal(err)
		}
		backupTime += time.Since(start)
		size += m.Size()
		start = time.Now()
		if _, err := backup.Restore(ctx, backup.RestoreOptions{Server: dst, Store: store, Path: backup.Path("bench", "db", name), Scratch: b.TempDir()}); err != nil {
			b.Fatal(err)
		}
		restoreTime += time.Since(start)
	}
	mb := float64(size) / 1e6
	b.ReportMetric(mb/float64(b.N), "MB/backup")
	b.ReportMetric(mb/backupTime.Seconds(), "MB/s-backup")
	b.ReportMetric(mb/restoreTime.Seconds(), "MB/s-restore")
	b.ReportMetric(float64(benchRows*b.N)/backupTime.Seconds(), "rows/s-backup")
	b.ReportMetric(float64(benchRows*b.N)/restoreTime.Seconds(), "rows/s-restore")
}
