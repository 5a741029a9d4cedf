#!/usr/bin/env bash
# Generates the OLM bundle for VERSION into bundle/ (and bundle.Dockerfile)
# from config/manifests with the pinned operator-sdk, then validates it with
# the operatorframework suite, failing on any error or warning.
#
# Env: VERSION (x.y.z), CREATED_AT (the release time written into the CSV,
#      fixed per version so that regenerating changes nothing), IMAGE_REPO.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${VERSION:?}" "${CREATED_AT:?}"
repo="${IMAGE_REPO:-example.com/database-operator}"
kube_bin="$(hack/build-tools.sh cluster)"
sdk_bin="$(hack/build-tools.sh olm)"

# generate bundle only writes files: start empty, so a manifest dropped
# from config/ is dropped from the bundle too.
rm -rf bundle/manifests bundle/metadata bundle/tests

# config/ names every image of this project :latest; a release pins them.
"$kube_bin/kubectl" kustomize config/manifests |
	sed -e "s#$repo/\([a-z-]*\):latest#$repo/\1:v$VERSION#g" |
	"$sdk_bin/operator-sdk" generate bundle -q --overwrite --version "$VERSION" \
		--channels candidate,stable --default-channel stable \
		--package database-operator --output-dir bundle
sed -i -e "s/^    createdAt: .*/    createdAt: \"$CREATED_AT\"/" bundle/manifests/database-operator.clusterserviceversion.yaml

out="$("$sdk_bin/operator-sdk" bundle validate ./bundle --select-optional suite=operatorframework 2>&1)"
echo "$out"
if grep -qiE 'level=(warning|error)' <<<"$out"; then
	echo "bundle validation reported warnings or errors" >&2
	exit 1
fi
