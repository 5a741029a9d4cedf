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
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

func TestManagerImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd")
	cmd.Dir, cmd.Env = root("."), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the manager: %v\n%s", err, out)
	}
	img, err := images.Manager(bin, version)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != images.NonRoot || strings.HasPrefix(cf.Config.User, "0") {
		t.Errorf("runs as %q, want non-root %s", cf.Config.User, images.NonRoot)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/manager" || cf.OS != "linux" {
		t.Errorf("config %+v", cf.Config)
	}
	fs := files(t, img)
	if len(fs) != 1 || fs["/manager"] == nil || fs["/manager"].Mode&0o111 == 0 {
		t.Fatalf("image files %v: want only an executable /manager (from scratch)", fs)
	}
	// Static: no program interpreter, so it runs on an empty base.
	f, err := elf.NewFile(bytes.NewReader(readFile(t, img, "/manager")))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the manager binary is dynamically linked")
		}
	}
	// Reproducible: the same binary gives the same digest.
	again, _ := images.Manager(bin, version)
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds differ: %s, %s", d1, d2)
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

	bundle, err := images.Bundle(root("bundle"))
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := images.Catalog(root("catalog"), filepath.Join(sdk, "opm"), filepath.Join(sdk, "grpc_health_probe"), version)
	if err != nil {
		t.Fatal(err)
	}
	bundleRef, catalogRef := host+"/database-operator/bundle:v"+version, host+"/database-operator/catalog:v"+version
	for ref, img := range map[string]v1.Image{bundleRef: bundle, catalogRef: catalog} {
		if err := ociimage.Push(img, ref, true); err != nil {
			t.Fatal(err)
		}
	}
	// Also as an OCI layout, what `make images` writes.
	if err := ociimage.WriteLayout(filepath.Join(t.TempDir(), "oci"), map[string]v1.Image{bundleRef: bundle}); err != nil {
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

	// The catalog comes back from the registry with the catalog and opm.
	r, err := name.ParseReference(catalogRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := os.ReadFile(root("catalog/database-operator/catalog.yaml"))
	if got := readFile(t, pulled, "/configs/database-operator/catalog.yaml"); !bytes.Equal(got, committed) {
		t.Error("the catalog image's catalog differs from catalog/")
	}
	// OLM probes catalog pods with grpc_health_probe: it must be there.
	if fs := files(t, pulled); fs["/bin/grpc_health_probe"] == nil || fs["/bin/opm"] == nil {
		t.Error("the catalog image lacks /bin/opm or /bin/grpc_health_probe")
	}
	cf, _ := pulled.ConfigFile()
	if cf.Config.Labels["operators.operatorframework.io.index.configs.v1"] != "/configs" || cf.Config.Entrypoint[0] != "/bin/opm" {
		t.Errorf("catalog image config %+v", cf.Config)
	}
	bcf, _ := bundle.ConfigFile()
	if bcf.Config.Labels["operators.operatorframework.io.bundle.package.v1"] != "database-operator" {
		t.Errorf("bundle labels %v", bcf.Config.Labels)
	}
}
