#!/usr/bin/env python3
"""Time PyTorch SDPA on the FlashAttention-2 paper grid and write flashvk-bench/1 JSON.

Needs PyTorch with CUDA; bench/gpu.sh runs it beside `flashvk bench` in the same run:
    python3 bench/torch_sdpa.py --backend flash --dtype float16 --backward --json torch-float16.json
Same grid, FLOP convention and statistics as `flashvk bench`: B = tokens/N,
H = hidden/d, forward 4*B*H*N*N*d (halved when causal), backward 2.5x that;
warm-up, then the median of many runs timed with CUDA events around each call,
cycling through --rotate input sets so the L2 cache does not flatter small
problems.
"""
import argparse
import datetime
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def grid(dims, seqs, causals, tokens, hidden):
    for d in dims:
        for n in seqs:
            for c in causals:
                yield d, n, c, max(tokens // n, 1), max(hidden // d, 1)


def quantile(xs, q):
    s = sorted(xs)
    return s[min(max(int(q * (len(s) - 1) + 0.5), 0), len(s) - 1)]


def time_calls(fn, warmup, iters):
    for _ in range(warmup):
        fn(0)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))  # ms
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="flash", choices=BACKENDS)
    ap.add_argument("--dtype", default="float16", choices=DTYPES)
    ap.add_argument("--dim", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--seq", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", default="both", choices=["true", "false", "both"])
    ap.add_argument("--tokens", type=int, default=16384, help="B*N (default 16384)")
    ap.add_argument("--hidden", type=int, default=2048, help="H*d (default 2048)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--rotate", type=int, default=4)
    ap.add_argument("--backward", action="store_true", help="also time the backward")
    ap.add_argument("--json", help="write results here")
    a = ap.parse_args()

    dev = torch.device("cuda")
    dt = DTYPES[a.dtype]
    causals = {"true": [True], "false": [False], "both": [False, True]}[a.causal]
    results = []
    for d, n, causal, b, h in grid(a.dim, a.seq, causals, a.tokens, a.hidden):
        # BHSD, as SDPA takes it.
        sets = []
        for _ in range(a.rotate):
            q, k, v = (torch.randn(b, h, n, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
            sets.append((q, k, v, torch.randn(b, h, n, d, device=dev, dtype=dt)))
        flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        directions = ["fwd", "bwd"] if a.backward else ["fwd"]
        for direction in directions:
            with sdpa_kernel(BACKENDS[a.backend]):
                if direction == "fwd":
                    def fn(i):
                        q, k, v, _ = sets[i % len(sets)]
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    f = flops
                else:
                    outs = [F.scaled_dot_product_attention(q, k, v, is_causal=causal) for q, k, v, _ in sets]

                    def fn(i):
                        j = i % len(sets)
                        q, k, v, do = sets[j]
                        torch.autograd.grad(outs[j], (q, k, v), do, retain_graph=True)
                    f = 2.5 * flops
                try:
                    ts = time_calls(fn, a.warmup, a.iters)
                except RuntimeError as e:  # backend refuses this shape
                    print(f"skip d={d} N={n} causal={causal} {direction}: {e}", file=sys.stderr)
                    continue
            med = statistics.median(ts)
            r = dict(direction=direction, dtype=a.dtype, B=b, H=h, Hkv=h, Nq=n, Nk=n, d=d, dv=d,
                      causal=causal, align="top-left", kernel=f"sdpa-{a.backend}",
                      median_ms=med, p10_ms=quantile(ts, 0.1), p90_ms=quantile(ts, 0.9),
                      tflops=f / (med * 1e-3) / 1e12, iters=a.iters, clock="cuda-events")
            results.append(r)
            print(f"{direction} {a.dtype} d={d:3d} N={n:5d} causal={int(causal)} B={b:2d} H={h:2d} "
                  f"{med:8.3f} ms {r['tflops']:7.1f} TFLOP/s", flush=True)
        del sets
        torch.cuda.empty_cache()

    doc = {
        "schema": "flashvk-bench/1", "tool": "torch", "version": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": torch.cuda.get_device_name(), "driver": f"CUDA {torch.version.cuda}",
                   "backend": f"torch-sdpa-{a.backend}"},
        "results": results,
    }
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
