#!/usr/bin/env python3
"""Time torch.matmul fp16 (cuBLAS) at the GEMM benchmark's sizes; the anchor for bench/gemm.

    python3 bench/gemm/torch_matmul.py --json $OUT/torch_mm.json

Random normal inputs (never zeros), CUDA events around each call, warm-up,
median of --iters. 2·n³ FLOPs per call.
"""
import argparse
import datetime
import json
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = []
    for n in a.sizes:
        for dt, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
            x = torch.randn(n, n, device="cuda", dtype=dt)
            y = torch.randn(n, n, device="cuda", dtype=dt)
            for _ in range(a.warmup):
                torch.matmul(x, y)
            torch.cuda.synchronize()
            ts = []
            for _ in range(a.iters):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                torch.matmul(x, y)
                e.record()
                e.synchronize()
                ts.append(s.elapsed_time(e))
            med = statistics.median(ts)
            tf = 2 * n**3 / (med * 1e-3) / 1e12
            print(f"torch.matmul {name} {n}^3: {med:.3f} ms {tf:.1f} TFLOP/s", flush=True)
            if name == "float16":
                res.append(dict(size=n, dtype=name, median_ms=med, tflops=tf, kernel="torch.matmul"))
            else:
                res.append(dict(size=-n, dtype=name, median_ms=med, tflops=tf, kernel="torch.matmul"))
            del x, y
    doc = dict(tool="torch", version=torch.__version__,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               device=dict(name=torch.cuda.get_device_name(), driver=f"CUDA {torch.version.cuda}"), results=res)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
