package plugin

import (
	"archive/zip"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	dbscheme "example.com/database-operator/pkg/client/clientset/versioned/scheme"
)

// report is a report being collected: its files, held until written so that
// every one is scrubbed of every Secret value read, whenever it was read.
type report struct {
	c            *Clients
	created      time.Time
	sinceSeconds *int64
	files        []reportFile
	names        map[string]bool
	// secretValues are the values (and their base64 forms) scrubbed from
	// every file.
	secretValues map[string]bool
	// secretsRead are the namespaces whose Secrets were read for the scrub.
	secretsRead map[string]bool
	summary     reportSummary
}

type reportFile struct {
	name string
	data []byte
}

// reportSummary is report.yaml.
type reportSummary struct {
	Report        string            `json:"report"`
	Created       string            `json:"created"`
	Command       []string          `json:"command"`
	Namespace     string            `json:"namespace"`
	Database      string            `json:"database,omitempty"`
	ServerVersion string            `json:"serverVersion,omitempty"`
	Operators     []operatorSummary `json:"operators,omitempty"`
	Redaction     string            `json:"redaction"`
	// ScrubbedSecretsOf are the namespaces whose Secrets' values were
	// scrubbed from every file.
	ScrubbedSecretsOf []string     `json:"secretValuesScrubbedFrom,omitempty"`
	NotCollected      []reportNote `json:"notCollected,omitempty"`
}

// reportNote is what could not be collected, and why.
type reportNote struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// operatorSummary is one operator found, in report.yaml.
type operatorSummary struct {
	Namespace   string   `json:"namespace"`
	Deployment  string   `json:"deployment"`
	Images      []string `json:"images"`
	InstalledBy string   `json:"installedBy"`
	// OLMServed are the OLM resources the cluster serves, collected from
	// the operator's namespace into olm/.
	OLMServed []string `json:"olmResourcesServed,omitempty"`
}

const (
	reportRedacted = "<redacted>"
	// reportMinScrubbed is the shortest Secret value scrubbed from the files:
	// shorter ones would match everywhere.
	reportMinScrubbed = 4
	// reportLastApplied is kubectl's copy of an applied object: a Secret's holds
	// its values.
	reportLastApplied = "kubectl.kubernetes.io/last-applied-configuration"
)

// reportNotSecretKeys are the keys of the operator's Secrets whose values are
// connection details written in clear elsewhere (the Database's name in the
// host, the engine's port and user names): scrubbing them from every file
// would blank the report. They are still redacted in the Secrets.
var reportNotSecretKeys = map[string]bool{
	corev1.BasicAuthUsernameKey: true, "host": true, "port": true, "database": true,
}

// reportScheme knows the kinds of the typed objects the report writes, to
// set their apiVersion and kind (typed clients return them empty).
var reportScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{kubescheme.AddToScheme, dbscheme.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

func newReport(c *Clients, created time.Time, cmdline []string, logsSince time.Duration) *report {
	r := &report{
		c: c, created: created, names: map[string]bool{},
		secretValues: map[string]bool{}, secretsRead: map[string]bool{},
		summary: reportSummary{
			Report:    "kubectl database report",
			Created:   created.Format(time.RFC3339),
			Command:   cmdline,
			Namespace: c.Namespace,
			Redaction: `Secret values are "<redacted, N bytes>"; every file is scanned for the values (of at least 4 bytes, ` +
				`user names, hosts, ports and database names aside) of the Secrets of the namespaces in ` +
				`secretValuesScrubbedFrom, and for their base64 forms, each replaced by "<redacted>"`,
		},
	}
	if logsSince > 0 {
		s := int64(logsSince.Seconds())
		r.sinceSeconds = &s
	}
	return r
}

// note records what could not be collected: never fatal.
func (r *report) note(what string, err error) {
	r.summary.NotCollected = append(r.summary.NotCollected, reportNote{What: what, Why: err.Error()})
}

// add adds a file; a name taken gets a numbered suffix.
func (r *report) add(name string, data []byte) {
	unique := name
	for i := 2; r.names[unique]; i++ {
		ext := filepath.Ext(name)
		unique = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), i, ext)
	}
	r.names[unique] = true
	r.files = append(r.files, reportFile{name: unique, data: data})
}

// addObject writes obj as YAML at name, without its managedFields, and
// with its values redacted when it is a Secret.
func (r *report) addObject(name string, obj runtime.Object) {
	u, err := reportUnstructured(obj)
	if err != nil {
		r.note(name, err)
		return
	}
	r.addYAML(name, u)
}

// reportUnstructured is obj as a map with its apiVersion and kind, without
// managedFields, a Secret's values redacted.
func reportUnstructured(obj runtime.Object) (map[string]any, error) {
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		kinds, _, err := reportScheme.ObjectKinds(obj)
		if err != nil {
			return nil, err
		}
		obj = obj.DeepCopyObject()
		obj.GetObjectKind().SetGroupVersionKind(kinds[0])
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	m = runtime.DeepCopyJSON(m)
	unstructured.RemoveNestedField(m, "metadata", "managedFields")
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Group == "" && gvk.Kind == "Secret" {
		reportRedactSecret(m)
	}
	return m, nil
}

// reportRedactSecret replaces a Secret's values, and its last-applied copy, by
// their sizes: the keys stay.
func reportRedactSecret(m map[string]any) {
	if data, ok := m["data"].(map[string]any); ok {
		for k, v := range data {
			// data is base64 in the unstructured form.
			s, _ := v.(string)
			n := len(s)
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				n = len(b)
			}
			data[k] = fmt.Sprintf("<redacted, %d bytes>", n)
		}
	}
	if data, ok := m["stringData"].(map[string]any); ok {
		for k, v := range data {
			s, _ := v.(string)
			data[k] = fmt.Sprintf("<redacted, %d bytes>", len(s))
		}
	}
	if a, ok, _ := unstructured.NestedStringMap(m, "metadata", "annotations"); ok {
		if v, ok := a[reportLastApplied]; ok {
			a[reportLastApplied] = fmt.Sprintf("<redacted, %d bytes>", len(v))
			_ = unstructured.SetNestedStringMap(m, a, "metadata", "annotations")
		}
	}
}

// scrubSecret remembers a Secret's values to scrub them from every file.
func (r *report) scrubSecret(s *corev1.Secret) {
	remember := func(k string, v []byte) {
		if len(v) >= reportMinScrubbed && !reportNotSecretKeys[k] {
			r.secretValues[string(v)] = true
			r.secretValues[base64.StdEncoding.EncodeToString(v)] = true
		}
	}
	for k, v := range s.Data {
		remember(k, v)
	}
	for k, v := range s.StringData {
		remember(k, []byte(v))
	}
}

// scrubber replaces every Secret value read, longest first, by <redacted>.
func (r *report) scrubber() *strings.Replacer {
	values := make([]string, 0, len(r.secretValues))
	for v := range r.secretValues {
		values = append(values, v)
	}
	sort.Slice(values, func(i, j int) bool {
		if len(values[i]) != len(values[j]) {
			return len(values[i]) > len(values[j])
		}
		return values[i] < values[j]
	})
	pairs := make([]string, 0, 2*len(values))
	for _, v := range values {
		pairs = append(pairs, v, reportRedacted)
	}
	return strings.NewReplacer(pairs...)
}

// reportObjectName is an object's name, for its file.
func reportObjectName(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "unnamed"
	}
	return m.GetName()
}

// write writes the zip to a temporary file beside target, renamed to target
// once complete: the number of files and the zip's size.
func (r *report) write(target string) (files int, size int64, err error) {
	for ns := range r.secretsRead {
		r.summary.ScrubbedSecretsOf = append(r.summary.ScrubbedSecretsOf, ns)
	}
	sort.Strings(r.summary.ScrubbedSecretsOf)
	summary, err := yaml.Marshal(r.summary)
	if err != nil {
		return 0, 0, err
	}
	all := append([]reportFile{{name: "report.yaml", data: summary}}, r.files...)
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*.tmp")
	if err != nil {
		return 0, 0, fmt.Errorf("writing the report: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = r.writeZip(tmp, all); err != nil {
		_ = tmp.Close()
		return 0, 0, fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return 0, 0, fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), target); err != nil {
		return 0, 0, fmt.Errorf("writing the report: %w", err)
	}
	st, err := os.Stat(target)
	if err != nil {
		return 0, 0, err
	}
	return len(all), st.Size(), nil
}

// writeZip writes files, each scrubbed, into a zip in f.
func (r *report) writeZip(f *os.File, files []reportFile) error {
	scrub := r.scrubber()
	zw := zip.NewWriter(f)
	for _, file := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: file.name, Method: zip.Deflate, Modified: r.created})
		if err != nil {
			return err
		}
		if _, err := scrub.WriteString(w, string(file.data)); err != nil {
			return err
		}
	}
	return zw.Close()
}
