#!/usr/bin/env bash
# Final conformance on the H200: the coopmat suite (fp16 and bf16 forward
# and backward on cooperative matrices, the scalar fp32 in the same engine,
# determinism), the bf16 coopmat and bwd_cm variant tests.
# Stage: ../shared/gpu/stage.sh ./attention ./vkattn; run: bash .gpu/run.sh bash bench/h200_final_conf.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/info.txt"
.gpu/bin/flashvk devices >> "$out/info.txt" 2>&1
t0=$SECONDS
(cd vkattn; timeout 150 ../.gpu/bin/vkattn.test -test.v -test.run 'TestBF16CM|TestBwdCM|TestCMSupportBF16|TestBF16CMSelection' > "$out/vkattn.log" 2>&1; echo "vkattn rc=$? ($((SECONDS-t0)) s)")
echo "pass $(grep -c -- '--- PASS' "$out/vkattn.log") fail $(grep -c -- '--- FAIL' "$out/vkattn.log") skip $(grep -c -- '--- SKIP' "$out/vkattn.log")"; grep -E -- '--- (FAIL|SKIP)' "$out/vkattn.log" | head; grep -E "SKIP|skip" "$out/vkattn.log" | head -3
t0=$SECONDS
timeout 420 .gpu/bin/attention.test -test.v -test.run 'TestConformanceVulkanCoopmat' > "$out/conf.log" 2>&1
echo "conformance rc=$? ($((SECONDS-t0)) s)"
echo "pass $(grep -c -- '--- PASS' "$out/conf.log") fail $(grep -c -- '--- FAIL' "$out/conf.log")"; grep -- '--- FAIL' "$out/conf.log" | head -20
grep -E 'runs ' "$out/conf.log" | head -9
grep "rel_l2 .* (tol" "$out/conf.log" | awk '{for(i=1;i<=NF;i++){if($i=="rel_l2"){r=$(i+1)} if($i=="(tol"){t=$(i+1); sub(/\)/,"",t)}} if (t>0) printf "%.2f\n", r/t}' | sort -n | tail -1 | sed 's/^/worst error\/bound: /'
tail -3 "$out/conf.log"
gzip -f "$out/conf.log"
