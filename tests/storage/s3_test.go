// Package storage_test drives the backup S3 store against a real S3 server
// (versitygw, built by `hack/build-tools.sh s3`, started on loopback by
// tests/utils/testservers).
package storage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/tests/utils/testservers"
)

// stream is an io.Reader of n pseudo-random bytes that is not a
// bytes.Reader, so nothing can learn its size ahead: as a dump piped in.
type stream struct {
	rnd  *rand.ChaCha8
	left int
	sum  []byte // sha256 of what was read, at EOF
	h    interface {
		io.Writer
		Sum([]byte) []byte
	}
	failAfter error // returned instead of EOF, if set
}

func newStream(n int, seed byte) *stream {
	var s [32]byte
	s[0] = seed
	return &stream{rnd: rand.NewChaCha8(s), left: n, h: sha256.New()}
}

func (s *stream) Read(p []byte) (int, error) {
	if s.left == 0 {
		if s.failAfter != nil {
			return 0, s.failAfter
		}
		if s.sum == nil {
			s.sum = s.h.Sum(nil)
		}
		return 0, io.EOF
	}
	if len(p) > s.left {
		p = p[:s.left]
	}
	if len(p) > 1<<16 {
		p = p[:1<<16]
	}
	_, _ = s.rnd.Read(p)
	s.h.Write(p) //nolint:errcheck // a hash.Hash never returns an error
	s.left -= len(p)
	return len(p), nil
}

func newStore(t *testing.T, cfg storage.S3Config) storage.Store {
	t.Helper()
	s, err := storage.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func config(srv *testservers.S3Server) storage.S3Config {
	return storage.S3Config{
		Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "cluster-a",
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, CA: srv.CA,
	}
}

func get(t *testing.T, s storage.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return b
}

// noSecret fails the test if err shows a secret key.
func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if err != nil && strings.Contains(err.Error(), s) {
			t.Fatalf("error shows a secret key: %v", err)
		}
	}
}

// TestS3RoundTrip streams a 20 MiB object of unknown size (two multipart
// parts), reads it back, and finds it where the prefix puts it.
func TestS3RoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testservers.StartS3(t)
	s := newStore(t, config(srv))
	if err := storage.Check(ctx, s); err != nil {
		t.Fatal(err)
	}
	const size = 20<<20 + 12345
	in := newStream(size, 1)
	n, err := s.Put(ctx, "ns/db/2026-12-03T10:00:00Z/dump.sql.gz", in)
	if err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Fatalf("Put stored %d bytes, want %d", n, size)
	}
	if loc, want := s.Location("ns/db/2026-12-03T10:00:00Z/dump.sql.gz"), "s3://backups/cluster-a/ns/db/2026-12-03T10:00:00Z/dump.sql.gz"; loc != want {
		t.Fatalf("Location = %q, want %q", loc, want)
	}
	// A multipart object's ETag ends in -<parts>: 20 MiB in 16 MiB parts is 2.
	info, err := srv.Client().StatObject(ctx, srv.Bucket, "cluster-a/ns/db/2026-12-03T10:00:00Z/dump.sql.gz", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ETag, "-2") || info.Size != size {
		t.Fatalf("stored object: ETag %q, size %d; want a 2-part multipart upload of %d bytes", info.ETag, info.Size, size)
	}
	// The posix backend keeps it as a plain file, under the prefix.
	fi, err := os.Stat(filepath.Join(srv.DataDir, srv.Bucket, "cluster-a/ns/db/2026-12-03T10:00:00Z/dump.sql.gz"))
	if err != nil || fi.Size() != size {
		t.Fatalf("object file on the server: %v, %v", fi, err)
	}

	rc, err := s.Get(ctx, "ns/db/2026-12-03T10:00:00Z/dump.sql.gz")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	m, err := io.Copy(h, rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m != size || !bytes.Equal(h.Sum(nil), in.sum) {
		t.Fatalf("Get returned %d bytes (sha256 %x), want %d (sha256 %x)", m, h.Sum(nil), size, in.sum)
	}

	// A small object is stored (as a one-part upload) and read back too.
	if _, err := s.Put(ctx, "ns/db/small", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "ns/db/small"); string(got) != "hello" {
		t.Fatalf("Get(small) = %q", got)
	}
	if _, err := s.Put(ctx, "ns/db/empty", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "ns/db/empty"); len(got) != 0 {
		t.Fatalf("Get(empty) = %q", got)
	}
}

// TestS3FailedPutLeavesNothing: the stream fails after the first part was
// uploaded; the multipart upload is aborted and the key stays missing.
func TestS3FailedPutLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testservers.StartS3(t)
	s := newStore(t, config(srv))
	in := newStream(17<<20, 2)
	in.failAfter = errors.New("pg_dump exited with status 1")
	_, err := s.Put(ctx, "ns/db/broken", in)
	if !errors.Is(err, in.failAfter) || !strings.Contains(err.Error(), "reading the backup stream") {
		t.Fatalf("Put error = %v, want the stream's error", err)
	}
	if _, err := s.Get(ctx, "ns/db/broken"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get after a failed Put = %v, want ErrNotFound", err)
	}
	var pending []string
	for u := range srv.Client().ListIncompleteUploads(ctx, srv.Bucket, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		pending = append(pending, u.Key+" "+u.UploadID)
	}
	if len(pending) != 0 {
		t.Fatalf("multipart uploads left after a failed Put: %v", pending)
	}
	if keys, err := s.List(ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("List after a failed Put = %v, %v", keys, err)
	}
}

func TestS3ListDeleteGetMissing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testservers.StartS3(t)
	s := newStore(t, config(srv))
	for _, k := range []string{"db2/b", "db1/z", "db1/a/2", "db1/a/1", "db10/x", "top"} {
		if _, err := s.Put(ctx, k, strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	// Objects outside the prefix are not the store's.
	if _, err := srv.Client().PutObject(ctx, srv.Bucket, "cluster-b/db1/z", strings.NewReader("other"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]string{
		"":      {"db1/a/1", "db1/a/2", "db1/z", "db10/x", "db2/b", "top"},
		"db1/":  {"db1/a/1", "db1/a/2", "db1/z"},
		"db1":   {"db1/a/1", "db1/a/2", "db1/z", "db10/x"},
		"db1/a": {"db1/a/1", "db1/a/2"},
		"nope/": {},
	} {
		got, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
	if err := s.Delete(ctx, "db1/z"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "db1/z"); err != nil {
		t.Fatalf("Delete of a deleted key: %v", err)
	}
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	_, err := s.Get(ctx, "db1/z")
	if !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "s3://backups/cluster-a/db1/z") {
		t.Fatalf("Get of a deleted key = %v, want ErrNotFound naming s3://backups/cluster-a/db1/z", err)
	}
	if got, _ := s.List(ctx, "db1/"); !reflect.DeepEqual(got, []string{"db1/a/1", "db1/a/2"}) {
		t.Fatalf("List after Delete = %q", got)
	}
	if got := get(t, newStore(t, storage.S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "/cluster-b/",
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}), "db1/z"); string(got) != "other" {
		t.Fatalf("Get through prefix cluster-b = %q", got)
	}
	if _, err := s.Put(ctx, "../cluster-b/db1/z", strings.NewReader("x")); !errors.Is(err, storage.ErrInvalidKey) {
		t.Fatalf("Put of an escaping key = %v, want ErrInvalidKey", err)
	}
}

// TestS3Errors: each misconfiguration is named in the error.
func TestS3Errors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testservers.StartS3(t)

	t.Run("wrong secret key", func(t *testing.T) {
		cfg := config(srv)
		cfg.SecretAccessKey = "not-the-secret-" + srv.SecretKey[:4]
		s := newStore(t, cfg)
		for name, err := range map[string]error{
			"Check": storage.Check(ctx, s),
			"Put":   first(s.Put(ctx, "a", strings.NewReader("x"))),
			"Get":   first(s.Get(ctx, "a")),
			"List":  first(s.List(ctx, "")),
		} {
			if err == nil || !strings.Contains(err.Error(), "access denied") || !strings.Contains(err.Error(), "credentials") {
				t.Errorf("%s with a wrong secret key: %v, want access denied naming the credentials", name, err)
			}
			if errors.Is(err, storage.ErrNotFound) {
				t.Errorf("%s with a wrong secret key wraps ErrNotFound: %v", name, err)
			}
			noSecret(t, err, cfg.SecretAccessKey, srv.SecretKey)
		}
	})
	t.Run("unknown access key", func(t *testing.T) {
		cfg := config(srv)
		cfg.AccessKeyID = "AKNOBODY"
		s := newStore(t, cfg)
		for name, err := range map[string]error{
			"Check":  storage.Check(ctx, s),
			"Put":    first(s.Put(ctx, "a", strings.NewReader("x"))),
			"Get":    first(s.Get(ctx, "a")),
			"List":   first(s.List(ctx, "")),
			"Delete": s.Delete(ctx, "a"),
		} {
			if err == nil || !strings.Contains(err.Error(), "access denied") || !strings.Contains(err.Error(), "credentials") {
				t.Errorf("%s with an unknown access key: %v, want access denied naming the credentials", name, err)
			}
			noSecret(t, err, srv.SecretKey)
		}
	})
	t.Run("missing bucket", func(t *testing.T) {
		cfg := config(srv)
		cfg.Bucket = "no-such-bucket"
		s := newStore(t, cfg)
		err := storage.Check(ctx, s)
		if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Errorf("Check of a missing bucket: %v", err)
		}
		_, err = s.Put(ctx, "a", strings.NewReader("x"))
		if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Errorf("Put into a missing bucket: %v", err)
		}
		_, err = s.List(ctx, "")
		if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Errorf("List of a missing bucket: %v", err)
		}
		_, err = s.Get(ctx, "a")
		if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Errorf("Get from a missing bucket: %v", err)
		}
	})
	t.Run("unreachable endpoint", func(t *testing.T) {
		cfg := config(srv)
		cfg.Endpoint = "http://" + closedPort(t)
		s := newStore(t, cfg)
		start := time.Now()
		err := storage.Check(ctx, s)
		if err == nil || !strings.Contains(err.Error(), "s3 endpoint "+strings.TrimPrefix(cfg.Endpoint, "http://")+": unreachable") {
			t.Errorf("Check of a closed port: %v", err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("Check of a closed port took %s", d)
		}
		t.Logf("unreachable endpoint reported after %s: %v", time.Since(start).Round(time.Millisecond), err)
		_, err = s.Put(ctx, "a", strings.NewReader("x"))
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("Put to a closed port: %v", err)
		}
	})
	t.Run("https to a plain http server", func(t *testing.T) {
		cfg := config(srv)
		cfg.Endpoint = srv.Host // host:port means https
		err := storage.Check(ctx, newStore(t, cfg))
		if err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("https to an http server: %v", err)
		}
	})
	t.Run("configuration", func(t *testing.T) {
		for _, c := range []struct {
			cfg  storage.S3Config
			want string
		}{
			{storage.S3Config{Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "s"}, "endpoint must be set"},
			{storage.S3Config{Endpoint: srv.Endpoint, AccessKeyID: "a", SecretAccessKey: "s"}, "bucket must be set"},
			{storage.S3Config{Endpoint: srv.Endpoint, Bucket: "bkt", SecretAccessKey: "s"}, "access key ID must be set"},
			{storage.S3Config{Endpoint: srv.Endpoint, Bucket: "bkt", AccessKeyID: "a"}, "secret access key must be set"},
			{storage.S3Config{Endpoint: "ftp://h", Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "s"}, "scheme must be http or https"},
			{storage.S3Config{Endpoint: "http://h/path", Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "s"}, "a path is not supported"},
			{storage.S3Config{Endpoint: "h:1", Bucket: "bad/bucket", AccessKeyID: "a", SecretAccessKey: "s"}, `bucket "bad/bucket"`},
			{storage.S3Config{Endpoint: "h:1", Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "s", CA: []byte("junk")}, "no PEM certificate"},
			{storage.S3Config{Endpoint: "h:1", Bucket: "bkt", Prefix: "../x", AccessKeyID: "a", SecretAccessKey: "s3cr3t"}, "prefix"},
		} {
			_, err := storage.NewS3(ctx, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewS3(%+v) = %v, want an error containing %q", c.cfg.Endpoint, err, c.want)
			}
			noSecret(t, err, "s3cr3t")
		}
		// No request at construction: an endpoint nobody serves is fine.
		if _, err := storage.NewS3(ctx, storage.S3Config{Endpoint: "s3.invalid:443", Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "s"}); err != nil {
			t.Errorf("NewS3 with an unserved endpoint: %v", err)
		}
	})
}

// TestS3TLS: with the CA the store works over https; without it the
// certificate is refused and the error says so.
func TestS3TLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testservers.StartS3(t, testservers.S3TLS())
	if !strings.HasPrefix(srv.Endpoint, "https://") || len(srv.CA) == 0 {
		t.Fatalf("TLS server: endpoint %s, %d bytes of CA", srv.Endpoint, len(srv.CA))
	}
	for _, ep := range []string{srv.Endpoint, srv.Host} { // host:port means https too
		cfg := config(srv)
		cfg.Endpoint = ep
		s := newStore(t, cfg)
		if err := storage.Check(ctx, s); err != nil {
			t.Fatalf("Check over https with the CA (%s): %v", ep, err)
		}
		data := bytes.Repeat([]byte("tls "), 1<<18)
		if _, err := s.Put(ctx, "ns/db/dump", bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if got := get(t, s, "ns/db/dump"); !bytes.Equal(got, data) {
			t.Fatalf("Get over https returned %d bytes that differ", len(got))
		}
	}

	cfg := config(srv)
	cfg.CA = nil
	s := newStore(t, cfg)
	for name, err := range map[string]error{
		"Check": storage.Check(ctx, s),
		"Put":   first(s.Put(ctx, "ns/db/other", strings.NewReader("x"))),
	} {
		if err == nil || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), "unknown authority") {
			t.Errorf("%s over https without the CA: %v, want a certificate error", name, err)
		}
	}
	if _, err := srv.Client().StatObject(ctx, srv.Bucket, "cluster-a/ns/db/other", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatalf("the refused Put stored something: %v", err)
	}

	// A CA that did not sign the server's certificate is refused too.
	other := testservers.StartS3(t, testservers.S3TLS(), testservers.S3Bucket(""))
	cfg = config(srv)
	cfg.CA = other.CA
	if err := storage.Check(ctx, newStore(t, cfg)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Check with another CA: %v, want a certificate error", err)
	}
	// Plain http to the TLS port fails, not silently.
	cfg = config(srv)
	cfg.Endpoint, cfg.CA = "http://"+srv.Host, nil
	if err := storage.Check(ctx, newStore(t, cfg)); err == nil {
		t.Error("Check over http against an https server succeeded")
	} else {
		t.Logf("http to an https server: %v", err)
	}
}

func first[T any](_ T, err error) error { return err }

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
}
