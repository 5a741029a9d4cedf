// Package images_test builds the project's images in Go, checks what they
// hold, pushes them to an in-process registry on loopback and has opm
// render the bundle image from it, as a catalog build would.
package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"example.com/database-operator/release/images"
	"example.com/database-operator/release/ociimage"
)

const version = "0.2.0"

func root(p string) string { return filepath.Join("..", "..", "..", p) }

func sdkBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SDK_BIN")
	if dir == "" {
		t.Fatal("SDK_BIN is not set (the directory of opm and scorecard-test): run these tests with `make test-images`")
	}
	return dir
}

// files reads an image's filesystem (one layer) into path -> header, data.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
}

func readFile(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the image: %v", path, err)
		}
		if "/"+h.Name == path {
			b, _ := io.ReadAll(tr)
			return b
		}
	}
}

// platforms are the architectures these tests build the images for: this
// machine's, or every one of images.Platforms with IMAGES_ALL_PLATFORMS=1
// (make test-images-full). Cross-compiling the manager and opm is minutes
// of a cold CI run, and the index is proven the same way for one platform
// as for two.
func platforms() []string {
	if os.Getenv("IMAGES_ALL_PLATFORMS") == "1" {
		return images.Platforms
	}
	return []string{runtime.GOARCH}
}

// buildManager builds the manager for linux/arch as `make build-platforms`
// does.
func buildManager(t *testing.T, arch string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "manager-linux-"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", bin, "./cmd")
	cmd.Dir, cmd.Env = root("."), append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the manager for %s: %v\n%s", arch, err, out)
	}
	return bin
}

// TestManagerImage: the operator image is an index of one image per
// platform (linux/amd64 and linux/arm64 in a release), each holding only a
// static /manager built for its platform (read from the ELF header),
// non-root; the same binaries give the same index digest; a registry serves
// it as a manifest list with every platform; a binary given for the wrong
// platform is refused, and so is a release missing one.
func TestManagerImage(t *testing.T) {
	binaries := map[string]string{}
	for _, arch := range platforms() {
		binaries[arch] = buildManager(t, arch)
	}
	idx, err := images.Manager(binaries, version, platforms()...)
	if err != nil {
		t.Fatal(err)
	}
	checkPlatforms(t, idx)

	// Reproducible: the same binaries give the same digest.
	again, err := images.Manager(binaries, version, platforms()...)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds differ: %s, %s", d1, d2)
	}

	// Through a registry: what a cluster's runtime reads.
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/database-operator/manager:v" + version
	if err := ociimage.Push(idx, ref, true); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r)
	if err != nil {
		t.Fatal(err)
	}
	if !desc.MediaType.IsIndex() || desc.Digest != d1 {
		t.Fatalf("the registry serves %s %s, want the index %s", desc.MediaType, desc.Digest, d1)
	}
	pulled, err := desc.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	checkPlatforms(t, pulled)

	// A binary for another platform is refused, never mislabelled.
	host := binaries[runtime.GOARCH]
	for _, arch := range images.Platforms {
		if arch == runtime.GOARCH {
			continue
		}
		if _, err := images.Manager(map[string]string{runtime.GOARCH: host, arch: host}, version); err == nil || !strings.Contains(err.Error(), "not linux/"+arch) {
			t.Errorf("a linux/%s binary given for %s: %v, want it refused", runtime.GOARCH, arch, err)
		}
		// A release (every platform) missing one is refused.
		if _, err := images.Manager(map[string]string{runtime.GOARCH: host}, version); err == nil || !strings.Contains(err.Error(), "no build of /manager for linux/"+arch) {
			t.Errorf("no %s binary: %v, want it refused", arch, err)
		}
	}
	if _, err := images.Manager(binaries, version, "s390x"); err == nil || !strings.Contains(err.Error(), "not a platform") {
		t.Errorf("an unknown platform: %v, want it refused", err)
	}
}

// byPlatform is idx's images by architecture: one per architecture of
// Platforms, linux, the manifest list and each image's configuration
// agreeing.
func byPlatform(t *testing.T, idx v1.ImageIndex) map[string]v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]v1.Image{}
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Fatalf("manifest %s: platform %v, want linux", d.Digest, d.Platform)
		}
		arch := d.Platform.Architecture
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("%s: configuration says %s/%s", arch, cf.OS, cf.Architecture)
		}
		out[arch] = img
	}
	if got := slices.Sorted(maps.Keys(out)); !slices.Equal(got, platforms()) || len(m.Manifests) != len(platforms()) {
		t.Fatalf("the index holds %d manifests for %v, want one for each of %v", len(m.Manifests), got, platforms())
	}
	return out
}

// checkMachine reads the ELF headers of the programs at paths in img: each
// must be a static 64-bit binary for machine (no program interpreter, so
// it runs on an empty base).
func checkMachine(t *testing.T, img v1.Image, machine elf.Machine, paths ...string) {
	t.Helper()
	for _, path := range paths {
		f, err := elf.NewFile(bytes.NewReader(readFile(t, img, path)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if f.Machine != machine || f.Class != elf.ELFCLASS64 {
			t.Errorf("%s is %s %s, want %s", path, f.Class, f.Machine, machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", path)
			}
		}
	}
}

var machineOf = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkPlatforms: idx holds one image per platform, each only a static,
// non-root /manager whose ELF machine is the platform's.
func checkPlatforms(t *testing.T, idx v1.ImageIndex) {
	t.Helper()
	for arch, img := range byPlatform(t, idx) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != images.NonRoot || strings.HasPrefix(cf.Config.User, "0") {
			t.Errorf("%s: runs as %q, want non-root %s", arch, cf.Config.User, images.NonRoot)
		}
		if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/manager" {
			t.Errorf("%s: config %+v", arch, cf.Config)
		}
		fs := files(t, img)
		if len(fs) != 1 || fs["/manager"] == nil || fs["/manager"].Mode&0o111 == 0 {
			t.Fatalf("%s: image files %v: want only an executable /manager (from scratch)", arch, fs)
		}
		checkMachine(t, img, machineOf[arch], "/manager")
	}
}

// TestBundleAndCatalogThroughARegistry pushes the bundle and catalog images
// to a registry on loopback; opm renders the bundle image from it to the
// same bundle as the directory, and the catalog image holds the catalog.
func TestBundleAndCatalogThroughARegistry(t *testing.T) {
	sdk := sdkBin(t)
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	bundle, err := images.Bundle(root("bundle"), platforms()...)
	if err != nil {
		t.Fatal(err)
	}
	tools := func(program string) map[string]string {
		builds := map[string]string{runtime.GOARCH: filepath.Join(sdk, program)}
		for _, arch := range platforms() {
			if arch != runtime.GOARCH {
				builds[arch] = filepath.Join(sdk, "linux-"+arch, program)
			}
		}
		return builds
	}
	catalog, err := images.Catalog(root("catalog"), tools("opm"), tools("grpc_health_probe"), version, platforms()...)
	if err != nil {
		t.Fatal(err)
	}
	bundleRef, catalogRef := host+"/database-operator/bundle:v"+version, host+"/database-operator/catalog:v"+version
	for ref, img := range map[string]ociimage.Artifact{bundleRef: bundle, catalogRef: catalog} {
		if err := ociimage.Push(img, ref, true); err != nil {
			t.Fatal(err)
		}
	}
	// Also as an OCI layout, what `make images` writes.
	if err := ociimage.WriteLayout(filepath.Join(t.TempDir(), "oci"), map[string]ociimage.Artifact{bundleRef: bundle}); err != nil {
		t.Fatal(err)
	}

	home := t.TempDir() // opm's image library reads its signature policy from $HOME
	policy := filepath.Join(home, ".config", "containers", "policy.json")
	if err := os.MkdirAll(filepath.Dir(policy), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(sdk, "opm"), "render", bundleRef, "--use-http", "-o", "json")
	cmd.Env = append(os.Environ(), "HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("opm render %s: %v\n%s", bundleRef, err, stderr.String())
	}
	var fromImage declcfg.Bundle
	if err := json.Unmarshal(out, &fromImage); err != nil {
		t.Fatalf("opm render output: %v\n%s", err, out)
	}
	fromDir, err := action.Render{Refs: []string{root("bundle")}, AllowedRefMask: action.RefBundleDir}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := fromDir.Bundles[0]
	if fromImage.Name != want.Name || fromImage.Image != bundleRef || fromImage.Package != "database-operator" {
		t.Errorf("rendered %s (%s) from the image, want %s", fromImage.Name, fromImage.Image, want.Name)
	}
	// The same package, version and APIs (an image render describes the CSV
	// by its metadata, a directory render embeds the objects).
	props := func(b declcfg.Bundle) map[string]string {
		m := map[string]string{}
		for _, p := range b.Properties {
			if p.Type == "olm.package" || p.Type == "olm.gvk" {
				var c bytes.Buffer
				_ = json.Compact(&c, p.Value)
				m[p.Type] = c.String()
			}
		}
		return m
	}
	if got, want := props(fromImage), props(want); len(got) != 2 || got["olm.package"] != want["olm.package"] || got["olm.gvk"] != want["olm.gvk"] {
		t.Errorf("the image renders %v, the directory %v", got, want)
	}

	// The catalog comes back from the registry, for each platform, with
	// the catalog, and opm and grpc_health_probe built for that platform
	// (OLM probes catalog pods with grpc_health_probe: it must be there).
	r, err := name.ParseReference(catalogRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := os.ReadFile(root("catalog/database-operator/catalog.yaml"))
	for arch, img := range byPlatform(t, pulled) {
		if got := readFile(t, img, "/configs/database-operator/catalog.yaml"); !bytes.Equal(got, committed) {
			t.Errorf("%s: the catalog image's catalog differs from catalog/", arch)
		}
		checkMachine(t, img, machineOf[arch], "/bin/opm", "/bin/grpc_health_probe")
		cf, _ := img.ConfigFile()
		if cf.Config.Labels["operators.operatorframework.io.index.configs.v1"] != "/configs" || cf.Config.Entrypoint[0] != "/bin/opm" {
			t.Errorf("%s: catalog image config %+v", arch, cf.Config)
		}
	}
	// The bundle: the same files and labels for each platform.
	var layers []v1.Hash
	for arch, img := range byPlatform(t, bundle) {
		cf, _ := img.ConfigFile()
		if cf.Config.Labels["operators.operatorframework.io.bundle.package.v1"] != "database-operator" {
			t.Errorf("%s: bundle labels %v", arch, cf.Config.Labels)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("%s: bundle layers %v (%v)", arch, ls, err)
		}
		d, _ := ls[0].Digest()
		layers = append(layers, d)
	}
	if len(layers) != len(platforms()) || len(slices.Compact(slices.Clone(layers))) != 1 {
		t.Errorf("the bundle's platforms hold different files: %v", layers)
	}
}
