package layout

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMinKubeVersionIsTheFloor: the CSV's minKubeVersion (OLM refuses to
// install the operator on older clusters) names the minor release the
// floor runs prove, hack/tools/kube-floor's Kubernetes (`make test-floor`
// and `make test-floor-full`, in the full tier: building that release
// takes 8 minutes of a cold CI run).
func TestMinKubeVersionIsTheFloor(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile("../../" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	floor := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes v(1\.[0-9]+)\.[0-9]+`).FindStringSubmatch(read("hack/tools/kube-floor/go.mod"))
	if floor == nil {
		t.Fatal("hack/tools/kube-floor/go.mod requires no k8s.io/kubernetes release")
	}
	for _, csv := range []string{"config/manifests/bases/database-operator.clusterserviceversion.yaml", "bundle/manifests/database-operator.clusterserviceversion.yaml"} {
		claimed := regexp.MustCompile(`(?m)^\s*minKubeVersion: (\S+)`).FindStringSubmatch(read(csv))
		if claimed == nil || !strings.HasPrefix(claimed[1], floor[1]+".") {
			t.Errorf("%s: minKubeVersion %v, the floor the tests prove is Kubernetes %s (hack/tools/kube-floor): move one to the other", csv, claimed, floor[1])
		}
	}
}
