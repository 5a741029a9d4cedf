#!/usr/bin/env bash
# `make run`: with the local cluster up and the CRDs installed, applies the
# sample, prints the Database's status as it changes, and runs the operator
# in the foreground (Ctrl-C stops it; `make cluster-down` stops the cluster).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KUBECONFIG="${KUBECONFIG:-$root/.local/kubeconfig}"
kubectl="$root/.local/bin/kubectl"

"$kubectl" apply -f "$root/config/samples/example_v1_database.yaml"
# Status as it changes, next to the operator's logs.
"$kubectl" get databases --all-namespaces --watch \
	-o custom-columns='NAME:.metadata.name,ENGINE:.spec.engine,VERSION:.status.version,READY:.status.readyReplicas,PHASE:.status.phase,PRIMARY:.status.currentPrimary' &
watcher=$!
trap 'kill $watcher 2>/dev/null || true' EXIT
"$root/bin/manager" --leader-elect=false --metrics-bind-address=127.0.0.1:8443 \
	--health-probe-bind-address=127.0.0.1:8081 --zap-devel "$@"
