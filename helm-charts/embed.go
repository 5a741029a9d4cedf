// Package helmcharts embeds the charts the operator renders in-process.
package helmcharts

import "embed"

// Database is the chart of one Database, rooted at "database/".
//
//go:embed all:database
var Database embed.FS
