package v1

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/config/crd"
)

// A write through an older API version (v1alpha1) is checked by the API
// server against that version's schema, which cannot see the v1 fields it
// carries in its conversion annotation: a spec v1 refuses (a negative lag
// bound, synchronous replicas as many as the instances, a plain-HTTP
// backup target, a parameter name that breaks the configuration file)
// would be stored through v1alpha1. So the validating webhook, which sees
// every write as v1, runs the v1 schema and its CEL rules itself on a
// v1alpha1 write: every v1 rule, from its one home in the CRD, with the
// API server's ratcheting (what did not change is not judged again).

// v1Schema validates Databases against the v1 CRD's schema.
type v1Schema struct {
	structural *structuralschema.Structural
	openapi    apiextensionsvalidation.SchemaValidator
	cel        *cel.Validator
}

var (
	schemaOnce sync.Once
	schema     *v1Schema
	schemaErr  error
)

// storedSchema is the v1 schema of the embedded CRD, loaded once.
func storedSchema() (*v1Schema, error) {
	schemaOnce.Do(func() { schema, schemaErr = loadSchema(crd.Databases, dbv1.GroupVersion.Version) })
	return schema, schemaErr
}

func loadSchema(crdYAML []byte, version string) (*v1Schema, error) {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(crdYAML, c); err != nil {
		return nil, fmt.Errorf("reading the Database CRD: %w", err)
	}
	for _, v := range c.Spec.Versions {
		if v.Name != version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("the Database CRD's %s schema: %w", version, err)
		}
		s, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, fmt.Errorf("the Database CRD's %s schema: %w", version, err)
		}
		openapi, _, err := apiextensionsvalidation.NewSchemaValidator(internal)
		if err != nil {
			return nil, fmt.Errorf("the Database CRD's %s schema: %w", version, err)
		}
		return &v1Schema{structural: s, openapi: openapi, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("the Database CRD has no schema for %s", version)
}

// validate checks db (old: its stored version, nil on create) as the API
// server checks a v1 write: the OpenAPI schema, then the CEL rules, with
// ratcheting on update.
func (s *v1Schema) validate(ctx context.Context, old, db *dbv1.Database) (field.ErrorList, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(db)
	if err != nil {
		return nil, err
	}
	if old == nil {
		errs := apiextensionsvalidation.ValidateCustomResource(nil, obj, s.openapi)
		if s.cel != nil {
			celErrs, _ := s.cel.Validate(ctx, nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
		}
		return errs, nil
	}
	oldObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	if err != nil {
		return nil, err
	}
	correlated := common.NewCorrelatedObject(obj, oldObj, &model.Structural{Structural: s.structural})
	errs := apiextensionsvalidation.ValidateCustomResourceUpdate(nil, obj, oldObj, s.openapi, apiextensionsvalidation.WithRatcheting(correlated))
	if s.cel != nil {
		celErrs, _ := s.cel.Validate(ctx, nil, s.structural, obj, oldObj, celconfig.RuntimeCELCostBudget, cel.WithRatcheting(correlated))
		errs = append(errs, celErrs...)
	}
	return errs, nil
}

// olderVersionKeepsV1Rules runs the v1 schema and CEL rules on a write
// made through another version than v1 (see above); a v1 write was
// checked by the API server already.
func olderVersionKeepsV1Rules(ctx context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.RequestKind == nil || req.RequestKind.Group != dbv1.GroupVersion.Group || req.RequestKind.Version == dbv1.GroupVersion.Version {
		return nil, nil, nil
	}
	s, err := storedSchema()
	if err != nil {
		return nil, field.ErrorList{field.InternalError(nil, err)}, nil
	}
	errs, err := s.validate(ctx, old, db)
	if err != nil {
		return nil, field.ErrorList{field.InternalError(nil, err)}, nil
	}
	for i := range errs {
		errs[i].Detail = fmt.Sprintf("%s (a rule of %s, which a %s write keeps)", errs[i].Detail, dbv1.GroupVersion, req.RequestKind.Version)
	}
	return nil, errs, nil
}
