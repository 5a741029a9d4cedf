package testservers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3BinEnv names the directory that holds the versitygw binary (what
// `hack/build-tools.sh s3` prints), or the binary itself.
const S3BinEnv = "VERSITYGW_BIN"

// S3Server is a real S3 server on 127.0.0.1: versitygw (built by
// `hack/build-tools.sh s3`) with its posix backend on a scratch directory,
// in single-account mode with a random root access key, over http or (with
// S3TLS) https with a throwaway CA. It is stopped by t.Cleanup.
type S3Server struct {
	server
	// Endpoint is the URL to give a client: http://127.0.0.1:PORT, or
	// https://127.0.0.1:PORT with S3TLS.
	Endpoint string
	// Host is 127.0.0.1:PORT.
	Host string
	// AccessKey and SecretKey are the root account's credentials.
	AccessKey, SecretKey string
	// CA is the PEM certificate of the CA that signed the server's
	// certificate (TLS only; nil over http).
	CA []byte
	// DataDir is the posix backend's directory: one subdirectory per
	// bucket, one file per object.
	DataDir string
	// Bucket is the bucket created at start ("backups" unless S3Bucket says
	// otherwise; "" with S3Bucket("")).
	Bucket string

	client *minio.Client
	// what Restart starts again
	bin  string
	args []string
	env  []string
}

type s3Options struct {
	tls    bool
	bucket string
	ip     net.IP
}

// S3Option configures StartS3.
type S3Option func(*s3Options)

// S3TLS serves https with a certificate for 127.0.0.1 and localhost signed
// by a CA made for this server (S3Server.CA).
func S3TLS() S3Option { return func(o *s3Options) { o.tls = true } }

// S3Listen serves on ip (a free port) instead of 127.0.0.1, with a TLS
// certificate that names it: where pods on a bridge reach it.
func S3Listen(ip net.IP) S3Option { return func(o *s3Options) { o.ip = ip } }

// S3Bucket names the bucket created at start; "" creates none.
func S3Bucket(name string) S3Option { return func(o *s3Options) { o.bucket = name } }

// StartS3 starts versitygw on a free loopback port and waits until it
// answers S3 requests, then creates the bucket. The binary comes from
// $VERSITYGW_BIN, else from the tools cache that `hack/build-tools.sh s3`
// fills, else from PATH; without one the test fails saying how to build it.
func StartS3(t testing.TB, opts ...S3Option) *S3Server {
	t.Helper()
	o := s3Options{bucket: "backups", ip: net.IPv4(127, 0, 0, 1)}
	for _, opt := range opts {
		opt(&o)
	}
	bin := versitygwBin(t)
	s := &S3Server{AccessKey: "AK" + randomHex(t, 9), SecretKey: randomHex(t, 20)}
	s.Dir = scratchDir(t, nil)
	s.DataDir = filepath.Join(s.Dir, "data")
	if err := os.Mkdir(s.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Port = freePortOn(t, o.ip)
	s.Host = net.JoinHostPort(o.ip.String(), strconv.Itoa(s.Port))
	args := []string{"--port", s.Host}
	scheme := "http"
	var transport http.RoundTripper // nil: minio-go's default
	if o.tls {
		scheme = "https"
		var cert, key []byte
		s.CA, cert, key = makeTLS(t, o.ip)
		certFile, keyFile := filepath.Join(s.Dir, "cert.pem"), filepath.Join(s.Dir, "key.pem")
		if err := os.WriteFile(certFile, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--cert", certFile, "--key", keyFile)
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(s.CA)
		transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	}
	s.Endpoint = scheme + "://" + s.Host
	args = append(args, "posix", s.DataDir)
	// The keys go through the environment, not the command line (ps shows that).
	s.bin, s.args = bin, args
	s.env = []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey}
	s.start(t, nil, s.env, bin, args...)
	t.Cleanup(s.Stop)

	c, err := minio.New(s.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure:       o.tls,
		Transport:    transport,
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.client = c
	s.waitServing(t)
	if o.bucket != "" {
		s.MakeBucket(t, o.bucket)
		s.Bucket = o.bucket
	}
	return s
}

func (s *S3Server) waitServing(t testing.TB) {
	t.Helper()
	waitUntil(t, &s.server, "versitygw", 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := s.client.ListBuckets(ctx)
		return err
	})
}

// Restart starts a stopped server again on the same address, keys and
// data: a target that was down for a while and is back.
func (s *S3Server) Restart(t testing.TB) {
	t.Helper()
	s.start(t, nil, s.env, s.bin, s.args...)
	s.waitServing(t)
}

// MakeBucket creates a bucket, failing the test on error.
func (s *S3Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("creating bucket %q on versitygw: %v\n%s", name, err, s.Log())
	}
}

// Client is an S3 client of the root account, for a test to look at the
// server independently of the code under test.
func (s *S3Server) Client() *minio.Client { return s.client }

// versitygwBin finds the versitygw binary or fails the test.
func versitygwBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(S3BinEnv); p != "" {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			p = filepath.Join(p, "versitygw")
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: no versitygw binary there (build it with `hack/build-tools.sh s3`, which prints its directory): %v", S3BinEnv, os.Getenv(S3BinEnv), err)
		}
		return p
	}
	cache := os.Getenv("DBOP_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "database-operator")
	}
	var candidates []string
	if v := versitygwVersion(); v != "" {
		candidates = append(candidates, filepath.Join(cache, "bin", "versitygw-"+v, "versitygw"))
	} else {
		// No hack/tools/versitygw/go.mod above the working directory: take
		// the newest cached build.
		m, _ := filepath.Glob(filepath.Join(cache, "bin", "versitygw-*", "versitygw"))
		sort.Sort(sort.Reverse(sort.StringSlice(m)))
		candidates = append(candidates, m...)
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	t.Fatalf("the versitygw S3 server is not built (looked in $%s, %v and PATH): run `hack/build-tools.sh s3` (it prints the directory to set %s to)", S3BinEnv, candidates, S3BinEnv)
	return ""
}

// versitygwVersion reads the version hack/tools/versitygw/go.mod pins, from
// the first directory at or above the working directory that has it.
func versitygwVersion() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "hack", "tools", "versitygw", "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Fields(line)
				for i := 0; i+1 < len(f); i++ {
					if f[i] == "github.com/versity/versitygw" {
						return f[i+1]
					}
				}
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return strings.ToUpper(hex.EncodeToString(b))
}

// makeTLS makes a throwaway CA and a server certificate for ip, 127.0.0.1,
// ::1 and localhost signed by it, returning PEM blocks.
func makeTLS(t testing.TB, ip net.IP) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "database-operator test S3 CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: ip.String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{ip, net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
