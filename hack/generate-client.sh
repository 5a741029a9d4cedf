#!/usr/bin/env bash
# Generates the typed client of the Database API into pkg/client with the
# Kubernetes code-generator (pinned in hack/tools/code-generator, at the
# release of the main module's k8s.io modules): the apply configurations
# (applyconfiguration-gen: typed server-side apply), the clientset and its
# fake (client-gen), the listers (lister-gen) and the shared informer factory
# (informer-gen), for example.com/v1 and v1alpha1. make generate runs it;
# make verify-generated fails when pkg/client is stale.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
gen="$(hack/build-tools.sh code-generator)"
mod=example.com/database-operator
out=pkg/client
header=hack/boilerplate.go.txt

# The generators write into their output directories without removing what
# they no longer generate: start from empty ones.
rm -rf "$out/applyconfiguration" "$out/clientset" "$out/listers" "$out/informers"
"$gen/applyconfiguration-gen" --go-header-file "$header" \
	--output-dir "$out/applyconfiguration" --output-pkg "$mod/$out/applyconfiguration" ./api/v1 ./api/v1alpha1
"$gen/client-gen" --go-header-file "$header" --clientset-name versioned --input-base "" \
	--apply-configuration-package "$mod/$out/applyconfiguration" \
	--input "$mod/api/v1,$mod/api/v1alpha1" \
	--output-dir "$out/clientset" --output-pkg "$mod/$out/clientset"
"$gen/lister-gen" --go-header-file "$header" \
	--output-dir "$out/listers" --output-pkg "$mod/$out/listers" ./api/v1 ./api/v1alpha1
"$gen/informer-gen" --go-header-file "$header" \
	--versioned-clientset-package "$mod/$out/clientset/versioned" --listers-package "$mod/$out/listers" \
	--output-dir "$out/informers" --output-pkg "$mod/$out/informers" ./api/v1 ./api/v1alpha1
