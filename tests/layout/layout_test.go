// Package layout holds the repository's layout to what it claims: internal/
// is what the shipped binaries link, and nothing they link is test or
// development infrastructure.
package layout

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "example.com/database-operator"

// shipped are the binaries that are released: the manager (the operator
// image, also the backup Jobs' program), the project's scorecard tests (the
// scorecard image) and the kubectl plugin (users' machines, through krew).
var shipped = []string{"./cmd", "./scorecard/cmd/database-scorecard", "./cmd/kubectl-database"}

// linked lists every package the shipped binaries link, by import path.
func linked(t *testing.T) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath"}, shipped...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v\n%s", shipped, err, stderr.String())
	}
	deps := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		deps[p.ImportPath] = true
	}
	if len(deps) == 0 {
		t.Fatal("go list printed no packages")
	}
	return deps
}

// internalPackages lists the directories under internal/ that hold a Go
// package (non-test files), as import paths.
func internalPackages(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir("../../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, err := filepath.Rel("../..", filepath.Dir(path))
		if err != nil {
			return err
		}
		seen[module+"/"+filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	if len(pkgs) == 0 {
		t.Fatal("no package found under internal/")
	}
	return pkgs
}

// TestInternalIsWhatShips fails on a package under internal/ that no shipped
// binary links: test support belongs under tests/, release tooling in the
// release module, development tools under hack/.
func TestInternalIsWhatShips(t *testing.T) {
	deps := linked(t)
	for _, p := range internalPackages(t) {
		if !deps[p] {
			t.Errorf("%s is under internal/ but no shipped binary (%v) links it: move it to tests/, hack/ or release/", p, shipped)
		}
	}
}

// TestShippedBinariesLinkNoTestInfrastructure fails when a shipped binary
// links the testing package or anything of the project's tests, development
// tools or release module.
func TestShippedBinariesLinkNoTestInfrastructure(t *testing.T) {
	for p := range linked(t) {
		switch {
		case p == "testing", strings.HasPrefix(p, "testing/"),
			strings.HasPrefix(p, module+"/tests/"),
			strings.HasPrefix(p, module+"/hack/"),
			strings.HasPrefix(p, module+"/release/"):
			t.Errorf("a shipped binary links %s", p)
		}
	}
}
