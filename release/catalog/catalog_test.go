package catalog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
)

const repo = "example.com/database-operator/bundle"

func root(p string) string { return filepath.Join("..", "..", p) }

func currentVersion(t *testing.T) string {
	t.Helper()
	v, err := BundleVersion(root("bundle"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func renderProject(t *testing.T) *declcfg.DeclarativeConfig {
	t.Helper()
	cfg, err := Render(context.Background(), root("config/catalog/template.yaml"),
		LocalBundles(repo, root("bundle"), currentVersion(t), root("config/catalog/bundles")))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestProjectCatalog: the template renders to stable and candidate
// channels that upgrade v0.1.0 to v0.2.0, the newer bundle's CRD differs
// from the older one's, and the result validates as opm validates it.
func TestProjectCatalog(t *testing.T) {
	cfg := renderProject(t)
	if len(cfg.Packages) != 1 || cfg.Packages[0].DefaultChannel != "stable" {
		t.Fatalf("packages %+v", cfg.Packages)
	}
	channels := map[string]declcfg.Channel{}
	for _, c := range cfg.Channels {
		channels[c.Name] = c
	}
	for _, name := range []string{"stable", "candidate"} {
		c, ok := channels[name]
		if !ok {
			t.Fatalf("no %s channel", name)
		}
		var edge bool
		for _, e := range c.Entries {
			if e.Name == "database-operator.v0.2.0" && e.Replaces == "database-operator.v0.1.0" && e.SkipRange != "" {
				edge = true
			}
		}
		if !edge {
			t.Errorf("%s: no upgrade edge from v0.1.0 to v0.2.0: %+v", name, c.Entries)
		}
	}
	crds := map[string]string{}
	for _, b := range cfg.Bundles {
		if !strings.HasPrefix(b.Image, repo+":v") {
			t.Errorf("bundle %s has image %q", b.Name, b.Image)
		}
		for _, o := range b.Objects {
			if strings.Contains(o, `"kind":"CustomResourceDefinition"`) {
				crds[b.Name] = o
			}
		}
	}
	older, newer := crds["database-operator.v0.1.0"], crds["database-operator.v0.2.0"]
	if older == "" || newer == "" || older == newer || strings.Contains(older, "maxLag") || !strings.Contains(newer, "maxLag") {
		t.Errorf("the newer bundle should change the CRD (add maxLag): older has it %v, newer has it %v",
			strings.Contains(older, "maxLag"), strings.Contains(newer, "maxLag"))
	}
	dir := t.TempDir()
	if err := Write(cfg, filepath.Join(dir, "database-operator")); err != nil {
		t.Fatal(err)
	}
	if err := Validate(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	// The committed catalog is what this renders (make catalog keeps it so).
	committed, _ := os.ReadFile(root("catalog/database-operator/catalog.yaml"))
	fresh, _ := os.ReadFile(filepath.Join(dir, "database-operator", "catalog.yaml"))
	if string(committed) != string(fresh) {
		t.Error("catalog/ is stale: run make catalog")
	}
}

func TestRenderRefusesUnknownBundles(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "t.yaml")
	write(t, tmpl, `schema: olm.template.basic
entries:
  - {schema: olm.package, name: database-operator, defaultChannel: stable}
  - {schema: olm.channel, package: database-operator, name: stable, entries: [{name: database-operator.v9.9.9}]}
  - {schema: olm.bundle, image: `+repo+`:v9.9.9}
`)
	_, err := Render(context.Background(), tmpl, LocalBundles(repo, root("bundle"), currentVersion(t), root("config/catalog/bundles")))
	if err == nil || !strings.Contains(err.Error(), "no released bundle") {
		t.Errorf("a bundle with no content: %v", err)
	}
	// bundle/ generated for another version than the one being released.
	if _, err := LocalBundles(repo, root("bundle"), "9.9.9", "")(repo + ":v9.9.9"); err == nil || !strings.Contains(err.Error(), "run make bundle") {
		t.Errorf("a stale bundle/: %v", err)
	}
	_, err = LocalBundles(repo, "", "0.2.0", "")("elsewhere/bundle:v0.2.0")
	if err == nil || !strings.Contains(err.Error(), "is not from") {
		t.Errorf("a foreign image: %v", err)
	}
}

func TestValidateRefusesBrokenEdges(t *testing.T) {
	cfg := renderProject(t)
	for i := range cfg.Channels {
		for j := range cfg.Channels[i].Entries {
			if cfg.Channels[i].Entries[j].Replaces != "" {
				cfg.Channels[i].Entries[j].Replaces = "database-operator.v0.0.9"
			}
		}
	}
	cfg.Channels[0].Entries = cfg.Channels[0].Entries[1:] // v0.1.0 no longer in the channel
	dir := t.TempDir()
	if err := Write(cfg, filepath.Join(dir, "database-operator")); err != nil {
		t.Fatal(err)
	}
	if err := Validate(context.Background(), dir); err == nil || !strings.Contains(err.Error(), `invalid channel "stable"`) {
		t.Errorf("a channel with a broken upgrade graph: %v", err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
