#!/usr/bin/env bash
# One call on the lent H200 for the coopmat backward (bwd_cm) and bf16:
# conformance (flash_cm + bwd_cm suite, the scalar suite with bf16), the
# two-mode bwd_cm test, then the fp16 forward+backward grid beside PyTorch
# SDPA flash in the same run (flashvk JSON carries per-iteration times).
# Stage first (here): ../shared/gpu/stage.sh ./attention ./vkattn
# Run (device tool, carry [".gpu"]): bash .gpu/run.sh bash bench/h200_bwd.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1
# At most 8 files come back: info.txt conf.log vkattn.log torch.json flashvk.json compare.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$out/info.txt"
.gpu/bin/flashvk devices >> "$out/info.txt" 2>&1
t0=$SECONDS
timeout 240 .gpu/bin/attention.test -test.v -test.run 'TestConformanceVulkanCoopmat|TestConformanceVulkan$' > "$out/conf.log" 2>&1
echo "conformance rc=$? ($((SECONDS-t0)) s)"; grep -E '^(--- |ok|FAIL|PASS)' "$out/conf.log" | tail -6
echo "pass $(grep -c -- '--- PASS' "$out/conf.log") fail $(grep -c -- '--- FAIL' "$out/conf.log")"; grep -- '--- FAIL' "$out/conf.log" | head -20
grep -E 'runs (bwd|flash)' "$out/conf.log" | head -8
t0=$SECONDS
(cd vkattn 2>/dev/null; timeout 90 ../.gpu/bin/vkattn.test -test.v -test.run 'TestBwdCM' > "$out/vkattn.log" 2>&1; echo "vkattn rc=$? ($((SECONDS-t0)) s)")
grep -E -- '--- (PASS|FAIL)' "$out/vkattn.log" | tail -16
t0=$SECONDS
timeout 150 python3 bench/torch_sdpa.py --dtype float16 --backend flash --backward --iters 30 --json "$out/torch.json" >> "$out/info.txt" 2>&1
echo "torch rc=$? ($((SECONDS-t0)) s)"
t0=$SECONDS
timeout 240 .gpu/bin/flashvk bench --backend vulkan --dtype float16 --backward --iters 30 --warmup 10 --rotate 2 --progress lines --json "$out/flashvk.json" >> "$out/info.txt" 2>&1
echo "flashvk rc=$? ($((SECONDS-t0)) s)"
.gpu/bin/flashvk compare --format plain "$out/torch.json" "$out/flashvk.json" > "$out/compare.txt" 2>&1
cat "$out/compare.txt" | tail -60
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a "$out/info.txt"
