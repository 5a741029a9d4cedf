// Command catalog renders the file-based catalog from its template
// (config/catalog/template.yaml) into catalog/database-operator/ and
// validates the whole catalog directory. `make catalog` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"example.com/database-operator/release/catalog"
)

func main() {
	var (
		tmpl     = flag.String("template", "config/catalog/template.yaml", "basic template of the catalog")
		repo     = flag.String("bundle-repo", "example.com/database-operator/bundle", "image repository of the bundles")
		current  = flag.String("bundle", "bundle", "bundle directory of the version being released")
		version  = flag.String("version", "", "version of that bundle (x.y.z)")
		released = flag.String("released", "config/catalog/bundles", "directory with the released bundles, one v<version> directory each")
		out      = flag.String("out", "catalog", "catalog directory; the package goes to <out>/database-operator")
	)
	flag.Parse()
	if err := run(context.Background(), *tmpl, *repo, *current, *version, *released, *out); err != nil {
		fmt.Fprintln(os.Stderr, "catalog:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, tmpl, repo, current, version, released, out string) error {
	if version == "" {
		return fmt.Errorf("-version is required")
	}
	cfg, err := catalog.Render(ctx, tmpl, catalog.LocalBundles(repo, current, version, released))
	if err != nil {
		return err
	}
	if err := catalog.Write(cfg, filepath.Join(out, "database-operator")); err != nil {
		return err
	}
	if err := catalog.Validate(ctx, out); err != nil {
		return fmt.Errorf("the rendered catalog is invalid: %w", err)
	}
	fmt.Printf("catalog: %s/database-operator/catalog.yaml: %d bundles, %d channels\n", out, len(cfg.Bundles), len(cfg.Channels))
	return nil
}
