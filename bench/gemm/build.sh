#!/usr/bin/env bash
# bench/gemm/build.sh [OUTDIR]: compiles the benchmark's own kernels
# (bench/gemm/shaders/*.comp) with the pinned toolchain through
# scripts/compile-shader.sh, target Vulkan 1.3 (cooperative matrices need
# SPIR-V 1.6), into OUTDIR/NAME.spv (default bench/gemm/shaders, where the
# .spv files are committed and embedded by the bench program):
#   gemm_khr, gemm_cm2   fp16 GEMMs with their own buffer types (no storage
#                        define: compile-shader.sh's f32)
#   flash_cm2            fp16 storage (params.glsl's STORAGE_F16)
# flashvk's production kernels (flash_cm, flash_cm_probe) are not built
# here: the program takes them from internal/shaders. `make shaders-check`
# rebuilds into a temporary folder and compares (make bench-shaders-check).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src="$root/bench/gemm/shaders"
out=${1:-$src}
mkdir -p "$out"
for k in gemm_khr:f32 gemm_cm2:f32 flash_cm2:f16; do
	name=${k%%:*}
	"$root/scripts/compile-shader.sh" "$src/$name.comp" "${k#*:}" "$out/$name.spv" vulkan1.3
	echo "  SPV  ${out#"$root"/}/$name.spv"
done
