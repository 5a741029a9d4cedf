//go:build tools

// Package tools records the tool packages this module builds.
package tools

import (
	// golangci-lint: make lint, inside make test.
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
