#!/usr/bin/env bash
# Runs a SPIRV-Tools program of the pinned toolchain:
#   scripts/spirv-tool.sh val|dis|as|opt|cfg ... [ARGS]
# With SPIRV_TOOLS_DIR set, runs $SPIRV_TOOLS_DIR/spirv-<tool> instead.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: spirv-tool.sh TOOL [ARGS...]  (TOOL: val, dis, opt, ...)" >&2; exit 2; }
tool=spirv-${1#spirv-}
shift
if [ -n "${SPIRV_TOOLS_DIR:-}" ]; then
	exec "$SPIRV_TOOLS_DIR/$tool" "$@"
fi
exec "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" run "$tool" "$@"
