#!/usr/bin/env bash
# bench/gemm/run_h200.sh: the GEMM and coopmat attention measurements in one device call
# (about 3–4 minutes on an H200). Writes into $OUT (at most 8 files):
#   run.log        everything printed, the compact tables last
#   torch_mm.json  torch.matmul fp16/bf16 at 4096³ and 8192³ (cuBLAS anchor)
#   torch.json     PyTorch SDPA flash forward on the FA2 grid (flashvk-bench/1)
#   bench-gemm.json  GEMM variants (KHR coopmat, NV coopmat2)
#   bench-cm.json, attn-cm.json    flash_cm (KHR coopmat): probe, checks vs
#                                  float64, tile sweep, FA2 grid
#   bench-cm2.json, attn-cm2.json  flash_cm2 (NV coopmat2): same
# Each kernel family runs in its own process, so that a driver failure in
# one (e.g. a device loss) leaves the others' results.
#
# Prepare here (no Go toolchain on the device machine), from the repo root:
#   bench/gemm/build.sh                 # only after editing a .comp
#   ../shared/gpu/stage.sh && go build -o .gpu/bin/gemm ./bench/gemm
# then call the device tool with carry [".gpu"], kind nvidia-h200, and
#   command: bash bench/gemm/run_h200.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
L=$OUT/run.log
: >"$L"
log() { tee -a "$L"; }
date -u +%FT%TZ | log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1 | log
python3 bench/gemm/torch_matmul.py --json "$OUT/torch_mm.json" 2>&1 | log
python3 bench/torch_sdpa.py --dim 64 128 --json "$OUT/torch.json" 2>&1 | log
G=(.gpu/bin/gemm -out "$OUT" -torch-mm "$OUT/torch_mm.json" -torch-sdpa "$OUT/torch.json")
timeout 50 bash .gpu/run.sh "${G[@]}" -mode gemm -tag gemm 2>&1 | log
timeout 130 bash .gpu/run.sh "${G[@]}" -mode check,sweep,grid -only flash_cm/ -tag cm 2>&1 | log
timeout 50 bash .gpu/run.sh "${G[@]}" -mode check,sweep,grid -only flash_cm2 -tag cm2 2>&1 | log
echo "==================== summary ====================" | log
.gpu/bin/gemm -mode table -merge "$OUT/bench-gemm.json,$OUT/bench-cm.json,$OUT/bench-cm2.json" \
	-torch-mm "$OUT/torch_mm.json" -torch-sdpa "$OUT/torch.json" 2>&1 | log
