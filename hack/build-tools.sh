#!/usr/bin/env bash
# Builds the local cluster's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) and controller-gen
# from their Go modules into a cache directory outside the work tree, keyed by
# version, so a cold build (~10 minutes on 2 cores) happens once per version.
#
# Usage: hack/build-tools.sh [controller-gen|cluster]...
#        builds what is missing (default: everything) and prints the bin dir
#        hack/build-tools.sh olm
#        builds operator-sdk, scorecard-test, opm, grpc_health_probe and OLM
#        (olm, catalog, CRDs) and prints their bin dir
#        hack/build-tools.sh olm-arm64
#        builds opm and grpc_health_probe for linux/arm64 under linux-arm64/
#        of that bin dir (the catalog image's other platform: make images,
#        make test-images-full; about 4 minutes cold, so not in make test)
#        and prints the bin dir
#        hack/build-tools.sh s3
#        builds versitygw (the S3 server the backup storage tests run
#        against) and prints its bin dir (not part of the default set)
#        hack/build-tools.sh vuln
#        builds govulncheck and the offline vulnerability database (vulndb/
#        beside it, from golang.org/x/vulndb's data/osv) and prints the dir
#        hack/build-tools.sh lint
#        builds golangci-lint and prints its bin dir
#        hack/build-tools.sh promtool|prometheus
#        builds promtool (make test-rules) or the Prometheus server from
#        hack/tools/promtool and prints their bin dir
#        hack/build-tools.sh monitoring-crds
#        copies the Prometheus operator's ServiceMonitor, PodMonitor and
#        PrometheusRule CRDs (its Go module, pinned below) into a directory
#        and prints it: the operator applies those kinds where they are served
#        hack/build-tools.sh code-generator
#        builds client-gen, applyconfiguration-gen, lister-gen and
#        informer-gen (the typed client in pkg/client, make generate) and
#        prints their bin dir
#        hack/build-tools.sh actionlint
#        builds actionlint and prints its bin dir
#        hack/build-tools.sh floor
#        builds the oldest supported Kubernetes (hack/tools/kube-floor) beside
#        the cluster's etcd and kwok and prints its bin dir
# Env:   DBOP_CACHE (default ~/.cache/database-operator)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/hack/tools"
cache="${DBOP_CACHE:-$HOME/.cache/database-operator}"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod

modver() { (cd "$tools/$1" && go list -m -f '{{.Version}}' "$2"); }

kube_ver="$(modver kube k8s.io/kubernetes)"
etcd_ver="$(modver etcd go.etcd.io/etcd/server/v3)"
kwok_ver="$(modver kwok sigs.k8s.io/kwok)"
cgen_ver="$(modver controller-gen sigs.k8s.io/controller-tools)"

bin="$cache/bin/kube-$kube_ver-etcd-$etcd_ver-kwok-$kwok_ver-cgen-$cgen_ver"
mkdir -p "$bin"

step() { printf '[build-tools] %s\n' "$*" >&2; }

build() { # build DIR OUT PKG [LDFLAGS]
	local dir="$1" out="$2" pkg="$3" ld="${4:-}"
	if [[ -x "$bin/$out" ]]; then return; fi
	step "building $out (cold builds take minutes; progress below)"
	local start=$SECONDS
	(cd "$tools/$dir" && go build -trimpath -ldflags "-s -w $ld" -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
	step "built $out in $((SECONDS - start))s"
}

# tool KEY DIR OUT PKG [LDFLAGS]: a Go tool with a cache directory of its
# own, $cache/bin/KEY, KEY naming what the build depends on (versions, the Go
# release): sets bin to that directory and builds the tool there (as build).
tool() {
	bin="$cache/bin/$1"
	mkdir -p "$bin"
	build "${@:2}"
}

# The S3 test server, keyed by its own version.
if [[ "${1:-}" == s3 ]]; then
	vgw_ver="$(modver versitygw github.com/versity/versitygw)"
	tool "versitygw-$vgw_ver" versitygw versitygw github.com/versity/versitygw/cmd/versitygw \
		"-X main.Version=$vgw_ver -X main.Build=$vgw_ver"
	echo "$bin"
	exit 0
fi

# The vulnerability gate: govulncheck and the database it reads, keyed by
# both versions (the database is the vulndb module's pinned commit) and by
# the Go release: govulncheck type-checks the code, and a govulncheck built
# by an older Go refuses a module whose go line is newer.
if [[ "${1:-}" == vuln ]]; then
	vuln_ver="$(modver vuln golang.org/x/vuln)"
	vulndb_ver="$(modver vuln golang.org/x/vulndb)"
	tool "vuln-$vuln_ver-db-$vulndb_ver-$(go env GOVERSION)" vuln govulncheck golang.org/x/vuln/cmd/govulncheck
	build vuln indexdb golang.org/x/vulndb/cmd/indexdb
	if [[ ! -d "$bin/vulndb" ]]; then
		step "indexing the vulnerability database $vulndb_ver"
		src="$(cd "$tools/vuln" && go list -m -f '{{.Dir}}' golang.org/x/vulndb)/data/osv"
		rm -rf "$bin/vulndb.tmp"
		"$bin/indexdb" -vulns "$src" -out "$bin/vulndb.tmp"
		mv "$bin/vulndb.tmp" "$bin/vulndb"
	fi
	echo "$bin"
	exit 0
fi

# The Prometheus operator's CRDs of the kinds the operator applies
# (internal/controller/monitoring_objects.go), from the module's own
# example/prometheus-operator-crd, keyed by its version (pinned here: no Go
# package of it is built, so no tool module requires it).
promop_ver=v0.89.0
if [[ "${1:-}" == monitoring-crds ]]; then
	bin="$cache/bin/monitoring-crds-$promop_ver"
	if [[ ! -f "$bin/monitoring.coreos.com_prometheusrules.yaml" ]]; then
		step "copying the Prometheus operator's CRDs $promop_ver"
		src="$(cd "$tools/promtool" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$promop_ver" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/example/prometheus-operator-crd"
		rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
		for k in servicemonitors podmonitors prometheusrules; do cp "$src/monitoring.coreos.com_$k.yaml" "$bin.tmp/"; done
		chmod -R u+w "$bin.tmp"
		rm -rf "$bin" && mv "$bin.tmp" "$bin"
	fi
	echo "$bin"
	exit 0
fi

# The workflow checker, keyed by its version.
if [[ "${1:-}" == code-generator ]]; then
	codegen_ver="$(modver code-generator k8s.io/code-generator)"
	for g in client-gen applyconfiguration-gen lister-gen informer-gen; do
		tool "code-generator-$codegen_ver" code-generator "$g" "k8s.io/code-generator/cmd/$g"
	done
	echo "$bin"
	exit 0
fi

if [[ "${1:-}" == actionlint ]]; then
	al_ver="$(modver actionlint github.com/rhysd/actionlint)"
	tool "actionlint-$al_ver" actionlint actionlint github.com/rhysd/actionlint/cmd/actionlint \
		"-X github.com/rhysd/actionlint.version=$al_ver"
	echo "$bin"
	exit 0
fi

# promtool (make test-rules) and the Prometheus server (the full tier), one
# directory keyed by the pinned Prometheus version. Built without the
# service-discovery plugins (remove_all_sd: file and HTTP discovery stay),
# which would pull in every cloud provider's SDK; the server keeps
# Kubernetes discovery (enable_kubernetes_sd), the one a Prometheus on the
# local cluster needs to find the operator and the database pods.
if [[ "${1:-}" == promtool || "${1:-}" == prometheus ]]; then
	prom_ver="$(modver promtool github.com/prometheus/prometheus)"
	prom_ld="-X github.com/prometheus/common/version.Version=${prom_ver#v} -X github.com/prometheus/common/version.Revision=$prom_ver"
	prom_ld+=" -X github.com/prometheus/common/version.Branch=$prom_ver -X github.com/prometheus/common/version.BuildUser=database-operator"
	bin="$cache/bin/prometheus-$prom_ver"
	mkdir -p "$bin"
	if [[ "$1" == promtool ]]; then
		GOFLAGS="$GOFLAGS -tags=remove_all_sd" build promtool promtool github.com/prometheus/prometheus/cmd/promtool "$prom_ld"
	else
		GOFLAGS="$GOFLAGS -tags=remove_all_sd,enable_kubernetes_sd" build promtool prometheus github.com/prometheus/prometheus/cmd/prometheus "$prom_ld"
	fi
	echo "$bin"
	exit 0
fi

# The linter, keyed by its version and the Go release that builds it (its
# type checker must know the go line of the code it reads).
if [[ "${1:-}" == lint ]]; then
	lint_ver="$(modver lint github.com/golangci/golangci-lint/v2)"
	tool "golangci-lint-$lint_ver-$(go env GOVERSION)" lint golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
		"-X main.version=$lint_ver -X main.commit=$lint_ver -X main.date=unknown"
	echo "$bin"
	exit 0
fi

# OLM tooling has its own directory, keyed by its own versions.
if [[ "${1:-}" == olm || "${1:-}" == olm-arm64 ]]; then
	sdk_ver="$(modver operator-sdk github.com/operator-framework/operator-sdk)"
	opm_ver="$(modver opm github.com/operator-framework/operator-registry)"
	olm_ver="$(modver olm github.com/operator-framework/operator-lifecycle-manager)"
	bin="$cache/bin/sdk-$sdk_ver-opm-$opm_ver-olm-$olm_ver"
	mkdir -p "$bin"
	sdk_ld="-X github.com/operator-framework/operator-sdk/internal/version.Version=$sdk_ver"
	sdk_ld+=" -X github.com/operator-framework/operator-sdk/internal/version.GitVersion=$sdk_ver"
	opm_ld="-X github.com/operator-framework/operator-registry/cmd/opm/version.gitCommit=$opm_ver -X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=$opm_ver"
	# containers/image is linked in: without this tag it wants the gpgme C library.
	if [[ "$1" == olm-arm64 ]]; then
		mkdir -p "$bin/linux-arm64"
		GOOS=linux GOARCH=arm64 GOFLAGS="$GOFLAGS -tags=json1,containers_image_openpgp" build opm linux-arm64/opm github.com/operator-framework/operator-registry/cmd/opm "$opm_ld"
		GOOS=linux GOARCH=arm64 build opm linux-arm64/grpc_health_probe github.com/grpc-ecosystem/grpc-health-probe
		echo "$bin"
		exit 0
	fi
	GOFLAGS="$GOFLAGS -tags=containers_image_openpgp" build operator-sdk operator-sdk github.com/operator-framework/operator-sdk/cmd/operator-sdk "$sdk_ld"
	GOFLAGS="$GOFLAGS -tags=containers_image_openpgp" build operator-sdk scorecard-test github.com/operator-framework/operator-sdk/images/scorecard-test
	GOFLAGS="$GOFLAGS -tags=json1,containers_image_openpgp" build opm opm github.com/operator-framework/operator-registry/cmd/opm "$opm_ld"
	build opm grpc_health_probe github.com/grpc-ecosystem/grpc-health-probe
	# OLM v0's olm and catalog operators, and its CRDs, for the
	# subscribe-and-upgrade test.
	for c in olm catalog; do
		GOFLAGS="$GOFLAGS -tags=json1,containers_image_openpgp" build olm "$c" "github.com/operator-framework/operator-lifecycle-manager/cmd/$c"
	done
	if [[ ! -d "$bin/olm-crds" ]]; then
		src="$(cd "$tools/olm" && go list -m -f '{{.Dir}}' github.com/operator-framework/operator-lifecycle-manager)/deploy/chart/crds"
		mkdir -p "$bin/olm-crds.tmp" && cp "$src"/*.yaml "$bin/olm-crds.tmp/" && chmod -R u+w "$bin/olm-crds.tmp"
		mv "$bin/olm-crds.tmp" "$bin/olm-crds"
	fi
	echo "$bin"
	exit 0
fi

want() { [[ $# -eq 0 ]] && return 0; local w; for w in "${targets[@]}"; do [[ "$w" == "$1" ]] && return 0; done; return 1; }
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=(controller-gen cluster); fi

if want controller-gen; then
	build controller-gen controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
fi
if ! want cluster && ! want floor; then
	echo "$bin"
	exit 0
fi

build etcd etcd go.etcd.io/etcd/server/v3

# kube_ldflags VERSION: the version the Kubernetes binaries report (v0.0.0
# without it).
kube_ldflags() {
	local v="$1" major minor p ld=""
	major="${v#v}"; major="${major%%.*}"
	minor="$(echo "$v" | cut -d. -f2)"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	echo "$ld"
}
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	build kube "$c" "k8s.io/kubernetes/cmd/$c" "$(kube_ldflags "$kube_ver")"
done

build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_ver"
# kwok has no built-in stages: ship the module's own node and pod stages beside it.
if [[ ! -d "$bin/kwok-stages" ]]; then
	src="$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
	mkdir -p "$bin/kwok-stages.tmp"
	cp "$src/node/fast/node-initialize.yaml" "$bin/kwok-stages.tmp/"
	cp "$src"/node/heartbeat-with-lease/*.yaml "$bin/kwok-stages.tmp/" 2>/dev/null || true
	for s in pod-ready pod-complete pod-delete; do cp "$src/pod/fast/$s.yaml" "$bin/kwok-stages.tmp/"; done
	# A simulated dynamic provisioner for StorageClass kwok-volume (PVCs bind, PVs are released).
	for s in pv-bind pv-delete pvc-provision pvc-delete; do cp "$src/volume/fast/$s.yaml" "$bin/kwok-stages.tmp/"; done
	rm -f "$bin/kwok-stages.tmp/kustomization.yaml"
	chmod -R u+w "$bin/kwok-stages.tmp"
	mv "$bin/kwok-stages.tmp" "$bin/kwok-stages"
fi

# The floor: the oldest supported Kubernetes's control plane in a directory
# of its own, keyed by its version and the etcd and kwok it shares (linked
# from the cluster's directory, with kubectl).
if want floor; then
	floor_ver="$(modver kube-floor k8s.io/kubernetes)"
	cluster="$bin"
	bin="$cache/bin/kube-$floor_ver-etcd-$etcd_ver-kwok-$kwok_ver"
	mkdir -p "$bin"
	for c in kube-apiserver kube-controller-manager kube-scheduler; do
		build kube-floor "$c" "k8s.io/kubernetes/cmd/$c" "$(kube_ldflags "$floor_ver")"
	done
	for f in etcd kwok kwok-stages kubectl; do ln -sfn "$cluster/$f" "$bin/$f"; done
fi

echo "$bin"
