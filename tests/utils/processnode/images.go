package processnode

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
)

// Image says how the node runs containers of one image without pulling it:
// the container's root filesystem is the host's (seen through an overlay,
// so writes stay in the container), plus what the image itself would bring
// and the host lacks.
type Image struct {
	// Path is put before the host's PATH (the image's binaries).
	Path []string
	// Env is the image's own environment (ENV in its Dockerfile).
	Env map[string]string
	// Files are written into the container's root filesystem, with their
	// modes: the parts of the image the node stands in for (an entrypoint
	// script, a configuration directory).
	Files map[string]File
	// Users are passwd entries the image has (name:uid:gid:home) that the
	// host may lack, e.g. the postgres user with uid 999.
	Users []string
	// Binds are host files or directories bind-mounted read-only into the
	// container (container path -> host path): an image's own program
	// that is built on the host, e.g. the operator's manager binary.
	Binds map[string]string
	// Requires lists host files without which the image cannot run here
	// (the Debian package that provides the server); a pod of an image
	// whose requirement is missing fails with a reason naming it.
	Requires []string
	// StopSignal is the image's STOPSIGNAL (default SIGTERM), sent to the
	// container's main process when it is stopped.
	StopSignal syscall.Signal
}

// File is one file an Image stands in for.
type File struct {
	Mode    os.FileMode
	Content string
}

// Images maps image references to what runs them. A key matches an image
// whose repository ends with the key's repository (any registry and
// "library/" prefix) and whose tag starts with the key's tag ("postgres:15"
// matches "postgres:15", "postgres:15.8" and "postgres:15-bookworm", not
// "postgres:16"). A key without a tag matches every tag.
type Images map[string]Image

// lookup finds the Image for a reference, or explains why there is none.
func (m Images) lookup(ref string) (Image, error) {
	repo, tag := splitRef(ref)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Longest key first: the most specific wins.
	sort.SliceStable(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		krepo, ktag := splitRef(k)
		if repo != krepo && !strings.HasSuffix(repo, "/"+krepo) {
			continue
		}
		if ktag != "" && tag != ktag && !strings.HasPrefix(tag, ktag+".") && !strings.HasPrefix(tag, ktag+"-") {
			continue
		}
		img := m[k]
		for _, f := range img.Requires {
			if _, err := os.Stat(f); err != nil {
				return Image{}, fmt.Errorf("image %s runs from the host's %s, which is not installed", ref, f)
			}
		}
		return img, nil
	}
	return Image{}, fmt.Errorf("image %s has no local match on this node (it runs: %s)", ref, strings.Join(keys, ", "))
}

// splitRef returns an image reference's repository (without registry host
// and "library/") and tag ("" when none; a digest counts as no tag).
func splitRef(ref string) (repo, tag string) {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	parts := strings.Split(ref, "/")
	if len(parts) > 1 && strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost" && len(parts) > 1 {
		parts = parts[1:]
	}
	if len(parts) > 1 && parts[0] == "library" {
		parts = parts[1:]
	}
	return path.Join(parts...), tag
}
