//go:build tools

// Package tools records the tool packages this module builds.
package tools

import _ "github.com/operator-framework/operator-registry/cmd/opm"
