package v1

import (
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestCRDVersionRulesMatchGo keeps the CEL rules in the generated CRD (CEL
// cannot call Go) in step with SupportedVersions and DefaultVersion.
func TestCRDVersionRulesMatchGo(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/example.com_databases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	var supportedRule string
	for _, r := range spec.XValidations {
		if strings.Contains(r.MessageExpression, "is not supported for engine") {
			supportedRule = r.Rule + " " + r.MessageExpression
		}
	}
	if supportedRule == "" {
		t.Fatal("no CEL rule lists the supported versions")
	}
	for _, e := range Engines() {
		versions := SupportedVersions(e)
		if !IsSupportedVersion(e, DefaultVersion(e)) {
			t.Errorf("%s: default version %s is not supported", e, DefaultVersion(e))
		}
		list := "self.version in ['" + strings.Join(versions, "', '") + "']"
		if !strings.Contains(supportedRule, "self.engine == '"+string(e)+"' && "+list) {
			t.Errorf("%s: CEL rule does not list exactly %v:\n%s", e, versions, supportedRule)
		}
		if !strings.Contains(supportedRule, string(e)+" "+strings.Join(versions, ", ")) {
			t.Errorf("%s: CEL message does not list %v", e, versions)
		}
	}
}
