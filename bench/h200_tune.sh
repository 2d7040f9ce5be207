#!/usr/bin/env bash
# One call on the lent H200: autotune the fp16 coopmat kernels (flash_cm
# forward at N 1024 and 4096; bwd_cm_dkdv + bwd_cm_dq at N 2048), then the
# fp16 forward+backward grid with the tuned cache beside PyTorch SDPA flash
# in the same run; bwd_cm variants and determinism first.
# Stage: ../shared/gpu/stage.sh ./attention ./vkattn
# Run (device tool, carry [".gpu"]): bash .gpu/run.sh bash bench/h200_tune.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1
# 8 files: info.txt vkattn.log tune-bwd.log tune-fwd.log tune-v1.json torch.json flashvk.json compare.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$out/info.txt"
t0=$SECONDS
(cd vkattn; timeout 60 ../.gpu/bin/vkattn.test -test.v -test.run 'TestBwdCM' > "$out/vkattn.log" 2>&1; echo "bwdcm rc=$?")
timeout 60 .gpu/bin/attention.test -test.v -test.run 'TestConformanceVulkanCoopmat/deterministic' >> "$out/vkattn.log" 2>&1; echo "determinism rc=$? ($((SECONDS-t0)) s)"
grep -E -- '--- (FAIL)' "$out/vkattn.log" | head; echo "pass $(grep -c -- '--- PASS' "$out/vkattn.log")"
cache="$out/tune-v1.json"
t0=$SECONDS
timeout 200 .gpu/bin/flashvk tune --dtype f16 --dir bwd --n 2048 --max-candidates 12 --budget 170s --cache "$cache" > "$out/tune-bwd.log" 2>&1
echo "tune bwd rc=$? ($((SECONDS-t0)) s)"; tail -12 "$out/tune-bwd.log"
t0=$SECONDS
timeout 150 .gpu/bin/flashvk tune --dtype f16 --dir fwd --n 1024,4096 --max-candidates 10 --budget 130s --cache "$cache" > "$out/tune-fwd.log" 2>&1
echo "tune fwd rc=$? ($((SECONDS-t0)) s)"; tail -12 "$out/tune-fwd.log"
t0=$SECONDS
timeout 60 python3 bench/torch_sdpa.py --dtype float16 --backend flash --backward --iters 30 --json "$out/torch.json" >> "$out/info.txt" 2>&1
echo "torch rc=$? ($((SECONDS-t0)) s)"
t0=$SECONDS
FLASHVK_TUNE_CACHE="$cache" timeout 200 .gpu/bin/flashvk bench --backend vulkan --dtype float16 --backward --iters 30 --warmup 10 --rotate 2 --progress lines --json "$out/flashvk.json" >> "$out/info.txt" 2>&1
echo "flashvk rc=$? ($((SECONDS-t0)) s)"
.gpu/bin/flashvk compare --format plain "$out/torch.json" "$out/flashvk.json" > "$out/compare.txt" 2>&1; tail -52 "$out/compare.txt"
grep -i "step\|unsteady" "$out/info.txt" | head -5
