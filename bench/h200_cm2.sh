#!/usr/bin/env bash
# Rerun of the fp16 forward grid (auto kernel = flash_cm on the H200) beside
# PyTorch SDPA flash, after the diagnostic showed run-16's spread was not the
# kernel: longer warm-up, torch first so the GPU clocks are up.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 bench/torch_sdpa.py --dtype float16 --backend flash --iters 30 --json "$out/torch_fp16_fwd.json" > "$out/torch_fp16_fwd.txt" 2>&1; echo "torch rc=$?"
.gpu/bin/flashvk bench --backend vulkan --dtype float16 --iters 30 --warmup 10 --rotate 2 --progress none --json "$out/flashvk_cm_fp16.json" > "$out/flashvk_cm_fp16.txt" 2>&1; echo "bench rc=$?"
.gpu/bin/flashvk compare --format plain "$out/torch_fp16_fwd.json" "$out/flashvk_cm_fp16.json" | tee "$out/compare_cm_fp16.txt"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$out/smi.txt"
