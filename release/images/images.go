// Package images defines the project's container images, built in Go by
// release/ociimage: the operator (a static binary on an empty base,
// non-root), the OLM bundle, the file-based catalog (served by opm) and the
// scorecard test images. The first three are indexes of a linux/amd64 and a
// linux/arm64 image. `make images` writes them as an OCI layout.
package images

import (
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

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

// Platforms are the architectures the manager image is built for (linux).
var Platforms = []string{"amd64", "arm64"}

// elfMachine is the ELF machine of a binary for each architecture of
// Platforms.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// perPlatform is an index of one image per architecture of platforms
// (Platforms when none is named), each made by build.
func perPlatform(platforms []string, build func(arch string) (v1.Image, error)) (v1.ImageIndex, error) {
	if len(platforms) == 0 {
		platforms = Platforms
	}
	var imgs []v1.Image
	for _, arch := range platforms {
		if _, ok := elfMachine[arch]; !ok {
			return nil, fmt.Errorf("linux/%s is not a platform of the images (%v)", arch, Platforms)
		}
		img, err := build(arch)
		if err != nil {
			return nil, fmt.Errorf("linux/%s: %w", arch, err)
		}
		imgs = append(imgs, img)
	}
	return ociimage.Index(imgs...)
}

// executables reads each program of paths (image path -> the program's
// build for each architecture) for arch, checking that its ELF header
// names arch: an index never mislabels a binary.
func executables(paths map[string]map[string]string, arch string) ([]ociimage.File, error) {
	var files []ociimage.File
	for _, dest := range slices.Sorted(maps.Keys(paths)) {
		src, ok := paths[dest][arch]
		if !ok {
			return nil, fmt.Errorf("no build of %s for linux/%s", dest, arch)
		}
		if err := checkMachine(src, arch); err != nil {
			return nil, err
		}
		f, err := ociimage.Executable(src, dest)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// Manager is the operator image: the static manager binary, run as a
// non-root user, as an index of one image per architecture of platforms
// (every one of Platforms, as a release builds it, when none is named: the
// tests name this machine's alone). binaries maps each to its build.
func Manager(binaries map[string]string, version string, platforms ...string) (v1.ImageIndex, error) {
	return perPlatform(platforms, func(arch string) (v1.Image, error) {
		files, err := executables(map[string]map[string]string{"/manager": binaries}, arch)
		if err != nil {
			return nil, err
		}
		return ociimage.Build(ociimage.Spec{
			Files:      files,
			Entrypoint: []string{"/manager"},
			User:       NonRoot,
			Labels:     labels("database-operator", version),
			Arch:       arch,
		})
	})
}

// checkMachine: path is a linux ELF binary for arch.
func checkMachine(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("binary for linux/%s: %w", arch, err)
	}
	defer f.Close()
	if f.Machine != elfMachine[arch] {
		return fmt.Errorf("%s is built for %s, not linux/%s", path, f.Machine, arch)
	}
	return nil
}

// Bundle is the OLM bundle image: the bundle directory's manifests,
// metadata and scorecard configuration at the paths its annotations name,
// with those annotations as labels (what bundle.Dockerfile does). It holds
// no program, but a runtime pulls it for its node's platform (OLM's unpack
// Job), so it is an index of the same files for each of platforms
// (Platforms when none is named).
func Bundle(dir string, platforms ...string) (v1.ImageIndex, error) {
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
	return perPlatform(platforms, func(arch string) (v1.Image, error) {
		return ociimage.Build(ociimage.Spec{Files: files, Labels: meta.Annotations, Arch: arch})
	})
}

// Catalog is the file-based catalog image: the catalog under /configs,
// served by opm over gRPC, with grpc_health_probe, which OLM runs in the
// catalog pod to know it serves; an index of one image per architecture of
// platforms (Platforms when none is named), opm and probe each mapping an
// architecture to its build.
func Catalog(dir string, opm, probe map[string]string, version string, platforms ...string) (v1.ImageIndex, error) {
	configs, err := ociimage.DirFiles(dir, "/configs")
	if err != nil {
		return nil, err
	}
	l := labels("database-operator-catalog", version)
	l["operators.operatorframework.io.index.configs.v1"] = "/configs"
	return perPlatform(platforms, func(arch string) (v1.Image, error) {
		bins, err := executables(map[string]map[string]string{"/bin/opm": opm, "/bin/grpc_health_probe": probe}, arch)
		if err != nil {
			return nil, err
		}
		files := append(slices.Clone(configs), bins...)
		return ociimage.Build(ociimage.Spec{
			Files:      append(files, ociimage.File{Path: "/tmp/", Mode: 0o1777}),
			Entrypoint: []string{"/bin/opm"},
			Cmd:        []string{"serve", "/configs", "--cache-dir=/tmp/cache"},
			User:       NonRoot,
			Labels:     l,
			Arch:       arch,
		})
	})
}

// ScorecardTest is a scorecard test image running program (its name the
// test configuration's entrypoint) against the bundle scorecard mounts:
// linux/amd64 only (operator-sdk's scorecard-test is built for this
// machine alone).
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
