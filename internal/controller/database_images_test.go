package controller

import (
	"bytes"
	"maps"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
)

func TestImagesFromEnv(t *testing.T) {
	got := ImagesFromEnv([]string{
		"RELATED_IMAGE_MANAGER=example.com/m:v1", // the operator itself, not an operand
		"RELATED_IMAGE_POSTGRESQL_17=mirror.internal/postgres@sha256:abc",
		"RELATED_IMAGE_MYSQL_8_4=mysql:8.4",
		"RELATED_IMAGE_MARIADB_11_4=mariadb:11.4",
		"RELATED_IMAGE_MARIADB_11_8=", // empty: ignored
		"RELATED_IMAGE_ORACLE_23=oracle:23",
		"PATH=/bin",
	})
	want := map[string]string{"postgresql:17": "mirror.internal/postgres@sha256:abc", "mysql:8.4": "mysql:8.4", "mariadb:11.4": "mariadb:11.4"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}

	opts := ValueOptions{Images: want}
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Spec.Version = "17" })
	if img := chartValues(db, opts)["image"]; img != "mirror.internal/postgres@sha256:abc" {
		t.Errorf("related image not used: %v", img)
	}
	db.Spec.Image = "own:1"
	if img := chartValues(db, opts)["image"]; img != "own:1" {
		t.Errorf("spec.image must win over the related image: %v", img)
	}
}

// TestManagerListsEveryOperandImage: the Deployment that OLM and kustomize
// install names an image for every supported engine version, so the CSV's
// relatedImages (generated from it) are complete.
func TestManagerListsEveryOperandImage(t *testing.T) {
	b, err := os.ReadFile("../../config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		d := &appsv1.Deployment{}
		if err := yaml.Unmarshal(doc, d); err == nil && d.Kind == "Deployment" {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}
	var environ []string
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		environ = append(environ, e.Name+"="+e.Value)
	}
	images := ImagesFromEnv(environ)
	n := 0
	for _, e := range dbv1.Engines() {
		for _, v := range dbv1.SupportedVersions(e) {
			n++
			if images[string(e)+":"+v] == "" {
				t.Errorf("no RELATED_IMAGE_ for %s %s", e, v)
			}
		}
	}
	if len(images) != n {
		t.Errorf("%d operand images listed, %d supported versions: %v", len(images), n, images)
	}
}
