package storage

import (
	"context"
	"flag"
	"fmt"
	"os"
)

// Environment variables through which a Job passes the S3 keys to the
// program: never on its command line, where they would show in the pod spec.
const (
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
)

// Flags are the command-line form of a backup target; the operator's
// Job builder writes them, the program reads them.
type Flags struct {
	Dir         string
	S3Endpoint  string
	S3Bucket    string
	S3Prefix    string
	S3Region    string
	S3PathStyle bool
	S3CAFile    string
}

// Register adds the target flags to fs.
func (t *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.Dir, "dir", "", "backup directory (a mounted volume)")
	fs.StringVar(&t.S3Endpoint, "s3-endpoint", "", "S3 endpoint: host[:port] or http(s) URL")
	fs.StringVar(&t.S3Bucket, "s3-bucket", "", "S3 bucket")
	fs.StringVar(&t.S3Prefix, "s3-prefix", "", "prefix of every object name")
	fs.StringVar(&t.S3Region, "s3-region", "", "S3 region (default us-east-1)")
	fs.BoolVar(&t.S3PathStyle, "s3-path-style", false, "address the bucket as endpoint/bucket")
	fs.StringVar(&t.S3CAFile, "s3-ca-file", "", "PEM CA bundle for the endpoint's certificate")
}

// Open returns the store the flags name; S3 keys come from the environment.
func (t *Flags) Open(ctx context.Context) (Store, error) {
	switch {
	case t.Dir != "" && t.S3Endpoint != "":
		return nil, fmt.Errorf("give --dir or --s3-endpoint, not both")
	case t.Dir != "":
		return NewDir(t.Dir), nil
	case t.S3Endpoint != "":
		cfg := S3Config{Endpoint: t.S3Endpoint, Bucket: t.S3Bucket, Prefix: t.S3Prefix, Region: t.S3Region,
			ForcePathStyle: t.S3PathStyle, AccessKeyID: os.Getenv(EnvAccessKeyID), SecretAccessKey: os.Getenv(EnvSecretAccessKey)}
		if t.S3CAFile != "" {
			ca, err := os.ReadFile(t.S3CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading the S3 CA bundle: %w", err)
			}
			cfg.CA = ca
		}
		return NewS3(ctx, cfg)
	}
	return nil, fmt.Errorf("no backup target: give --dir or --s3-endpoint")
}
