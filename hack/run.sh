#!/usr/bin/env bash
# `make run`: with the local cluster up and the CRDs installed, registers the
# operator's webhooks (certificate from the local cluster's CA), runs the
# operator, applies the sample once its webhooks serve, and prints the
# Database's status as it changes next to the operator's logs (Ctrl-C stops
# the operator; `make cluster-down` stops the cluster).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KUBECONFIG="${KUBECONFIG:-$root/.local/kubeconfig}"
kubectl="$root/.local/bin/kubectl"
webhook_addr=127.0.0.1:9443

"$root/.local/localcluster" webhooks --dir "$root/.local" \
	--manifests "$root/config/webhook/manifests.yaml" --webhook-addr "$webhook_addr"
# The operator's image, which the process node maps to bin/manager: backup
# and restore Jobs take the binary from it.
RELATED_IMAGE_MANAGER=example.com/database-operator/manager:dev \
	"$root/bin/manager" --leader-elect=false --metrics-bind-address=127.0.0.1:8443 \
	--health-probe-bind-address=127.0.0.1:8081 --zap-devel \
	--webhook-host=127.0.0.1 --webhook-port="${webhook_addr##*:}" --webhook-cert-dir="$root/.local/webhook-certs" "$@" &
manager=$!
watcher=
trap 'kill $manager $watcher 2>/dev/null || true; wait $manager 2>/dev/null || true' EXIT
# Every Database write goes through the webhooks: wait until they serve
# (/readyz includes the webhook server).
ready() {
	exec 3<>/dev/tcp/127.0.0.1/8081 || return 1
	printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3
	local status
	read -r _ status _ <&3 || true
	exec 3<&-
	[[ "$status" == 200 ]]
}
for _ in $(seq 1 300); do
	ready 2>/dev/null && break
	kill -0 $manager 2>/dev/null || { wait $manager; exit 1; }
	sleep 0.1
done
"$kubectl" apply -f "$root/config/samples/example_v1_database.yaml"
# Status as it changes, next to the operator's logs.
"$kubectl" get databases --all-namespaces --watch \
	-o custom-columns='NAME:.metadata.name,ENGINE:.spec.engine,VERSION:.status.version,READY:.status.readyReplicas,PHASE:.status.phase,PRIMARY:.status.currentPrimary' &
watcher=$!
wait $manager
