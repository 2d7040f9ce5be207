#!/usr/bin/env bash
# compile-shader.sh SRC.comp DTYPE OUT.spv [TARGET_ENV [VARIANT]]
# (FLASHVK_TOOLCHAIN=16 in the environment: the pinned glslang 16 toolchain,
# for the bf16 cooperative-matrix modules)
# Compiles one flashvk kernel for one storage type (f32, f16 or bf16) with the
# pinned glslang (scripts/glslang.sh), no debug info, Vulkan 1.1 / SPIR-V 1.3
# unless TARGET_ENV says otherwise (the cooperative-matrix kernels need
# vulkan1.3 / SPIR-V 1.6), and validates the result with the pinned
# spirv-val. OUT is written only when both succeed. Includes resolve in
# SRC's folder, then in internal/shaders (params.glsl and the other shared
# headers, for bench/gemm's kernels). VARIANT addr adds -DADDRESSED=1 (the
# NAME.addr.DTYPE.spv modules: operands through buffer device addresses,
# see params.glsl); base (the default) adds nothing.
set -euo pipefail
[ $# -ge 3 ] && [ $# -le 5 ] || { echo "usage: compile-shader.sh SRC.comp f32|f16|bf16 OUT.spv [vulkan1.1|vulkan1.3 [base|addr]]" >&2; exit 2; }
src=$1 dtype=$2 out=$3 target_env=${4:-vulkan1.1} variant=${5:-base}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case "$dtype" in
f32) defs=() ;;
f16) defs=(-DSTORAGE_F16=1) ;;
bf16) defs=(-DSTORAGE_BF16=1) ;;
*) echo "compile-shader.sh: unknown dtype '$dtype' (want f32, f16 or bf16)" >&2; exit 2 ;;
esac
case "$variant" in
base) ;;
addr) defs+=(-DADDRESSED=1) ;;
*) echo "compile-shader.sh: unknown variant '$variant' (want base or addr)" >&2; exit 2 ;;
esac
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# glslangValidator prints the source name on stdout; keep only diagnostics.
if ! log=$("$here/glslang.sh" -V --target-env "$target_env" -S comp -I"$(dirname "$src")" \
	-I"$here/../internal/shaders" "${defs[@]}" -o "$tmp" "$src" 2>&1); then
	echo "$log" >&2
	exit 1
fi
printf '%s\n' "$log" | grep -v -x -F "$src" >&2 || true
"$here/spirv-tool.sh" val --target-env "$target_env" "$tmp"
mv "$tmp" "$out"
