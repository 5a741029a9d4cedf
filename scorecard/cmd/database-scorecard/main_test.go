package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
)

const csvPath = "manifests/database-operator.clusterserviceversion.yaml"

// bundleCopy copies the project's bundle into a temp dir, with edit applied
// to the CSV's text.
func bundleCopy(t *testing.T, edit func(string) string) string {
	t.Helper()
	src, dst := filepath.Join("..", "..", "..", "bundle"), t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == csvPath {
			b = []byte(edit(string(b)))
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func result(t *testing.T, root, test string) scapi.TestResult {
	t.Helper()
	st := run(root, []string{test})
	if len(st.Results) != 1 {
		t.Fatalf("%d results", len(st.Results))
	}
	return st.Results[0]
}

func TestProjectBundlePasses(t *testing.T) {
	root := bundleCopy(t, func(s string) string { return s })
	for name := range tests {
		if r := result(t, root, name); r.State != scapi.PassState {
			t.Errorf("%s: %s %v", name, r.State, r.Errors)
		}
	}
}

func TestBadBundlesFail(t *testing.T) {
	for _, tc := range []struct {
		test, from, to, want string
	}{
		{"samples-valid", `"version": "15"`, `"version": "99"`, "not supported"},
		{"samples-valid", `"replicas": 3`, `"replicas": 11`, "replicas"},
		{"samples-valid", `"schedule": "0 3 * * *"`, `"schedule": "0 25 * * *"`, "not a valid cron expression"},
		{"samples-valid", `"kind": "Backup"`, `"kind": "Snapshot"`, "which no CRD of the bundle serves"},
		{"csv-related-images", "name: postgresql-16", "name: postgresql-sixteen", "no postgresql-16"},
		{"csv-related-images", "- image: example.com/database-operator/manager:v0.2.0", "- image: example.com/database-operator/manager:v9", "not the image the CSV deploys"},
	} {
		root := bundleCopy(t, func(s string) string {
			if !strings.Contains(s, tc.from) {
				t.Fatalf("the CSV has no %q", tc.from)
			}
			return strings.Replace(s, tc.from, tc.to, 1)
		})
		r := result(t, root, tc.test)
		if r.State != scapi.FailState || !strings.Contains(strings.Join(r.Errors, "\n"), tc.want) {
			t.Errorf("%s with %s: %s %v, want a failure saying %q", tc.test, tc.to, r.State, r.Errors, tc.want)
		}
	}
	if r := result(t, t.TempDir(), "samples-valid"); r.State != scapi.ErrorState {
		t.Errorf("an empty bundle directory: %s", r.State)
	}
}
