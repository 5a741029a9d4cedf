#!/usr/bin/env bash
# Downloads the Go modules the tools and the tests need, in the order
# hack/build-tools.sh and make test use them, while the builds run: on a new
# machine a build otherwise waits on each download in turn, with the CPU
# idle. Started in the background by .ci/run when the tool cache is empty;
# `go list -deps` fetches just the modules of the packages it lists, and the
# module cache's own locks make the builds wait for (not repeat) a download
# under way. A failure here is not an error: the build fetches what is
# missing itself.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod

fetch() { # fetch DIR TAGS PKG...
	local dir="$1" tags="$2"
	(cd "$root/$dir" && go list -deps -tags="$tags" "${@:3}" >/dev/null 2>&1) || true
}

start=$SECONDS
fetch hack/tools/controller-gen "" sigs.k8s.io/controller-tools/cmd/controller-gen
fetch hack/tools/etcd "" go.etcd.io/etcd/server/v3
fetch hack/tools/kube "" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
fetch hack/tools/kwok "" sigs.k8s.io/kwok/cmd/kwok
fetch hack/tools/operator-sdk containers_image_openpgp github.com/operator-framework/operator-sdk/cmd/operator-sdk \
	github.com/operator-framework/operator-sdk/images/scorecard-test
fetch hack/tools/opm json1,containers_image_openpgp github.com/operator-framework/operator-registry/cmd/opm \
	github.com/grpc-ecosystem/grpc-health-probe
fetch hack/tools/olm json1,containers_image_openpgp github.com/operator-framework/operator-lifecycle-manager/cmd/olm \
	github.com/operator-framework/operator-lifecycle-manager/cmd/catalog
fetch hack/tools/versitygw "" github.com/versity/versitygw/cmd/versitygw
fetch hack/tools/lint "" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
fetch hack/tools/actionlint "" github.com/rhysd/actionlint/cmd/actionlint
fetch hack/tools/promtool remove_all_sd github.com/prometheus/prometheus/cmd/promtool
fetch hack/tools/code-generator "" k8s.io/code-generator/cmd/client-gen k8s.io/code-generator/cmd/applyconfiguration-gen \
	k8s.io/code-generator/cmd/lister-gen k8s.io/code-generator/cmd/informer-gen
fetch hack/tools/vuln "" golang.org/x/vuln/cmd/govulncheck golang.org/x/vulndb/cmd/indexdb
(cd "$root" && GOFLAGS= go list -deps -test ./... >/dev/null 2>&1) || true
(cd "$root/release" && GOFLAGS=-tags=containers_image_openpgp go list -deps -test ./... >/dev/null 2>&1) || true
echo "[prefetch-modules] modules fetched in $((SECONDS - start))s" >&2
