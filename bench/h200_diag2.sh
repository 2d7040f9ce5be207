#!/usr/bin/env bash
# Per-kernel split of the coopmat backward and a full candidate sweep of
# both bwd_cm kernels at d128 (every legal tile, not only the 12 nearest).
# Stage: ../shared/gpu/stage.sh ./attention ./vkattn; run: bash .gpu/run.sh bash bench/h200_diag2.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 120 .gpu/bin/flashvk bench --backend vulkan --dtype float16 --backward --per-kernel --dim 64,128 --seq 1024,4096 --iters 20 --progress lines --json "$out/perkernel.json" > "$out/perkernel.txt" 2>&1
echo "perkernel rc=$?"; grep "kernel " "$out/perkernel.txt" | sed 's/^note: NVIDIA H200 //' | cut -c1-160
timeout 300 .gpu/bin/flashvk tune --dtype f16 --dir bwd --d 128 --causal=false --n 4096 --budget 280s --cache "$out/tune-d128.json" > "$out/tune-d128.log" 2>&1
echo "tune rc=$?"; sort -t, -k1 "$out/tune-d128.log" | grep -E "TFLOP/s" | sort -k2 -t']' | awk -F'ms, ' '{print $0}' | sort -t' ' -k1,1 | tail -80 | cut -c1-150
