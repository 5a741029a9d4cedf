//go:build tools

// Package tools records the tool packages this module builds.
package tools

import (
	// versitygw: the S3 server for the backup storage tests (posix backend
	// on a temporary directory, see tests/utils/testservers/s3.go).
	_ "github.com/versity/versitygw/cmd/versitygw"
)
