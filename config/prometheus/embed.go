// Package prometheus embeds the Prometheus operator's objects of this
// directory (the operator's ServiceMonitor, the database pods' PodMonitor,
// the alerts' PrometheusRule), which the operator applies itself where the
// cluster serves monitoring.coreos.com/v1: an OLM bundle cannot carry them,
// since OLM fails the whole install on a cluster without their CRDs.
// kustomize reads the same files (kustomization.yaml).
package prometheus

import _ "embed"

var (
	// ServiceMonitor scrapes the operator's metrics Service.
	//go:embed monitor.yaml
	ServiceMonitor []byte
	// PodMonitor scrapes every Database pod's agent.
	//go:embed database-podmonitor.yaml
	PodMonitor []byte
	// PrometheusRule holds the alerts.
	//go:embed rules/prometheusrule.yaml
	PrometheusRule []byte
)

// NamePrefix is what kustomize prefixes their names with (kustomization.yaml).
const NamePrefix = "database-operator-"
