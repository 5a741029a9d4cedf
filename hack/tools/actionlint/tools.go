//go:build tools

// Package tools records the tool packages this module builds.
package tools

import (
	// actionlint: checks the GitHub Actions workflow in make test.
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
