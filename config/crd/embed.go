// Package crd embeds the CustomResourceDefinitions controller-gen writes
// (make manifests): the validating webhook checks a write made through an
// older API version against the stored version's own schema and rules.
package crd

import _ "embed"

// Databases is the databases.example.com CRD (every served version).
//
//go:embed bases/example.com_databases.yaml
var Databases []byte
