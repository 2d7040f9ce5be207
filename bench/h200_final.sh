#!/usr/bin/env bash
# Final H200 run: the coopmat conformance backward (fp16, bf16 on
# cooperative matrices; fp32 scalar) and determinism, then the fp16 and bf16
# forward+backward grids beside PyTorch SDPA flash in the same run.
# (The forward conformance of every dtype ran in h200_final_conf.sh.)
# Stage: ../shared/gpu/stage.sh ./attention ./vkattn; run: bash .gpu/run.sh bash bench/h200_final.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/info.txt"
t0=$SECONDS
timeout 240 .gpu/bin/attention.test -test.v -test.run 'TestConformanceVulkanCoopmat/^(backward|deterministic)$' > "$out/conf.log" 2>&1
echo "conformance rc=$? ($((SECONDS-t0)) s) pass $(grep -c -- '--- PASS' "$out/conf.log") fail $(grep -c -- '--- FAIL' "$out/conf.log")"; grep -- '--- FAIL' "$out/conf.log" | head
for dt in float16 bfloat16; do grep "rel_l2 .* (tol" "$out/conf.log" | grep -v "tol 1e-05" | awk '{for(i=1;i<=NF;i++){if($i=="rel_l2"){r=$(i+1)} if($i=="(tol"){t=$(i+1); sub(/\)/,"",t)}} if (t>0) printf "%.2f\n", r/t}' | sort -n | tail -1 | sed 's/^/worst 16-bit error\/bound: /'; break; done
gzip -f "$out/conf.log"
b="--backend vulkan --backward --iters 30 --warmup 10 --rotate 2 --progress none"
t0=$SECONDS
timeout 40 python3 bench/torch_sdpa.py --dtype float16 --backend flash --backward --iters 30 --json "$out/torch_fp16.json" >> "$out/info.txt" 2>&1; echo "torch fp16 rc=$?"
timeout 150 .gpu/bin/flashvk bench --dtype float16 $b --json "$out/flashvk_fp16.json" >> "$out/info.txt" 2>&1; echo "flashvk fp16 rc=$? ($((SECONDS-t0)) s)"
t0=$SECONDS
timeout 40 python3 bench/torch_sdpa.py --dtype bfloat16 --backend flash --backward --iters 30 --json "$out/torch_bf16.json" >> "$out/info.txt" 2>&1; echo "torch bf16 rc=$?"
timeout 150 .gpu/bin/flashvk bench --dtype bfloat16 $b --json "$out/flashvk_bf16.json" >> "$out/info.txt" 2>&1; echo "flashvk bf16 rc=$? ($((SECONDS-t0)) s)"
{ .gpu/bin/flashvk compare --format plain "$out/torch_fp16.json" "$out/flashvk_fp16.json"
  .gpu/bin/flashvk compare --format plain "$out/torch_bf16.json" "$out/flashvk_bf16.json"; } > "$out/compare.txt" 2>&1
cat "$out/compare.txt"
grep -i "unsteady\|error" "$out/info.txt" | head -5
