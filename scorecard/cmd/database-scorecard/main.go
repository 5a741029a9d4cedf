// Command database-scorecard is this project's own scorecard test image:
// given a test name, it checks the bundle mounted at /bundle and prints a
// scorecard v1alpha3 TestStatus as JSON, as `operator-sdk scorecard` expects
// from a custom test. The tests check what the standard suites cannot know:
//
//	csv-related-images   relatedImages name the operator and an image for
//	                     every engine version the API accepts
//	samples-valid        every alm-example passes the CRD's schema and its
//	                     CEL rules (what the API server would enforce)
//	crd-printer-columns  the CRD shows phase, readiness and primary in
//	                     kubectl get, and has the scale subresource
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	dbv1 "example.com/database-operator/api/v1"
)

// bundleRoot is where scorecard mounts the bundle in a test pod.
const bundleRoot = "/bundle"

var tests = map[string]func(*apimanifests.Bundle) []string{
	"csv-related-images":  relatedImages,
	"samples-valid":       samplesValid,
	"crd-printer-columns": printerColumns,
}

func main() {
	root := bundleRoot
	if r := os.Getenv("SCORECARD_BUNDLE_ROOT"); r != "" {
		root = r
	}
	status := run(root, os.Args[1:])
	out, _ := json.MarshalIndent(status, "", "    ")
	fmt.Println(string(out))
}

func run(root string, args []string) scapi.TestStatus {
	result := scapi.TestResult{State: scapi.PassState, Errors: []string{}, Suggestions: []string{}}
	if len(args) == 0 || tests[args[0]] == nil {
		var names []string
		for n := range tests {
			names = append(names, n)
		}
		slices.Sort(names)
		result.Name, result.State = strings.Join(args, " "), scapi.FailState
		result.Errors = append(result.Errors, "unknown test; this image runs: "+strings.Join(names, ", "))
		return scapi.TestStatus{Results: []scapi.TestResult{result}}
	}
	result.Name = args[0]
	bundle, err := apimanifests.GetBundleFromDir(root)
	if err == nil && bundle.CSV == nil {
		err = fmt.Errorf("no ClusterServiceVersion in %s", root)
	}
	if err != nil {
		result.State, result.Errors = scapi.ErrorState, []string{err.Error()}
		return scapi.TestStatus{Results: []scapi.TestResult{result}}
	}
	if errs := tests[args[0]](bundle); len(errs) > 0 {
		result.State, result.Errors = scapi.FailState, errs
	}
	result.Log = fmt.Sprintf("checked bundle %s", bundle.CSV.GetName())
	return scapi.TestStatus{Results: []scapi.TestResult{result}}
}

func relatedImages(b *apimanifests.Bundle) []string {
	var errs []string
	byName := map[string]string{}
	for _, ri := range b.CSV.Spec.RelatedImages {
		byName[ri.Name] = ri.Image
	}
	for _, e := range dbv1.Engines() {
		for _, v := range dbv1.SupportedVersions(e) {
			name := string(e) + "-" + strings.ReplaceAll(v, ".", "-")
			if byName[name] == "" {
				errs = append(errs, fmt.Sprintf("relatedImages has no %s (%s %s is a supported version)", name, e, v))
			}
		}
	}
	var deployed []string
	for _, d := range b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			deployed = append(deployed, c.Image)
		}
	}
	if m := byName["manager"]; m == "" || !slices.Contains(deployed, m) {
		errs = append(errs, fmt.Sprintf("relatedImages' manager %q is not the image the CSV deploys %v", m, deployed))
	}
	return errs
}

func databaseCRD(b *apimanifests.Bundle) (*apiextv1.CustomResourceDefinition, *apiextv1.CustomResourceDefinitionVersion, error) {
	for _, crd := range b.V1CRDs {
		if crd.Spec.Group != dbv1.GroupVersion.Group || crd.Spec.Names.Kind != "Database" {
			continue
		}
		for i := range crd.Spec.Versions {
			if v := &crd.Spec.Versions[i]; v.Storage {
				return crd, v, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("the bundle has no Database CRD with a storage version")
}

// sampleValidator checks objects against one served version of a CRD: its
// OpenAPI schema and its CEL rules.
type sampleValidator struct {
	schema     validation.SchemaValidator
	structural *schema.Structural
	cel        *cel.Validator
}

func newSampleValidator(v *apiextv1.CustomResourceDefinitionVersion) (*sampleValidator, error) {
	var internal apiextensions.JSONSchemaProps
	if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
		return nil, err
	}
	validator, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, err
	}
	structural, err := schema.NewStructural(&internal)
	if err != nil {
		return nil, fmt.Errorf("the schema is not structural: %w", err)
	}
	return &sampleValidator{schema: validator, structural: structural, cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

func (v *sampleValidator) validate(name string, obj map[string]any) []string {
	var errs []string
	for _, e := range validation.ValidateCustomResource(field.NewPath(name), obj, v.schema) {
		errs = append(errs, e.Error())
	}
	if v.cel != nil {
		celErrs, _ := v.cel.Validate(context.Background(), field.NewPath(name), v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range celErrs {
			errs = append(errs, e.Error())
		}
	}
	return errs
}

// samplesValid checks every alm-example against the CRD version it names;
// there must be a Database among them.
func samplesValid(b *apimanifests.Bundle) []string {
	validators := map[string]*sampleValidator{} // apiVersion/kind -> validator
	for _, crd := range b.V1CRDs {
		for i := range crd.Spec.Versions {
			v := &crd.Spec.Versions[i]
			if !v.Served || v.Schema == nil {
				continue
			}
			sv, err := newSampleValidator(v)
			if err != nil {
				return []string{fmt.Sprintf("%s %s: %v", crd.Name, v.Name, err)}
			}
			validators[crd.Spec.Group+"/"+v.Name+"/"+crd.Spec.Names.Kind] = sv
		}
	}
	var samples []map[string]any
	if err := json.Unmarshal([]byte(b.CSV.GetAnnotations()["alm-examples"]), &samples); err != nil {
		return []string{fmt.Sprintf("alm-examples is not a JSON list: %v", err)}
	}
	var errs []string
	databases := 0
	for i, s := range samples {
		name := fmt.Sprintf("alm-examples[%d]", i)
		apiVersion, _ := s["apiVersion"].(string)
		kind, _ := s["kind"].(string)
		v := validators[apiVersion+"/"+kind]
		if v == nil {
			errs = append(errs, fmt.Sprintf("%s is a %s %s, which no CRD of the bundle serves", name, apiVersion, kind))
			continue
		}
		if kind == "Database" {
			databases++
		}
		errs = append(errs, v.validate(name, s)...)
	}
	if databases == 0 {
		errs = append(errs, "alm-examples has no Database")
	}
	return errs
}

func printerColumns(b *apimanifests.Bundle) []string {
	_, version, err := databaseCRD(b)
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	have := map[string]bool{}
	for _, c := range version.AdditionalPrinterColumns {
		have[c.Name] = true
	}
	for _, want := range []string{"Engine", "Phase", "Ready", "Primary"} {
		if !have[want] {
			errs = append(errs, fmt.Sprintf("no %q printer column (has %v)", want, have))
		}
	}
	if version.Subresources == nil || version.Subresources.Scale == nil || version.Subresources.Status == nil {
		errs = append(errs, "the storage version lacks the status or scale subresource")
	}
	return errs
}
