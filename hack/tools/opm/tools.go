//go:build tools

// Package tools records the tool packages this module builds.
package tools

import (
	// grpc_health_probe: OLM probes catalog pods with it, so the catalog
	// image carries it next to opm.
	_ "github.com/grpc-ecosystem/grpc-health-probe"
	_ "github.com/operator-framework/operator-registry/cmd/opm"
)
