// Package chart renders the embedded database chart in-process with Helm's
// library into Kubernetes objects. No Helm release is stored: the operator
// owns the objects through server-side apply and owner references.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Renderer renders one loaded chart. It is safe for concurrent use: the
// chart is parsed once and only read afterwards.
type Renderer struct {
	chart *chart.Chart
}

// Load reads a chart rooted at dir inside fsys (for example the embedded
// helm-charts FS and "database").
func Load(fsys fs.FS, dir string) (*Renderer, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, dir+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading chart %s: %w", dir, err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	return &Renderer{chart: c}, nil
}

// Release names what the chart is rendered for: the Database's name and namespace.
type Release struct {
	Name      string
	Namespace string
}

// Render renders the chart with values for a release and returns the objects
// it produces, in a stable order (kind, then name). Values are validated
// against the chart's values.schema.json first.
func (r *Renderer) Render(rel Release, values map[string]any) ([]*unstructured.Unstructured, error) {
	if rel.Name == "" || rel.Namespace == "" {
		return nil, errors.New("rendering chart: release name and namespace are required")
	}
	top, err := chartutil.ToRenderValues(r.chart, values, chartutil.ReleaseOptions{
		Name:      rel.Name,
		Namespace: rel.Namespace,
		Revision:  1,
		IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	rendered, err := engine.Render(r.chart, top)
	if err != nil {
		return nil, fmt.Errorf("rendering chart: %w", err)
	}

	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)

	var objs []*unstructured.Unstructured
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(path.Base(name), "_") {
			continue // NOTES.txt, partials
		}
		docs, err := decode(rendered[name])
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		for _, o := range docs {
			if o.GetNamespace() == "" {
				o.SetNamespace(rel.Namespace)
			}
		}
		objs = append(objs, docs...)
	}
	sort.SliceStable(objs, func(i, j int) bool {
		ki, kj := objs[i].GetKind(), objs[j].GetKind()
		if ki != kj {
			return ki < kj
		}
		return objs[i].GetName() < objs[j].GetName()
	})
	return objs, nil
}

// decode splits a rendered template into objects. Going through the
// unstructured JSON scheme keeps integers as int64, as the API server's
// own objects have them (a plain JSON decode would make them float64).
func decode(manifest string) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" || string(t) == "{}" {
			continue // an empty document, e.g. a template whose condition is false
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding object: %w", err)
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("decoded %T, want a single object", obj)
		}
		objs = append(objs, u)
	}
}
