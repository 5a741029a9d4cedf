package plugin

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"

	dbv1 "example.com/database-operator/api/v1"
)

// engineClient is what connect needs to know of an engine: a copy of a few
// fields of internal/engine's Profile (the plugin does not import that
// package, which links the database drivers; connect_test.go compares the
// two) and how its client takes a password and its connection arguments.
type engineClient struct {
	// Port and PortName are the server's port in the pod.
	Port     int32
	PortName string
	// Scheme is the URI scheme of a connection string.
	Scheme string
	// Programs are the client programs, the first found on PATH is run;
	// Programs[0] is the engine's own (Profile.Client).
	Programs []string
	// PasswordEnv is the environment variable the client reads the
	// password from: never given on the command line, where ps shows it.
	PasswordEnv string
	// postgres: psql's flags (-p, -U, -d); otherwise the MySQL clients' (-P, -u, -D).
	postgres bool
}

var engineClients = map[dbv1.Engine]engineClient{
	dbv1.EnginePostgreSQL: {Port: 5432, PortName: "postgresql", Scheme: "postgresql", Programs: []string{"psql"}, PasswordEnv: "PGPASSWORD", postgres: true},
	dbv1.EngineMySQL:      {Port: 3306, PortName: "mysql", Scheme: "mysql", Programs: []string{"mysql"}, PasswordEnv: "MYSQL_PWD"},
	// MariaDB's client speaks to MySQL's server and the other way round;
	// mariadb is the name of MariaDB's own, mysql its older one.
	dbv1.EngineMariaDB: {Port: 3306, PortName: "mysql", Scheme: "mysql", Programs: []string{"mariadb", "mysql"}, PasswordEnv: "MYSQL_PWD"},
}

// engineClientOf is e's client; like engine.ProfileOf, anything the table
// does not name is a MySQL-protocol server.
func engineClientOf(e dbv1.Engine) engineClient {
	if c, ok := engineClients[e]; ok {
		return c
	}
	return engineClients[dbv1.EngineMySQL]
}

// lookPath finds the first of the client programs on PATH: its path and
// name, or an error naming the program and what to do instead.
func (ec engineClient) lookPath() (path, program string, err error) {
	for _, p := range ec.Programs {
		path, err := exec.LookPath(p)
		if err == nil {
			return path, p, nil
		}
		if !errors.Is(err, exec.ErrNotFound) {
			return "", "", fmt.Errorf("the client %s: %w", p, err)
		}
	}
	return "", "", fmt.Errorf("%s not found on PATH: install it, or run connect with --print to see how to connect with another client", orList(ec.Programs))
}

// args are the client's arguments for a server at host:port, as user, to
// database db: the password is never among them.
func (ec engineClient) args(host string, port int, user, db string) []string {
	p := strconv.Itoa(port)
	if ec.postgres {
		return []string{"-h", host, "-p", p, "-U", user, "-d", db}
	}
	return []string{"-h", host, "-P", p, "-u", user, "-D", db}
}

// printedArgs are args as a person types them, the database last.
func (ec engineClient) printedArgs(host string, port int, user, db string) []string {
	a := ec.args(host, port, user, db)
	return append(a[:len(a)-2], db)
}

// orList is "a", "a or b", "a, b or c".
func orList(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	out := s[0]
	for _, x := range s[1 : len(s)-1] {
		out += ", " + x
	}
	return out + " or " + s[len(s)-1]
}
