// Package ociimage builds container images in Go, with no container engine:
// an image is one layer of files on an empty base plus its configuration
// (entrypoint, user, labels), reproducible byte for byte (fixed times and
// owners); images of one program for several platforms go into an image
// index. Images and indexes are written as an OCI image layout or pushed to
// a registry.
package ociimage

import (
	"archive/tar"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image's filesystem. A Path ending in "/" is a
// directory.
type File struct {
	Path string // absolute, in the image
	Mode int64
	Data []byte
}

// Spec describes an image.
type Spec struct {
	Files      []File
	Entrypoint []string
	Cmd        []string
	User       string // "uid:gid"
	WorkingDir string
	Env        []string
	Labels     map[string]string
	// Arch is the architecture the image's programs run on (GOARCH
	// spelling, as OCI's); empty: this machine's. The OS is linux.
	Arch string
}

// Build makes the image: one layer with the files, on an empty base.
func Build(spec Spec) (v1.Image, error) {
	layerTar, err := tarFiles(spec.Files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", cmp.Or(spec.Arch, runtime.GOARCH)
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint, cf.Config.Cmd = spec.Entrypoint, spec.Cmd
	cf.Config.User, cf.Config.WorkingDir = spec.User, spec.WorkingDir
	cf.Config.Env, cf.Config.Labels = spec.Env, spec.Labels
	return mutate.ConfigFile(img, cf)
}

// tarFiles writes the files, and every parent directory, as a tar stream
// in path order with fixed times and root ownership.
func tarFiles(files []File) ([]byte, error) {
	entries := map[string]File{}
	for _, f := range files {
		if !strings.HasPrefix(f.Path, "/") {
			return nil, fmt.Errorf("image path %q is not absolute", f.Path)
		}
		entries[f.Path] = f
		for dir := path.Dir(strings.TrimSuffix(f.Path, "/")); dir != "/"; dir = path.Dir(dir) {
			if _, ok := entries[dir+"/"]; !ok {
				entries[dir+"/"] = File{Path: dir + "/", Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := entries[p]
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: f.Mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if strings.HasSuffix(p, "/") {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DirFiles reads a directory tree into files under dest in the image.
func DirFiles(src, dest string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: path.Join(dest, filepath.ToSlash(rel)), Mode: 0o644, Data: b})
		return nil
	})
	return files, err
}

// Executable reads a program into the image at dest, mode 0755.
func Executable(src, dest string) (File, error) {
	b, err := os.ReadFile(src)
	return File{Path: dest, Mode: 0o755, Data: b}, err
}

// Index is an OCI image index of imgs, each described by the platform its
// configuration names, in the order given (the first is what a client
// without a platform preference pulls). Two images for one platform are
// refused.
func Index(imgs ...v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture}
		if seen[p.String()] {
			return nil, fmt.Errorf("two images for platform %s", p.String())
		}
		seen[p.String()] = true
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// Artifact is what a release writes: a v1.Image or a v1.ImageIndex.
type Artifact interface {
	Digest() (v1.Hash, error)
}

// WriteLayout writes the artifacts into an OCI image layout at dir, each
// annotated with its reference (org.opencontainers.image.ref.name).
func WriteLayout(dir string, artifacts map[string]Artifact) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	refs := make([]string, 0, len(artifacts))
	for ref := range artifacts {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	for _, ref := range refs {
		opt := layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})
		switch a := artifacts[ref].(type) {
		case v1.ImageIndex:
			err = p.AppendIndex(a, opt)
		case v1.Image:
			err = p.AppendImage(a, opt)
		default:
			err = fmt.Errorf("%T is neither an image nor an index", a)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
	}
	return nil
}

// Push writes the artifact to ref; insecure allows a plain-HTTP registry
// (the in-process one on loopback in tests). Credentials come from the
// Docker configuration (~/.docker/config.json, as CI's login writes it);
// without one the push is anonymous.
func Push(a Artifact, ref string, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return err
	}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	switch a := a.(type) {
	case v1.ImageIndex:
		return remote.WriteIndex(r, a, auth)
	case v1.Image:
		return remote.Write(r, a, auth)
	}
	return fmt.Errorf("%T is neither an image nor an index", a)
}
