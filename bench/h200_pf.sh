#!/usr/bin/env bash
# bwd_cm_dkdv variants (PREFETCH, KVREG) on the H200: correctness of every
# variant, a tune sweep of bwd_cm_dkdv nearest the default, then the
# per-kernel split with the tuned cache.
# Stage: ../shared/gpu/stage.sh ./attention ./vkattn; run: bash .gpu/run.sh bash bench/h200_pf.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export FLASHVK_REQUIRE_VULKAN=1
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
(cd vkattn; timeout 90 ../.gpu/bin/vkattn.test -test.v -test.run 'TestBwdCM' > "$out/vkattn.log" 2>&1; echo "bwdcm rc=$?")
grep -c -- '--- PASS' "$out/vkattn.log"; grep -- '--- FAIL' "$out/vkattn.log" | head
timeout 240 .gpu/bin/flashvk tune --dtype f16 --dir bwd --family bwd_cm_dkdv --n 2048 --max-candidates 16 --budget 220s --cache "$out/tune-pf.json" > "$out/tune-pf.log" 2>&1
echo "tune rc=$?"; grep -A12 "^  dir" "$out/tune-pf.log"
grep -E "pf1|kv1" "$out/tune-pf.log" | grep -v REJ | sort -t',' -k2 | head -0
for k in "d=64 non-causal" "d=64 causal" "d=128 non-causal" "d=128 causal"; do grep "$k" "$out/tune-pf.log" | sed 's/verified (rel_l2 [0-9.e-]*), //' | sort -t',' -k2 -g | head -4 | cut -c1-120; done
FLASHVK_TUNE_CACHE="$out/tune-pf.json" timeout 100 .gpu/bin/flashvk bench --backend vulkan --dtype float16 --backward --per-kernel --dim 64,128 --seq 4096 --iters 20 --progress lines --json "$out/perkernel.json" > "$out/perkernel.txt" 2>&1
echo "perkernel rc=$?"; grep "kernel bwd_cm" "$out/perkernel.txt" | sed 's/^note: NVIDIA H200 //' | cut -c1-150; tail -6 "$out/perkernel.txt"
