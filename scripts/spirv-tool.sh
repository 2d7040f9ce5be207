#!/usr/bin/env bash
# Runs a SPIRV-Tools program of the pinned toolchain:
#   scripts/spirv-tool.sh val|dis|as|opt|cfg ... [ARGS]
# With SPIRV_TOOLS_DIR set, runs $SPIRV_TOOLS_DIR/spirv-<tool> instead.
# With FLASHVK_TOOLCHAIN=16, the glslang 16 toolchain's spirv-tools
# (SPV_KHR_bfloat16), or $SPIRV_TOOLS16_DIR/spirv-<tool> when set.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: spirv-tool.sh TOOL [ARGS...]  (TOOL: val, dis, opt, ...)" >&2; exit 2; }
tool=spirv-${1#spirv-}
shift
if [ "${FLASHVK_TOOLCHAIN:-15}" = 16 ]; then
	if [ -n "${SPIRV_TOOLS16_DIR:-}" ]; then
		exec "$SPIRV_TOOLS16_DIR/$tool" "$@"
	fi
	exec "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" run16 "$tool" "$@"
fi
if [ -n "${SPIRV_TOOLS_DIR:-}" ]; then
	exec "$SPIRV_TOOLS_DIR/$tool" "$@"
fi
exec "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" run "$tool" "$@"
