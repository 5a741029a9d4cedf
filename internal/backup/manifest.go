// Package backup is the program a backup or restore Job runs (the manager
// binary's "backup" and "restore" subcommands): a logical dump streamed with
// checksums to a storage target, a manifest beside it, retention, and the
// verified load of a backup into a fresh instance.
//
// A backup is a directory at the target, <namespace>/<database>/<backup>:
//
//	manifest.json   what the backup holds (written last: no manifest, no backup)
//	globals.sql     PostgreSQL roles and tablespaces (pg_dumpall --globals-only)
//	db-0001.dump    PostgreSQL: one pg_dump custom-format file per database
//	users.sql       MariaDB: accounts, roles and grants (mariadb-dump --system=users)
//	dump.sql        MySQL/MariaDB: one consistent dump of every user schema
//	base.tar        PostgreSQL physical backup: the data directory as
//	                pg_basebackup streams it, with the WAL it needs
package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// ManifestName is the manifest's file name inside a backup's directory.
const ManifestName = "manifest.json"

// FormatVersion is the manifest layout this code writes and reads.
const FormatVersion = 1

// Manifest describes one backup.
type Manifest struct {
	Format    int         `json:"format"`
	Engine    dbv1.Engine `json:"engine"`
	Version   string      `json:"version"`
	Namespace string      `json:"namespace"`
	Database  string      `json:"database"`
	// DatabaseUID is the Database's own identity: retention deletes only
	// backups carrying it, never those of an earlier Database of the same
	// name or of another cluster writing to the same place.
	DatabaseUID string `json:"databaseUID,omitempty"`
	Backup      string `json:"backup"`
	Instance    string `json:"instance,omitempty"`
	// Method is how the backup was taken: logical (dumps; "" in manifests
	// written before physical backups existed) or physical (the data
	// directory).
	Method string `json:"method,omitempty"`
	// Position is the engine's position the backup is consistent with (at
	// least): a PostgreSQL WAL location, a MySQL/MariaDB GTID set.
	Position string `json:"position,omitempty"`
	// EndPosition, for a physical backup, is the instance's position once
	// the copy ended: a recovery from it is consistent from there on.
	EndPosition string `json:"endPosition,omitempty"`
	// WALStart, for a PostgreSQL physical backup, is the first WAL file a
	// recovery from it reads (its backup_label's START WAL LOCATION):
	// archive retention keeps every archived file from there on.
	WALStart  string    `json:"walStart,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// CompletedAt is when the last file was written.
	CompletedAt time.Time `json:"completedAt"`
	Files       []File    `json:"files"`
}

// File is one file of a backup.
type File struct {
	Name string `json:"name"`
	// Database is the database the file holds (PostgreSQL per-database dumps).
	Database string `json:"database,omitempty"`
	// Kind says how the file is loaded: globals, pg_dump, sql.
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// File kinds.
const (
	KindGlobals = "globals"
	KindPGDump  = "pg_dump"
	KindSQL     = "sql"
	// KindUsers is MariaDB's accounts and grants (mariadb-dump --system=users).
	KindUsers = "users"
	// KindBaseBackup is a PostgreSQL data directory (pg_basebackup, tar).
	KindBaseBackup = "basebackup"
	// KindMariaDBBackup is a MariaDB server's data files as mariadb-backup
	// streams them (mbstream), not prepared yet.
	KindMariaDBBackup = "mariadb-backup"
)

// Backup methods.
const (
	MethodLogical  = "logical"
	MethodPhysical = "physical"
)

// Size is the backup's total size in bytes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Checksum is one SHA-256 over the backup's files (each file's name and
// digest, in order), the value a Backup's status shows.
func (m *Manifest) Checksum() string {
	h := sha256.New()
	for _, f := range m.Files {
		fmt.Fprintf(h, "%s %s\n", f.Name, f.SHA256)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Validate refuses a manifest this code cannot restore.
func (m *Manifest) Validate() error {
	if m.Format != FormatVersion {
		return fmt.Errorf("backup manifest format %d is not supported (this operator reads format %d)", m.Format, FormatVersion)
	}
	if len(m.Files) == 0 {
		return fmt.Errorf("backup manifest lists no files")
	}
	for _, f := range m.Files {
		if f.Name == "" || strings.Contains(f.Name, "/") || f.Name == ManifestName {
			return fmt.Errorf("backup manifest names an invalid file %q", f.Name)
		}
		if len(f.SHA256) != 64 {
			return fmt.Errorf("backup manifest has no SHA-256 for %s", f.Name)
		}
	}
	return nil
}

func parseManifest(b []byte) (*Manifest, error) {
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("backup manifest is not valid JSON: %w", err)
	}
	return m, nil
}

// Path is where a Database's backup lives in a target.
func Path(namespace, database, backup string) string {
	return path.Join(namespace, database, backup)
}
