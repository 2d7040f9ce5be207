#!/usr/bin/env bash
# glslangValidator for flashvk's shaders: $GLSLANG if set, else the pinned
# Debian trixie build managed by scripts/toolchain.sh (see scripts/glslang.lock).
# With FLASHVK_TOOLCHAIN=16: $GLSLANG16 if set, else the pinned glslang 16
# (GL_EXT_bfloat16; the bf16 cooperative-matrix modules only).
set -euo pipefail
if [ "${FLASHVK_TOOLCHAIN:-15}" = 16 ]; then
	if [ -n "${GLSLANG16:-}" ]; then
		exec "$GLSLANG16" "$@"
	fi
	exec "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" run16 glslangValidator "$@"
fi
if [ -n "${GLSLANG:-}" ]; then
	exec "$GLSLANG" "$@"
fi
exec "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" run glslangValidator "$@"
