// Package catalog renders the operator's file-based catalog (FBC) from its
// basic template with operator-registry's library, reading each bundle from
// a local directory instead of pulling its image, and validates the result
// as `opm validate` does. It builds with the containers_image_openpgp tag
// (operator-registry links containers/image).
package catalog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/template"
	"github.com/operator-framework/operator-registry/alpha/template/basic"
	"github.com/operator-framework/operator-registry/pkg/lib/config"
	"sigs.k8s.io/yaml"
)

// BundleDirs maps a bundle image reference to the directory holding its content.
type BundleDirs func(image string) (string, error)

// Render renders the template at path into a declarative config. Every
// bundle keeps its image reference (what a cluster pulls); its content comes
// from the directory dirs names for it.
func Render(ctx context.Context, path string, dirs BundleDirs) (*declcfg.DeclarativeConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	render := func(ctx context.Context, image string) (*declcfg.DeclarativeConfig, error) {
		dir, err := dirs(image)
		if err != nil {
			return nil, err
		}
		cfg, err := action.Render{Refs: []string{dir}, AllowedRefMask: action.RefBundleDir}.Run(ctx)
		if err != nil {
			return nil, fmt.Errorf("rendering bundle %s from %s: %w", image, dir, err)
		}
		for i := range cfg.Bundles {
			cfg.Bundles[i].Image = image
		}
		return cfg, nil
	}
	reg := template.NewRegistry()
	reg.Register(&basic.Factory{})
	tmpl, rest, err := reg.CreateTemplateBySchema(f, render)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tmpl.Render(ctx, rest)
}

// Write writes cfg as YAML to dir/catalog.yaml, replacing what was there.
func Write(cfg *declcfg.DeclarativeConfig, dir string) error {
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(*cfg, &buf); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "catalog.yaml"), buf.Bytes(), 0o644)
}

// Validate checks a catalog directory as `opm validate` does: every blob
// parses, and the packages, channels and upgrade edges form a valid model.
func Validate(ctx context.Context, dir string) error {
	return config.Validate(ctx, os.DirFS(dir))
}

// LocalBundles resolves image references of the form <repo>:v<version>:
// the version being released lives in current (its CSV says which), the
// released ones in released/v<version>.
func LocalBundles(repo, current, currentVersion, released string) BundleDirs {
	return func(image string) (string, error) {
		tag, ok := strings.CutPrefix(image, repo+":v")
		if !ok {
			return "", fmt.Errorf("bundle image %s is not from %s", image, repo)
		}
		if tag == currentVersion {
			v, err := BundleVersion(current)
			if err != nil {
				return "", fmt.Errorf("bundle %s: %w", image, err)
			}
			if v != currentVersion {
				return "", fmt.Errorf("bundle %s: %s holds version %q, not %s: run make bundle", image, current, v, currentVersion)
			}
			return current, nil
		}
		dir := filepath.Join(released, "v"+tag)
		if _, err := os.Stat(filepath.Join(dir, "manifests")); err != nil {
			return "", fmt.Errorf("bundle %s: no released bundle in %s", image, dir)
		}
		return dir, nil
	}
}

// BundleVersion reads the version of the CSV in a bundle directory.
func BundleVersion(dir string) (string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "manifests", "*.clusterserviceversion.yaml"))
	if err != nil {
		return "", fmt.Errorf("looking for the CSV in %s/manifests: %w", dir, err)
	}
	if len(paths) != 1 {
		return "", fmt.Errorf("want one CSV in %s/manifests, found %d", dir, len(paths))
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		return "", err
	}
	var csv struct {
		Spec struct {
			Version string `json:"version"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &csv); err != nil {
		return "", fmt.Errorf("%s: %w", paths[0], err)
	}
	return csv.Spec.Version, nil
}
