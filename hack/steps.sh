#!/usr/bin/env bash
# Runs make targets one after another, as a target's prerequisites would run,
# and prints how long each took (also when one fails), so that a CI log says
# where its minutes went.
#
# Usage: hack/steps.sh TARGET...
set -uo pipefail

names=() secs=()
summary() {
	echo "== steps"
	for i in "${!names[@]}"; do
		printf '%-20s %5ds\n' "${names[$i]}" "${secs[$i]}"
	done
}
for target in "$@"; do
	start=$SECONDS
	"${MAKE:-make}" --no-print-directory "$target"
	rc=$?
	names+=("$target") secs+=($((SECONDS - start)))
	if [[ $rc -ne 0 ]]; then
		summary
		echo "== $target failed" >&2
		exit "$rc"
	fi
done
summary
