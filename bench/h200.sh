#!/usr/bin/env bash
# One call on the lent H200: the Vulkan conformance suites, then the scalar
# fp32/fp16 forward+backward benchmark grid beside PyTorch SDPA in the same run.
# Stage first (here): ../shared/gpu/stage.sh ./attention ./vkattn
# Run (device tool, carry [".gpu"]): bash .gpu/run.sh bash bench/h200.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1
# At most 8 files come back from $OUT: info.txt, vkattn.log, conformance.log,
# four JSON result files and compare.txt.
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/info.txt"
.gpu/bin/flashvk devices | tee -a "$out/info.txt"
FLASHVK_DEBUG_TILES=1 .gpu/bin/vkattn.test -test.v 2>&1 > "$out/vkattn.log" | tail -40
tail -3 "$out/vkattn.log"
.gpu/bin/attention.test -test.v -test.run 'Vulkan|CPU' > "$out/conformance.log" 2>&1
echo "conformance rc=$?"; grep -E '^(--- |ok|FAIL|PASS)' "$out/conformance.log" | tail -25
grep -c -- '--- PASS' "$out/conformance.log"; grep -- '--- FAIL' "$out/conformance.log" | head
b="--iters 10 --warmup 2 --rotate 2 --progress lines"
.gpu/bin/flashvk bench --dtype float32 --backward $b --json "$out/flashvk_fp32.json" >> "$out/info.txt" 2>&1; echo "fp32 rc=$?"
python3 bench/torch_sdpa.py --dtype float32 --backend efficient --backward --iters 20 --json "$out/torch_fp32.json" >> "$out/info.txt" 2>&1; echo "torch fp32 rc=$?"
.gpu/bin/flashvk bench --dtype float16 --backward $b --json "$out/flashvk_fp16.json" >> "$out/info.txt" 2>&1; echo "fp16 rc=$?"
python3 bench/torch_sdpa.py --dtype float16 --backend flash --backward --iters 20 --json "$out/torch_fp16.json" >> "$out/info.txt" 2>&1; echo "torch fp16 rc=$?"
{ .gpu/bin/flashvk compare --format plain "$out/torch_fp32.json" "$out/flashvk_fp32.json"
  .gpu/bin/flashvk compare --format plain "$out/torch_fp16.json" "$out/flashvk_fp16.json"; } 2>&1 | tee "$out/compare.txt"
