//go:build tools

// Package tools records the tool packages this module builds.
package tools

import (
	// govulncheck: the vulnerability gate of make test.
	_ "golang.org/x/vuln/cmd/govulncheck"
	// indexdb: turns vulndb's data/osv into a database govulncheck reads
	// with -db file://...
	_ "golang.org/x/vulndb/cmd/indexdb"
)
