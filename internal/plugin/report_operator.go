package plugin

import (
	"context"
	"errors"
	"fmt"
	"path"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
)

const (
	// reportOperatorSelector selects the operator's Deployment, installed
	// by kustomize (config/) or by OLM.
	reportOperatorSelector = "control-plane=controller-manager,app.kubernetes.io/name=database-operator"
	// reportOperatorNamespace is kustomize's namespace, tried when the
	// Deployments of every namespace cannot be listed.
	reportOperatorNamespace = "database-operator-system"
	reportOLMGroup          = "operators.coreos.com"
)

// reportOLMResources are the OLM resources of the operator's namespace,
// each with the versions tried, preferred first. Their Go types are not
// known here: discovery says which are served, the dynamic client lists
// them.
var reportOLMResources = []struct {
	resource string
	versions []string
}{
	{"subscriptions", []string{"v1alpha1"}},
	{"clusterserviceversions", []string{"v1alpha1"}},
	{"installplans", []string{"v1alpha1"}},
	{"operatorgroups", []string{"v1", "v1alpha2"}},
	{"catalogsources", []string{"v1alpha1"}},
	{"operatorconditions", []string{"v2", "v1"}},
}

// reportCRDs are the operator's CRDs whose versions `report --operator`
// lists.
var reportCRDs = []string{"databases.example.com", "backups.example.com"}

var reportCRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// collectOperatorReport is `report --operator`: the operator, the CRDs'
// versions and the list of Databases.
func (r *report) collectOperatorReport(ctx context.Context, namespace string) {
	r.collectOperator(ctx, namespace)
	r.collectCRDs(ctx)
	if dbs := r.listAllDatabases(ctx); dbs != nil {
		r.writeDatabaseList(dbs)
		r.scrubDatabaseNamespaces(ctx, dbs)
	}
}

// collectOperator collects the operator's Deployments (in namespace, or
// found by their labels), their pods and logs, their namespace's Events
// and OLM objects. None found is a note file, not an error.
func (r *report) collectOperator(ctx context.Context, namespace string) {
	deps := r.findOperator(ctx, namespace)
	if len(deps) == 0 {
		where := "in any namespace the user can list"
		if namespace != "" {
			where = "in namespace " + namespace
		}
		msg := fmt.Sprintf("No Deployment labelled %s was found %s: the report holds nothing of the operator.\n"+
			"Give --operator-namespace when it runs elsewhere; report.yaml's notCollected says what could not be listed.\n",
			reportOperatorSelector, where)
		r.add(path.Join("operator", "NOT-FOUND.txt"), []byte(msg))
		r.note("the operator", errors.New("no Deployment labelled "+reportOperatorSelector+" found "+where))
		return
	}
	for i := range deps {
		r.collectOperatorDeployment(ctx, &deps[i])
	}
}

// findOperator finds the operator's Deployments by their labels: in
// namespace when given, else in every namespace, else (every namespace
// forbidden) in kustomize's.
func (r *report) findOperator(ctx context.Context, namespace string) []appsv1.Deployment {
	opts := metav1.ListOptions{LabelSelector: reportOperatorSelector}
	if namespace == "" {
		list, err := r.c.Kube.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, opts)
		if err == nil {
			return list.Items
		}
		r.note("the operator's Deployment in every namespace", err)
		namespace = reportOperatorNamespace
	}
	list, err := r.c.Kube.AppsV1().Deployments(namespace).List(ctx, opts)
	if err != nil {
		r.note("the operator's Deployment in namespace "+namespace, err)
		return nil
	}
	return list.Items
}

// collectOperatorDeployment collects one operator under operator/<namespace>/
// and olm/<namespace>/.
func (r *report) collectOperatorDeployment(ctx context.Context, dep *appsv1.Deployment) {
	ns := dep.Namespace
	dir := path.Join("operator", ns)
	r.addObject(path.Join(dir, "deployments", dep.Name+".yaml"), dep)
	summary := operatorSummary{Namespace: ns, Deployment: dep.Name, InstalledBy: installedBy(dep)}
	for _, c := range dep.Spec.Template.Spec.Containers {
		summary.Images = append(summary.Images, c.Image)
	}
	// The operator's logs may print what it reads: its namespace's Secrets
	// are scrubbed too.
	r.readSecrets(ctx, ns, nil)
	if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err != nil {
		r.note("the pods of Deployment "+ns+"/"+dep.Name, err)
	} else {
		pods := r.listObjects(ctx, path.Join(dir, "pods"), reportPods, ns, sel.String())
		for _, p := range pods {
			if pod, ok := p.(*corev1.Pod); ok {
				r.collectLogs(ctx, pod, path.Join(dir, "logs"))
			}
		}
	}
	r.collectEvents(ctx, ns, path.Join(dir, "events.yaml"))
	summary.OLMServed = r.collectOLM(ctx, ns)
	r.summary.Operators = append(r.summary.Operators, summary)
}

// installedBy says whether OLM installed the Deployment.
func installedBy(dep *appsv1.Deployment) string {
	for _, o := range dep.OwnerReferences {
		if o.Kind == "ClusterServiceVersion" {
			return "OLM (ClusterServiceVersion " + o.Name + ")"
		}
	}
	if csv := dep.Labels["olm.owner"]; csv != "" {
		return "OLM (ClusterServiceVersion " + csv + ")"
	}
	return "not OLM (kustomize, or another tool)"
}

// collectOLM writes the OLM objects of ns served by the cluster into
// olm/<ns>/<resource>/, and the CatalogSources its Subscriptions name in
// other namespaces. It returns the resources served.
func (r *report) collectOLM(ctx context.Context, ns string) []string {
	disc := reportDiscovery{c: r.c, lists: map[string]*metav1.APIResourceList{}}
	var served []string
	var subscriptions []unstructured.Unstructured
	var catalogs schema.GroupVersionResource
	for _, res := range reportOLMResources {
		gvr, err := disc.served(ctx, reportOLMGroup, res.resource, res.versions)
		if err != nil {
			r.note(fmt.Sprintf("whether %s.%s is served", res.resource, reportOLMGroup), err)
			continue
		}
		if gvr.Empty() {
			continue
		}
		served = append(served, gvr.Resource+"."+gvr.Group+"/"+gvr.Version)
		items := r.listDynamic(ctx, gvr, ns)
		switch res.resource {
		case "subscriptions":
			subscriptions = items
		case "catalogsources":
			catalogs = gvr
		}
	}
	if !catalogs.Empty() {
		r.collectSubscribedCatalogs(ctx, catalogs, ns, subscriptions)
	}
	return served
}

// listDynamic writes the objects of gvr in ns into olm/<ns>/<resource>/.
func (r *report) listDynamic(ctx context.Context, gvr schema.GroupVersionResource, ns string) []unstructured.Unstructured {
	list, err := r.c.Dynamic.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.note(fmt.Sprintf("%s in namespace %s", gvr.GroupResource(), ns), err)
		return nil
	}
	for i := range list.Items {
		r.addObject(path.Join("olm", ns, gvr.Resource, list.Items[i].GetName()+".yaml"), &list.Items[i])
	}
	return list.Items
}

// collectSubscribedCatalogs writes the CatalogSources the Subscriptions
// name in other namespaces than ns (the catalogs' own namespace, often).
func (r *report) collectSubscribedCatalogs(ctx context.Context, gvr schema.GroupVersionResource, ns string, subscriptions []unstructured.Unstructured) {
	for _, s := range subscriptions {
		name, _, _ := unstructured.NestedString(s.Object, "spec", "source")
		catalogNS, _, _ := unstructured.NestedString(s.Object, "spec", "sourceNamespace")
		if name == "" || catalogNS == "" || catalogNS == ns {
			continue
		}
		file := path.Join("olm", catalogNS, gvr.Resource, name+".yaml")
		if r.names[file] {
			continue
		}
		u, err := r.c.Dynamic.Resource(gvr).Namespace(catalogNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			r.note(fmt.Sprintf("CatalogSource %s/%s of Subscription %s/%s", catalogNS, name, ns, s.GetName()), err)
			continue
		}
		r.addObject(file, u)
	}
}

// reportDiscovery says which resources the cluster serves, asking once per
// group version.
type reportDiscovery struct {
	c     *Clients
	lists map[string]*metav1.APIResourceList
}

// served is the first of versions of group serving resource, or the empty
// GroupVersionResource when none does.
func (d reportDiscovery) served(ctx context.Context, group, resource string, versions []string) (schema.GroupVersionResource, error) {
	for _, v := range versions {
		gv := schema.GroupVersion{Group: group, Version: v}
		list, ok := d.lists[gv.String()]
		if !ok {
			var err error
			list, err = d.c.Kube.Discovery().ServerResourcesForGroupVersionWithContext(ctx, gv.String())
			if apierrors.IsNotFound(err) {
				list, err = nil, nil
			}
			if err != nil {
				return schema.GroupVersionResource{}, err
			}
			d.lists[gv.String()] = list
		}
		if list == nil {
			continue
		}
		for _, res := range list.APIResources {
			if res.Name == resource {
				return gv.WithResource(resource), nil
			}
		}
	}
	return schema.GroupVersionResource{}, nil
}

// reportCRD is a CRD's versions, in crds.yaml.
type reportCRD struct {
	Name           string             `json:"name"`
	Versions       []reportCRDVersion `json:"versions"`
	StoredVersions []string           `json:"storedVersions"`
	Conversion     string             `json:"conversion,omitempty"`
	Established    string             `json:"established,omitempty"`
}

type reportCRDVersion struct {
	Name       string `json:"name"`
	Served     bool   `json:"served"`
	Storage    bool   `json:"storage"`
	Deprecated bool   `json:"deprecated,omitempty"`
}

// collectCRDs writes crds.yaml: the versions of the operator's CRDs, read
// with the dynamic client.
func (r *report) collectCRDs(ctx context.Context) {
	var crds []reportCRD
	for _, name := range reportCRDs {
		u, err := r.c.Dynamic.Resource(reportCRDResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			r.note("CustomResourceDefinition "+name, err)
			continue
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
			r.note("CustomResourceDefinition "+name, err)
			continue
		}
		crds = append(crds, summarizeCRD(&crd))
	}
	r.addYAML("crds.yaml", crds)
}

func summarizeCRD(crd *apiextensionsv1.CustomResourceDefinition) reportCRD {
	out := reportCRD{Name: crd.Name, StoredVersions: crd.Status.StoredVersions}
	for _, v := range crd.Spec.Versions {
		out.Versions = append(out.Versions, reportCRDVersion{Name: v.Name, Served: v.Served, Storage: v.Storage, Deprecated: v.Deprecated})
	}
	if crd.Spec.Conversion != nil {
		out.Conversion = string(crd.Spec.Conversion.Strategy)
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			out.Established = string(c.Status)
		}
	}
	return out
}

// reportDatabase is one Database in databases.yaml.
type reportDatabase struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
}

// listAllDatabases lists the Databases of every namespace: nil (a note)
// when it cannot.
func (r *report) listAllDatabases(ctx context.Context) *dbv1.DatabaseList {
	list, err := r.c.DB.ExampleV1().Databases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.note("the Databases of every namespace", err)
		return nil
	}
	return list
}

// writeDatabaseList writes databases.yaml: every Database with its phase.
func (r *report) writeDatabaseList(list *dbv1.DatabaseList) {
	dbs := make([]reportDatabase, 0, len(list.Items))
	for _, db := range list.Items {
		dbs = append(dbs, reportDatabase{Namespace: db.Namespace, Name: db.Name, Phase: string(db.Status.Phase)})
	}
	r.addYAML("databases.yaml", dbs)
}

// scrubDatabaseNamespaces reads the Secrets of every namespace holding a
// Database, only to scrub their values: the operator reads them all, and
// its logs are in the report.
func (r *report) scrubDatabaseNamespaces(ctx context.Context, list *dbv1.DatabaseList) {
	for _, db := range list.Items {
		r.readSecrets(ctx, db.Namespace, nil)
	}
}

// addYAML writes v as YAML at name.
func (r *report) addYAML(name string, v any) {
	data, err := yaml.Marshal(v)
	if err != nil {
		r.note(name, err)
		return
	}
	r.add(name, data)
}
