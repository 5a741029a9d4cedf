#!/usr/bin/env bash
# `make run`: with the local cluster up and the CRDs installed, registers the
# operator's webhooks (certificate from the local cluster's CA), runs the
# operator (its logs go to .local/operator.log), applies the sample once its
# webhooks serve, and prints a short live view: a line each time a
# Database's phase, primary or instances change (kubectl database list
# --watch), and, once the sample runs, how to connect to it. Ctrl-C stops
# the operator; `make cluster-down` stops the cluster.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KUBECONFIG="${KUBECONFIG:-$root/.local/kubeconfig}"
kubectl="$root/.local/bin/kubectl"
plugin="$root/bin/kubectl-database"
webhook_addr=127.0.0.1:9443
log="$root/.local/operator.log"
sample="$root/config/samples/example_v1_database.yaml"
name="$(awk '$1 == "name:" {print $2; exit}' "$sample")"

"$root/.local/localcluster" webhooks --dir "$root/.local" \
	--manifests "$root/config/webhook/manifests.yaml" --webhook-addr "$webhook_addr"
RELATED_IMAGE_MANAGER=example.com/database-operator/manager:dev \
	"$root/bin/manager" --leader-elect=false --metrics-bind-address=127.0.0.1:8443 \
	--health-probe-bind-address=127.0.0.1:8081 \
	--webhook-host=127.0.0.1 --webhook-port="${webhook_addr##*:}" --webhook-cert-dir="$root/.local/webhook-certs" "$@" >"$log" 2>&1 &
manager=$!
watcher=
hints=
trap 'kill $manager $watcher $hints 2>/dev/null || true; wait $manager 2>/dev/null || true' EXIT
echo "operator started; its logs: $log (tail -f it in another terminal)"
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
	kill -0 $manager 2>/dev/null || { wait $manager || true; echo "the operator stopped; the end of its log:"; tail -20 "$log"; exit 1; }
	sleep 0.1
done
"$kubectl" apply -f "$sample"
echo "Databases, one line per change (kubectl database list -A --watch):"
"$plugin" list --all-namespaces --watch &
watcher=$!
# Once the sample runs, say how to reach it.
(
	until [[ "$("$kubectl" get database "$name" -o jsonpath='{.status.phase}' 2>/dev/null)" == Running ]]; do sleep 2; done
	engine="$("$kubectl" get database "$name" -o jsonpath='{.spec.engine}')"
	cat <<HINTS

$name is Running. Connect to it with the application account:
  export PATH=$root/bin:$root/.local/bin:\$PATH KUBECONFIG=$KUBECONFIG
  kubectl database connect $name              # opens $( [[ $engine == postgresql ]] && echo psql || echo mariadb ) on the primary
  kubectl database connect $name --print      # the connection string, and the port-forward way
  kubectl database status $name               # instances, positions, lag, backups
More: docs/README.md. Ctrl-C stops the operator; make cluster-down stops the cluster.

HINTS
) &
hints=$!
wait $manager
