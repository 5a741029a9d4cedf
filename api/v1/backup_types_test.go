package v1

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/robfig/cron/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestCronPatternMatchesParser checks the schedule rule against the cron
// parser the operator schedules with: what the API server accepts, the
// operator can run, and the usual mistakes are refused up front.
func TestCronPatternMatchesParser(t *testing.T) {
	re := regexp.MustCompile(CronSchedulePattern)
	parser := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	good := []string{
		"0 3 * * *", "*/15 * * * *", "0 0 1 * *", "30 2 * * 0", "0 */6 * * mon-fri", "5,35 1-3 * jan,jul sun",
		"0 0 ? * 1", "59 23 31 12 6", "0 12 1-15/2 * *", "@daily", "@hourly", "@weekly", "@monthly", "@yearly",
		"0 3  * * *",
	}
	bad := []string{
		"", "0 3 * *", "0 3 * * * *", "60 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 32 * *", "0 0 * 13 *",
		"0 0 * * 7", "every day", "@every 1h", "@reboot", "-1 * * * *", "0 3 * * * ; rm", " 0 3 * * *",
	}
	for _, s := range good {
		if !re.MatchString(s) {
			t.Errorf("pattern refuses %q", s)
		}
		if _, err := parser.Parse(s); err != nil {
			t.Errorf("cron parser refuses %q that the API accepts: %v", s, err)
		}
	}
	for _, s := range bad {
		if re.MatchString(s) {
			t.Errorf("pattern accepts %q", s)
		}
	}
}

// TestCRDCronRuleMatchesGo keeps the CEL rule in the generated CRD equal to
// CronSchedulePattern (markers cannot reference Go constants).
func TestCRDCronRuleMatchesGo(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/example.com_databases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	backup := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["backup"]
	for name, schema := range map[string]apiextensionsv1.JSONSchemaProps{"spec.backup": backup, "spec.backup.verify": backup.Properties["verify"]} {
		found := false
		for _, rule := range schema.XValidations {
			if strings.Contains(rule.Rule, "self.schedule.matches(") {
				found = true
				if !strings.Contains(rule.Rule, "self.schedule.matches('"+CronSchedulePattern+"')") {
					t.Errorf("the CRD's schedule rule on %s differs from CronSchedulePattern: update its marker\n%s", name, rule.Rule)
				}
			}
		}
		if !found {
			t.Errorf("no schedule rule on %s in the CRD", name)
		}
	}
}
