#!/usr/bin/env bash
# `make deploy` / `make undeploy`: the operator on the cluster in KUBECONFIG
# with kustomize, as config/default has it (cert-manager must run there: it
# issues the webhooks' certificate), with the manager image you pushed:
#
#   make images PUSH=<registry host:port>     # or build the Dockerfile
#   make deploy IMG=<registry>/database-operator/manager:<tag>
#   make undeploy                             # removes the CRDs too, and with them every Database
#
# The overlay is written to .local/deploy (never into config/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kubectl="$(command -v kubectl || true)"
[[ -n "$kubectl" ]] || kubectl="$("$root/hack/build-tools.sh" cluster)/kubectl"
overlay="$root/.local/deploy"

write_overlay() {
	if [[ -z "${IMG:-}" || "$IMG" != *:* ]]; then
		echo "make deploy needs IMG=<registry>/<repository>:<tag>: the manager image, pushed where the cluster pulls from" >&2
		exit 2
	fi
	mkdir -p "$overlay"
	cat >"$overlay/kustomization.yaml" <<YAML
# Written by hack/deploy.sh for IMG=$IMG.
resources:
  - ../../config/default
images:
  - name: example.com/database-operator/manager
    newName: ${IMG%:*}
    newTag: ${IMG##*:}
patches:
  # Backup and restore Jobs run the manager binary from the same image.
  - target: {kind: Deployment, name: database-operator-controller-manager}
    patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: database-operator-controller-manager}
      spec:
        template:
          spec:
            containers:
              - name: manager
                env:
                  - {name: RELATED_IMAGE_MANAGER, value: "$IMG"}
YAML
}

case "${1:-}" in
render) # what apply would apply
	write_overlay
	"$kubectl" kustomize "$overlay"
	;;
apply)
	write_overlay
	"$kubectl" apply --server-side --field-manager=database-operator-deploy -k "$overlay"
	"$kubectl" -n database-operator-system rollout status deployment/database-operator-controller-manager --timeout=5m
	;;
delete)
	if [[ ! -f "$overlay/kustomization.yaml" ]]; then
		echo "nothing deployed from here (.local/deploy is missing)" >&2
		exit 0
	fi
	"$kubectl" delete --ignore-not-found -k "$overlay"
	;;
*)
	echo "usage: hack/deploy.sh render|apply|delete" >&2
	exit 2
	;;
esac
