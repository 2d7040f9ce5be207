#!/usr/bin/env bash
# Diagnostic: is flash_cm's bimodal timing (p10 ≪ median on some cells of
# bench/results/h200-2026-11-22-flash_cm) tied to input rotation, or noise?
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu --format=csv | tee "$out/smi.txt"
for rot in 1 2; do
  for rep in 1 2; do
    .gpu/bin/flashvk bench --backend vulkan --dtype float16 --dim 64 --seq 2048,4096 --causal=false --iters 30 --warmup 5 --rotate $rot --progress none 2>&1 | sed "s/^/rot$rot rep$rep /" | tee -a "$out/diag.txt"
    .gpu/bin/flashvk bench --backend vulkan --dtype float16 --dim 128 --seq 8192 --causal=true --iters 30 --warmup 5 --rotate $rot --progress none 2>&1 | grep fwd | sed "s/^/rot$rot rep$rep /" | tee -a "$out/diag.txt"
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee -a "$out/smi.txt"
