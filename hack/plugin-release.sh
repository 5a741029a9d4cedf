#!/usr/bin/env bash
# `make plugin-release`: builds kubectl-database for each platform krew
# installs it on, packs each into a reproducible tar.gz (fixed times and
# owners, no gzip name or time: the same source gives the same sha256) and
# writes the krew manifest (config/krew/database.yaml filled in) beside them
# in .local/plugin. Env: VERSION, BASE_URL (where the archives are published).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.local/plugin"
: "${VERSION:?}" "${BASE_URL:?}"
rm -rf "$out" && mkdir -p "$out"
manifest="$(sed -e "s|VERSION|$VERSION|g" -e "s|BASE_URL|$BASE_URL|g" "$root/config/krew/database.yaml")"
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os="${platform%/*}" arch="${platform#*/}"
	dir="$out/kubectl-database_${os}_$arch"
	mkdir -p "$dir"
	(cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$dir/kubectl-database" ./cmd/kubectl-database)
	cp "$root/LICENSE" "$dir/" 2>/dev/null || true
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$dir" -cf - . | gzip -n >"$dir.tar.gz"
	sum="$(sha256sum "$dir.tar.gz" | cut -d' ' -f1)"
	manifest="${manifest//SHA256_${os}_$arch/$sum}"
	rm -rf "$dir"
	echo "kubectl-database_${os}_$arch.tar.gz  $sum"
done
printf '%s\n' "$manifest" | grep -v '^#' >"$out/database.yaml"
echo "krew manifest: $out/database.yaml (kubectl krew install --manifest=$out/database.yaml --archive=<archive>)"
