// Package storage is where backups live: a directory (a PersistentVolumeClaim
// mounted in the backup Job) or an S3-compatible bucket. Both stores take the
// same keys (slash-separated relative paths such as "ns/db/2026-12-03T10:00:00Z/dump.sql.gz"),
// publish an object only once it is complete, and report failures with
// errors that say what to fix, never including a secret.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Store is where backups live: a directory (a PersistentVolumeClaim mounted
// in the backup Job) or an S3 bucket.
type Store interface {
	// Put streams r to key. On failure nothing is left visible under key
	// (write to a temporary name and rename / S3 multipart aborted).
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Get opens key; a missing key returns an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys under prefix (recursively), sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Location names key for humans and status fields, without
	// credentials: file:///backups/a/b or s3://bucket/prefix/a/b
	Location(key string) string
}

// ErrNotFound is wrapped by Get's error for a key that does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalidKey is wrapped by the error for a key (or List prefix) that is
// empty, absolute, not clean, or climbs out of the store with "..".
var ErrInvalidKey = errors.New("invalid backup key")

// checker is implemented by stores that can verify their target before a
// backup starts.
type checker interface {
	check(ctx context.Context) error
}

// Check verifies that the store's target is reachable before a backup
// starts, so that the backup fails early and says why: for S3 that the
// endpoint answers, the credentials are accepted and the bucket exists; for a
// directory that it exists and is a writable directory.
func Check(ctx context.Context, s Store) error {
	if c, ok := s.(checker); ok {
		return c.check(ctx)
	}
	return nil
}

// validateKey refuses keys that are not clean relative slash paths inside
// the store: "", "/abs", "a/../b", "../x", "a//b", "./a", "a/", and names
// that the directory store keeps for its temporary files.
func validateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if err := validatePath(key); err != nil {
		return err
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w %q: ends with /", ErrInvalidKey, key)
	}
	if path.Clean(key) != key {
		return fmt.Errorf("%w %q: not a clean slash-separated path (no empty, . or .. elements)", ErrInvalidKey, key)
	}
	if strings.HasPrefix(path.Base(key), tempPrefix) {
		return fmt.Errorf("%w %q: names starting with %s are reserved for temporary files", ErrInvalidKey, key, tempPrefix)
	}
	return nil
}

// validatePath refuses a key or prefix that is absolute or has a ".."
// element (a prefix may be "" or end with "/").
func validatePath(p string) error {
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w %q: absolute paths are refused (keys are relative to the backup store)", ErrInvalidKey, p)
	}
	if strings.ContainsRune(p, 0) || strings.ContainsRune(p, '\\') {
		return fmt.Errorf("%w %q: contains a NUL or backslash", ErrInvalidKey, p)
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return fmt.Errorf("%w %q: escapes the backup store (\"..\")", ErrInvalidKey, p)
		}
	}
	return nil
}

// sourceReader remembers an error of the backup stream being stored, so a
// failed Put blames the stream, not the store, when the stream failed.
type sourceReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err // the caller's, not the stream's
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// sourceError is the error of a Put whose backup stream failed.
func sourceError(loc string, err error) error {
	return fmt.Errorf("%s: reading the backup stream: %w", loc, err)
}
