#!/usr/bin/env bash
# One call on the lent H200 for the coopmat forward inside the library: the
# conformance suite on flash_cm, then `flashvk bench` fp16 forward (auto
# kernel selection) beside PyTorch SDPA flash in the same run.
# Stage: ../shared/gpu/stage.sh ./attention ./vkattn ; run: bash .gpu/run.sh bash bench/h200_cm.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1
.gpu/bin/attention.test -test.v -test.run 'Coopmat|TestConformanceVulkan$/concurrent' > "$out/conformance_cm.log" 2>&1
echo "conformance rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|uses' "$out/conformance_cm.log" | head -30
grep -c -- '--- PASS' "$out/conformance_cm.log"; grep -- '--- FAIL' "$out/conformance_cm.log" | head
.gpu/bin/flashvk bench --backend vulkan --dtype float16 --iters 20 --warmup 3 --rotate 2 --progress lines --json "$out/flashvk_cm_fp16.json" > "$out/flashvk_cm_fp16.txt" 2>&1; echo "bench rc=$?"
python3 bench/torch_sdpa.py --dtype float16 --backend flash --iters 30 --json "$out/torch_fp16_fwd.json" > "$out/torch_fp16_fwd.txt" 2>&1; echo "torch rc=$?"
.gpu/bin/flashvk compare --format plain "$out/torch_fp16_fwd.json" "$out/flashvk_cm_fp16.json" | tee "$out/compare_cm_fp16.txt"
