//go:build tools

// Package tools records the tool packages this module builds.
package tools

import (
	// promtool: make test-rules (check rules, test rules).
	_ "github.com/prometheus/prometheus/cmd/promtool"
	// prometheus: the server the full tier runs against the local cluster.
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
