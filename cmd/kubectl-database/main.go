// Command kubectl-database is the operator's kubectl plugin: day-2 work on
// Databases (status, switchover, backup, restore, report, connect, logs).
// On PATH, kubectl runs it as `kubectl database`.
package main

import (
	"os"

	"example.com/database-operator/internal/plugin"
)

func main() {
	os.Exit(plugin.Main(os.Args[1:], plugin.StdStreams()))
}
