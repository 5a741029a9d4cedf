package testservers

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
)

// SetAsideIDs reads what a data directory set aside by the start scripts
// holds (a former primary's writes its new primary never had): it copies
// dir, starts a throwaway server of engine e on the copy (no network, no
// authentication: a socket in a private directory), and returns the ids
// of table (its first column, an integer) in database. PostgreSQL runs as
// the copy's owner, and is reached as superuser (initdb's); MariaDB skips
// the grant tables. The set-aside directory itself is never written.
func SetAsideIDs(t testing.TB, e dbv1.Engine, dir, superuser, database, table string) map[int]bool {
	t.Helper()
	scratch, err := os.MkdirTemp("", "setaside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	// The server's user must reach its data and socket under scratch.
	if err := os.Chmod(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(scratch, "data")
	if out, err := exec.Command("cp", "-a", dir, data).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v: %s", dir, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		cmd   *exec.Cmd
		query func() ([]int, error)
	)
	q := fmt.Sprintf("SELECT %s FROM %s", "id", table)
	if e == dbv1.EnginePostgreSQL {
		cmd, query = setAsidePostgres(t, scratch, data, superuser, database, q)
	} else {
		cmd, query = setAsideMariaDB(t, scratch, data, database, q)
	}
	cmd.SysProcAttr.Pdeathsig, cmd.SysProcAttr.Setpgid = syscall.SIGKILL, true
	log, _ := os.Create(filepath.Join(scratch, "server.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a server on the set-aside copy: %v", err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	var ids []int
	for {
		if ids, err = query(); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(scratch, "server.log"))
			t.Fatalf("reading the set-aside copy of %s: %v\n%s", dir, err, b)
		case <-time.After(200 * time.Millisecond):
		}
	}
	out := map[int]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func setAsidePostgres(t testing.TB, scratch, data, superuser, database, q string) (*exec.Cmd, func() ([]int, error)) {
	t.Helper()
	_ = os.Remove(filepath.Join(data, "postmaster.pid"))
	var st syscall.Stat_t
	if err := syscall.Stat(data, &st); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(scratch, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all all trust\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(scratch, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(filepath.Join(pgBin(t), "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+scratch, "-c", "hba_file="+hba,
		"-c", "ssl=off", "-c", "archive_mode=off", "-c", "shared_buffers=32MB")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: st.Uid, Gid: st.Gid}}
	cmd.Env = []string{"HOME=" + scratch, "LANG=C.UTF-8"}
	return cmd, func() ([]int, error) {
		cfg, err := pgx.ParseConfig("")
		if err != nil {
			return nil, err
		}
		cfg.Host, cfg.Port, cfg.User, cfg.Database = scratch, uint16(port), superuser, database
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close(context.Background())
		rows, err := c.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int])
	}
}

func setAsideMariaDB(t testing.TB, scratch, data, database, q string) (*exec.Cmd, func() ([]int, error)) {
	t.Helper()
	sock := filepath.Join(scratch, "mariadb.sock")
	tmp := PrivateTmp(t, scratch)
	server := lookPath(t, []string{"mariadbd"}, "mariadb-server")
	cmd := exec.Command(server, "--no-defaults", "--user=root", "--datadir="+data, "--socket="+sock,
		"--skip-networking", "--skip-grant-tables", "--skip-slave-start", "--tmpdir="+tmp,
		"--pid-file="+filepath.Join(scratch, "mariadb.pid"), "--innodb-buffer-pool-size=32M")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	return cmd, func() ([]int, error) {
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.User, cfg.DBName = "unix", sock, "root", database
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var ids []int
		for rows.Next() {
			var id int
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		return ids, rows.Err()
	}
}
