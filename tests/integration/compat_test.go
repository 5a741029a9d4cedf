package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"
)

// serverVersion is the API server's release, major.minor.patch, and its
// minor.
func serverVersion(t *testing.T) (string, int) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(testEnv.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		t.Fatalf("server version %+v: minor %q: %v", v, v.Minor, err)
	}
	return strings.TrimPrefix(v.GitVersion, "v"), minor
}

// TestTheRequestedRelease: a run that asks for a Kubernetes release (the
// floor's, `make test-floor`) gets that release, not the default one, and
// the floor is what the bundle claims: the CSV's minKubeVersion is the
// oldest release the tests prove.
func TestTheRequestedRelease(t *testing.T) {
	got, minor := serverVersion(t)
	want := os.Getenv("WANT_KUBE_VERSION")
	t.Logf("API server %s", got)
	if want != "" && got != want {
		t.Fatalf("API server %s, want %s (WANT_KUBE_VERSION)", got, want)
	}
	if os.Getenv("KUBE_FLOOR") == "" {
		return
	}
	b, err := os.ReadFile("../../bundle/manifests/database-operator.clusterserviceversion.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var csv struct {
		Spec struct {
			MinKubeVersion string `json:"minKubeVersion"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &csv); err != nil {
		t.Fatal(err)
	}
	if claimed := csv.Spec.MinKubeVersion; !strings.HasPrefix(claimed, fmt.Sprintf("1.%d.", minor)) {
		t.Errorf("the CSV's minKubeVersion is %s, the floor the tests prove is %s: move one to the other", claimed, got)
	}
}

// TestCELNewerThanTheServerIsRefused: how the floor catches a rule it
// cannot run. The CRDs install on every release these tests start (TestMain
// fails otherwise); a rule that uses a CEL library the server does not
// offer is refused when its CRD is created. The format library came in
// Kubernetes 1.31, and a new rule may use it from 1.32 (a server compiles
// new rules against its previous release's environment, so a rollback
// keeps them valid): `!format.dns1035Label().validate(self.name).hasValue()`,
// the natural form of the Database's name rule, would move the floor from
// 1.30 to 1.32, and the floor run refuses it here.
func TestCELNewerThanTheServerIsRefused(t *testing.T) {
	_, minor := serverVersion(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "floorprobes.probe.example.com"},
		"spec": map[string]any{
			"group": "probe.example.com",
			"names": map[string]any{"plural": "floorprobes", "singular": "floorprobe", "kind": "FloorProbe", "listKind": "FloorProbeList"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":       "object",
					"properties": map[string]any{"spec": map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": int64(63)}}}},
					"x-kubernetes-validations": []any{map[string]any{
						"rule":    "!has(self.spec) || !has(self.spec.name) || !format.dns1035Label().validate(self.spec.name).hasValue()",
						"message": "spec.name must be a DNS-1035 label",
					}},
				}},
			}},
		},
	}}
	err := testEnv.client.Create(ctx, crd)
	if err == nil {
		t.Cleanup(func() { _ = testEnv.client.Delete(context.Background(), crd) })
	}
	switch {
	case minor < 32 && err == nil:
		t.Fatalf("Kubernetes 1.%d accepted a rule using the format library, which it does not offer to new rules", minor)
	case minor < 32 && !strings.Contains(err.Error(), "format"):
		t.Fatalf("Kubernetes 1.%d refused the rule, but not for the format library: %v", minor, err)
	case minor < 32:
		t.Logf("Kubernetes 1.%d refuses it, as the floor run would: %v", minor, err)
	case err != nil:
		t.Fatalf("Kubernetes 1.%d refused a rule using the format library: %v", minor, err)
	}
}
