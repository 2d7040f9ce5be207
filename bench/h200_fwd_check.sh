#!/usr/bin/env bash
# After the flash_cm default change (MODE 1 small tiles below Nq 2048):
# the fp16 and bf16 forward conformance on the H200 (short cases), then the
# fp16 and bf16 forward grids beside PyTorch SDPA flash, no tune cache.
# Stage: ../shared/gpu/stage.sh ./attention; run: bash .gpu/run.sh bash bench/h200_fwd_check.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1 FLASHVK_TUNE=off
t0=$SECONDS
timeout 150 .gpu/bin/attention.test -test.v -test.run 'TestConformanceVulkanCoopmat/^(float16|bfloat16)$' > "$out/conf.log" 2>&1
echo "conformance rc=$? ($((SECONDS-t0)) s) pass $(grep -c -- '--- PASS' "$out/conf.log") fail $(grep -c -- '--- FAIL' "$out/conf.log")"; grep -- '--- FAIL' "$out/conf.log" | head
grep "rel_l2 .* (tol" "$out/conf.log" | awk '{for(i=1;i<=NF;i++){if($i=="rel_l2"){r=$(i+1)} if($i=="(tol"){t=$(i+1); sub(/\)/,"",t)}} if (t>0) printf "%.2f\n", r/t}' | sort -n | tail -1 | sed 's/^/worst error\/bound: /'
gzip -f "$out/conf.log"
b="--backend vulkan --iters 30 --warmup 10 --rotate 2 --progress none"
for dt in float16 bfloat16; do
  timeout 30 python3 bench/torch_sdpa.py --dtype $dt --backend flash --iters 30 --json "$out/torch_$dt.json" > /dev/null 2>&1; echo "torch $dt rc=$?"
  timeout 100 .gpu/bin/flashvk bench --dtype $dt $b --json "$out/flashvk_$dt.json" > /dev/null 2>"$out/err_$dt.txt"; echo "flashvk $dt rc=$?"
  .gpu/bin/flashvk compare --format plain "$out/torch_$dt.json" "$out/flashvk_$dt.json" >> "$out/compare.txt" 2>&1
done
cat "$out/compare.txt"
