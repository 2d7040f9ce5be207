#!/usr/bin/env bash
# bench/gemm/build.sh: compiles the benchmark's SPIR-V with the pinned
# toolchain (scripts/glslang.sh, scripts/spirv-tool.sh), target Vulkan 1.3
# (cooperative matrices need SPIR-V 1.6 here), and validates each module:
#   bench/gemm/shaders/gemm_*.comp      -> bench/gemm/shaders/gemm_*.spv
#   internal/shaders/flash_cm*.comp (fp16 only)  -> bench/gemm/shaders/flash_cm*.spv
# The .spv files are committed and embedded by the bench program (go:embed).
# Run from anywhere: bench/gemm/build.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out="$root/bench/gemm/shaders"
env=vulkan1.3
compile() { # src out [defs...]
	local src=$1 dst=$2
	shift 2
	local tmp="$dst.tmp.$$"
	if ! log=$("$root/scripts/glslang.sh" -V --target-env "$env" -S comp -I"$root/internal/shaders" "$@" -o "$tmp" "$src" 2>&1); then
		echo "$log" >&2
		rm -f "$tmp"
		exit 1
	fi
	"$root/scripts/spirv-tool.sh" val --target-env "$env" "$tmp"
	mv "$tmp" "$dst"
	echo "  SPV  ${dst#"$root"/}"
}
for s in "$root"/bench/gemm/shaders/gemm_*.comp; do
	compile "$s" "${s%.comp}.spv"
done
for s in "$root"/internal/shaders/flash_cm*.comp; do
	n=$(basename "${s%.comp}")
	compile "$s" "$out/$n.spv" -DSTORAGE_F16=1
done
