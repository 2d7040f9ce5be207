#!/usr/bin/env bash
# glslangValidator for flashvk's shaders: $GLSLANG if set, else the pinned
# Debian trixie build managed by scripts/toolchain.sh (see scripts/glslang.lock).
set -euo pipefail
if [ -n "${GLSLANG:-}" ]; then
	exec "$GLSLANG" "$@"
fi
exec "$(dirname "${BASH_SOURCE[0]}")/toolchain.sh" run glslangValidator "$@"
