#!/usr/bin/env bash
# shaders-check.sh COMMITTED_DIR FRESH_DIR [REBUILD]
# Fails if the committed SPIR-V differs from a fresh build, or if either side
# has a .spv the other lacks. REBUILD is the command the messages suggest
# (default: make shaders).
set -euo pipefail
committed=$1 fresh=$2 rebuild=${3:-make shaders}
status=0
for f in "$fresh"/*.spv; do
	n=$(basename "$f")
	if [ ! -f "$committed/$n" ]; then
		echo "shaders-check: $committed/$n is missing (run '$rebuild' and commit it)" >&2
		status=1
	elif ! cmp -s "$f" "$committed/$n"; then
		echo "shaders-check: $committed/$n differs from a fresh build (run '$rebuild' and commit it)" >&2
		status=1
	fi
done
for f in "$committed"/*.spv; do
	[ -e "$f" ] || continue
	n=$(basename "$f")
	if [ ! -f "$fresh/$n" ]; then
		echo "shaders-check: $committed/$n is not built from any source (stale: delete it)" >&2
		status=1
	fi
done
[ $status -eq 0 ] && echo "shaders-check: $(ls "$fresh"/*.spv | wc -l) SPIR-V files match their sources"
exit $status
