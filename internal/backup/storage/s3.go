package storage

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// DefaultPartSize is the multipart part size of an S3 Put: one part is held
// in memory at a time, and an object has at most 10,000 parts (so 16 MiB
// parts store objects up to 156 GiB).
const DefaultPartSize = 16 << 20

// s3Retries is how often a failed request is tried again (minio-go backs off
// between 200ms and 1s); minio-go's default of 10 makes an unreachable
// endpoint take long to report.
const s3Retries = 4

// S3Config is an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, versitygw...).
type S3Config struct {
	Endpoint string // host:port or URL (http:// or https://); https unless the URL says http
	// Prefix is prepended to every key ("" allowed); Region defaults to "us-east-1".
	Bucket, Prefix, Region       string
	AccessKeyID, SecretAccessKey string
	CA                           []byte // PEM bundle added to the system roots for the endpoint's TLS (optional)
	ForcePathStyle               bool
	PartSize                     uint64 // multipart part size; 0 means DefaultPartSize (minimum 5 MiB)
}

type s3Store struct {
	client   *minio.Client
	bucket   string
	prefix   string // "" or ends with "/"
	endpoint string // host:port, for messages
	secure   bool
	partSize uint64
}

// NewS3 returns the store of an S3 bucket. It validates the configuration
// (an empty bucket, endpoint or key names the field) without any request:
// Check reaches the endpoint.
func NewS3(_ context.Context, cfg S3Config) (Store, error) {
	if err := checkS3Config(cfg); err != nil {
		return nil, err
	}
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		if err := validatePath(prefix); err != nil {
			return nil, fmt.Errorf("s3 configuration: prefix: %w", err)
		}
		prefix += "/"
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	if partSize < 5<<20 {
		return nil, fmt.Errorf("s3 configuration: part size %d is below S3's minimum of 5 MiB", partSize)
	}
	transport, err := s3Transport(cfg, host, secure)
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	if cfg.ForcePathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
		Secure:       secure,
		Transport:    transport,
		Region:       region,
		BucketLookup: lookup,
		MaxRetries:   s3Retries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %s: %w", host, err)
	}
	return &s3Store{client: client, bucket: cfg.Bucket, prefix: prefix, endpoint: host, secure: secure, partSize: partSize}, nil
}

// checkS3Config names every empty required field (endpoint, bucket, keys),
// then checks the bucket's name.
func checkS3Config(cfg S3Config) error {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"endpoint", cfg.Endpoint}, {"bucket", cfg.Bucket},
		{"access key ID", cfg.AccessKeyID}, {"secret access key", cfg.SecretAccessKey},
	} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("s3 configuration: %s must be set", strings.Join(missing, ", "))
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return fmt.Errorf("s3 configuration: bucket %q: %w", cfg.Bucket, err)
	}
	return nil
}

// s3Transport is the HTTP transport to the endpoint: over https, TLS 1.2 at
// least, trusting cfg.CA besides the system roots; a CA with a plain http
// endpoint is a mistake.
func s3Transport(cfg S3Config, host string, secure bool) (*http.Transport, error) {
	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %s: %w", host, err)
	}
	if !secure {
		if len(cfg.CA) > 0 {
			return nil, fmt.Errorf("s3 configuration: a CA is set but endpoint %q is plain http", cfg.Endpoint)
		}
		return transport, nil
	}
	if transport.TLSClientConfig == nil {
		transport.TLSClientConfig = &tls.Config{}
	}
	transport.TLSClientConfig.MinVersion = tls.VersionTLS12
	if len(cfg.CA) > 0 {
		roots, err := x509.SystemCertPool()
		if err != nil || roots == nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(cfg.CA) {
			return nil, fmt.Errorf("s3 configuration: the CA bundle has no PEM certificate")
		}
		transport.TLSClientConfig.RootCAs = roots
	}
	return transport, nil
}

// parseEndpoint takes host:port or an http(s) URL without a path.
func parseEndpoint(ep string) (host string, secure bool, err error) {
	ep = strings.TrimSpace(ep)
	if !strings.Contains(ep, "://") {
		if strings.ContainsAny(ep, "/?#") {
			return "", false, fmt.Errorf("s3 configuration: endpoint %q: want host:port or http(s)://host:port", ep)
		}
		return ep, true, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("s3 configuration: endpoint %q: %w", ep, err)
	}
	switch u.Scheme {
	case "https":
		secure = true
	case "http":
	default:
		return "", false, fmt.Errorf("s3 configuration: endpoint %q: scheme must be http or https", ep)
	}
	if u.Host == "" {
		return "", false, fmt.Errorf("s3 configuration: endpoint %q has no host", ep)
	}
	if u.User != nil {
		return "", false, fmt.Errorf("s3 configuration: endpoint must not carry credentials (use the access key fields)")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false, fmt.Errorf("s3 configuration: endpoint %q: a path is not supported (put it in the bucket prefix)", u.Redacted())
	}
	return u.Host, secure, nil
}

// EndpointPort is the TCP port an S3 endpoint (host:port or an http(s)
// URL) is reached on: its own, else 443 for https and host:port, 80 for
// http.
func EndpointPort(ep string) (int, error) {
	host, secure, err := parseEndpoint(ep)
	if err != nil {
		return 0, err
	}
	if _, p, err := net.SplitHostPort(host); err == nil {
		return strconv.Atoi(p)
	}
	if secure {
		return 443, nil
	}
	return 80, nil
}

func (s *s3Store) Location(key string) string {
	return "s3://" + s.bucket + "/" + s.prefix + key
}

func (s *s3Store) bucketLocation() string {
	return "s3://" + s.bucket + "/" + s.prefix
}

// s3Error turns a minio-go or network error into one that says what to fix.
// loc names the object (or bucket) concerned; op is what was being done.
func (s *s3Store) s3Error(loc, op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %s: %w", loc, op, err)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		if e := s.responseError(loc, op, er, err); e != nil {
			return e
		}
	}
	if cause := tlsCause(err); cause != "" {
		return fmt.Errorf("s3 endpoint %s: %s (%s): %w", s.endpoint, cause, op, err)
	}
	if unreachable(err) {
		hint := ""
		if !s.secure && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "Connection closed")) {
			hint = " (the connection was closed: does the endpoint want https?)"
		}
		return fmt.Errorf("s3 endpoint %s: unreachable%s (%s): %w", s.endpoint, hint, op, err)
	}
	return fmt.Errorf("%s: %s: %w", loc, op, err)
}

// responseError explains the S3 error response er (of err) by its code, or
// returns nil when it carries no code.
func (s *s3Store) responseError(loc, op string, er minio.ErrorResponse, err error) error {
	switch er.Code {
	case "":
		return nil
	case "AccessDenied":
		return fmt.Errorf("%s: %s: access denied (check the credentials Secret and the bucket's policy): %w", loc, op, err)
	case "InvalidAccessKeyId", "XAdminUserNotFound": // the latter: versitygw's
		return fmt.Errorf("%s: %s: access denied, the access key ID is not known to the server (check the credentials Secret): %w", loc, op, err)
	case "SignatureDoesNotMatch":
		return fmt.Errorf("%s: %s: access denied, the request signature does not match: the secret access key is wrong (check the credentials Secret): %w", loc, op, err)
	case "InvalidToken", "ExpiredToken", "TokenRefreshRequired":
		return fmt.Errorf("%s: %s: access denied, the credentials are expired or invalid (check the credentials Secret): %w", loc, op, err)
	case "NoSuchBucket":
		return fmt.Errorf("bucket %q does not exist at s3 endpoint %s (%s): %w", s.bucket, s.endpoint, op, err)
	case "NoSuchKey":
		return fmt.Errorf("backup %s: %w: %w", loc, ErrNotFound, err)
	case "AuthorizationHeaderMalformed", "PermanentRedirect", "InvalidRegion":
		return fmt.Errorf("%s: %s: wrong region or endpoint for this bucket (check the region; the server says %q): %w", loc, op, er.Region, err)
	case "QuotaExceeded", "XMinioStorageFull", "StorageFull", "EntityTooLarge":
		return fmt.Errorf("%s: %s: storage full or object too large: %w", loc, op, err)
	}
	return fmt.Errorf("%s: %s: %s (%s): %w", loc, op, er.Code, httpStatus(er.StatusCode), err)
}

// unreachable says whether err is a network failure: the endpoint could
// not be reached or dropped the connection.
func unreachable(err error) bool {
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	var ue *url.Error
	return errors.As(err, &oe) || errors.As(err, &de) || errors.As(err, &ne) || errors.As(err, &ue) ||
		errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "connection reset")
}

func httpStatus(code int) string {
	if code == 0 {
		return "no HTTP status"
	}
	return fmt.Sprintf("HTTP %d", code)
}

// tlsCause names a TLS failure, or returns "".
func tlsCause(err error) string {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var ve *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ua):
		return "TLS certificate signed by an unknown authority (set the CA bundle)"
	case errors.As(err, &he):
		return "TLS certificate is not valid for this host name"
	case errors.As(err, &ci):
		return "TLS certificate is invalid (expired or not yet valid?)"
	case errors.As(err, &ve):
		return "TLS certificate verification failed"
	case errors.As(err, &rh), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "does not speak TLS (use an http:// endpoint?)"
	}
	return ""
}

func (s *s3Store) check(ctx context.Context) error {
	return s.probe(ctx, "checking the bucket")
}

// probe lists at most one key of the bucket: unlike a HEAD request, whose
// error responses have no body, a GET's error says what is wrong (an
// unknown access key, a bad signature, a missing bucket).
func (s *s3Store) probe(ctx context.Context, op string) error {
	for obj := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, MaxKeys: 1}) {
		if obj.Err != nil {
			return s.s3Error(s.bucketLocation(), op, obj.Err)
		}
		break
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %s: %w", s.bucketLocation(), op, err)
	}
	return nil
}

func (s *s3Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	loc := s.Location(key)
	src := &sourceReader{ctx: ctx, r: r}
	// Unknown size (-1): minio-go uploads one part at a time from a single
	// PartSize buffer, and aborts the multipart upload on any failure, so
	// nothing appears under key unless the whole stream was stored.
	info, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, src, -1, minio.PutObjectOptions{
		PartSize:    s.partSize,
		ContentType: "application/octet-stream",
	})
	if err != nil {
		switch {
		case src.err != nil:
			return 0, sourceError(loc, src.err)
		case ctx.Err() != nil:
			return 0, fmt.Errorf("%s: %w", loc, ctx.Err())
		}
		return 0, s.s3Error(loc, "uploading", err)
	}
	return info.Size, nil
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	loc := s.Location(key)
	obj, err := s.client.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.s3Error(loc, "downloading", err)
	}
	// GetObject is lazy: Stat sends the request, so a missing key, a
	// missing bucket or refused credentials show here, not on first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		// Stat is a HEAD request, whose 404 has no body: a missing bucket
		// (or, on some servers, an unknown access key) looks like a
		// missing key. Tell them apart.
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			if perr := s.probe(ctx, "downloading "+loc); perr != nil {
				return nil, perr
			}
		}
		return nil, s.s3Error(loc, "downloading", err)
	}
	return &s3Reader{obj: obj, s: s, loc: loc}, nil
}

// s3Reader classifies errors that occur while the object is being read.
type s3Reader struct {
	obj *minio.Object
	s   *s3Store
	loc string
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = r.s.s3Error(r.loc, "downloading", err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.obj.Close() }

func (s *s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validatePath(prefix); err != nil {
		return nil, err
	}
	keys := []string{}
	for obj := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.s3Error(s.Location(prefix), "listing", obj.Err)
		}
		k, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok || strings.HasSuffix(k, "/") { // a "directory" marker, not a backup
			continue
		}
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", s.Location(prefix), err)
	}
	sort.Strings(keys)
	return keys, nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil
		}
		return s.s3Error(s.Location(key), "deleting", err)
	}
	return nil
}
