// Package images defines the project's container images, built in Go by
// release/ociimage: the operator (a static binary on an empty base,
// non-root), the OLM bundle, the file-based catalog (served by opm) and the
// scorecard test images. `make images` writes them as an OCI layout.
package images

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"example.com/database-operator/release/ociimage"
)

// Repo is the image repository prefix config/ and the bundle name.
const Repo = "example.com/database-operator"

// NonRoot is the user the operator and the test images run as.
const NonRoot = "65532:65532"

// Ref is the reference of one of the project's images at a version.
func Ref(image, version string) string { return Repo + "/" + image + ":v" + version }

func labels(title, version string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.source":   "https://example.com/database-operator",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

// Manager is the operator image: the static manager binary, run as a
// non-root user.
func Manager(binary, version string) (v1.Image, error) {
	f, err := ociimage.Executable(binary, "/manager")
	if err != nil {
		return nil, err
	}
	return ociimage.Build(ociimage.Spec{
		Files:      []ociimage.File{f},
		Entrypoint: []string{"/manager"},
		User:       NonRoot,
		Labels:     labels("database-operator", version),
	})
}

// Bundle is the OLM bundle image: the bundle directory's manifests,
// metadata and scorecard configuration at the paths its annotations name,
// with those annotations as labels (what bundle.Dockerfile does).
func Bundle(dir string) (v1.Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return nil, err
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("bundle annotations: %w", err)
	}
	var files []ociimage.File
	for src, dest := range map[string]string{"manifests": "/manifests", "metadata": "/metadata", "tests/scorecard": "/tests/scorecard"} {
		fs, err := ociimage.DirFiles(filepath.Join(dir, src), dest)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return ociimage.Build(ociimage.Spec{Files: files, Labels: meta.Annotations})
}

// Catalog is the file-based catalog image: the catalog under /configs,
// served by opm over gRPC, with grpc_health_probe, which OLM runs in the
// catalog pod to know it serves.
func Catalog(dir, opm, probe, version string) (v1.Image, error) {
	files, err := ociimage.DirFiles(dir, "/configs")
	if err != nil {
		return nil, err
	}
	for src, dest := range map[string]string{opm: "/bin/opm", probe: "/bin/grpc_health_probe"} {
		f, err := ociimage.Executable(src, dest)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	l := labels("database-operator-catalog", version)
	l["operators.operatorframework.io.index.configs.v1"] = "/configs"
	return ociimage.Build(ociimage.Spec{
		Files:      append(files, ociimage.File{Path: "/tmp/", Mode: 0o1777}),
		Entrypoint: []string{"/bin/opm"},
		Cmd:        []string{"serve", "/configs", "--cache-dir=/tmp/cache"},
		User:       NonRoot,
		Labels:     l,
	})
}

// ScorecardTest is a scorecard test image running program (its name the
// test configuration's entrypoint) against the bundle scorecard mounts.
func ScorecardTest(program, name, version string) (v1.Image, error) {
	f, err := ociimage.Executable(program, "/usr/local/bin/"+name)
	if err != nil {
		return nil, err
	}
	return ociimage.Build(ociimage.Spec{
		Files:  []ociimage.File{f},
		Env:    []string{"PATH=/usr/local/bin"},
		User:   NonRoot,
		Labels: labels(name, version),
	})
}
