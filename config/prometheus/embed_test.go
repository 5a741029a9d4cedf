package prometheus

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestNamePrefixIsKustomizes: the operator names the objects it applies as
// the kustomize install does, so the alerts' job label and a user's
// references hold whichever way the operator was installed.
func TestNamePrefixIsKustomizes(t *testing.T) {
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		NamePrefix string `json:"namePrefix"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.NamePrefix != NamePrefix {
		t.Errorf("kustomization.yaml's namePrefix is %q, NamePrefix %q", k.NamePrefix, NamePrefix)
	}
}
