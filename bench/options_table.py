#!/usr/bin/env python3
"""The options table of bench/gpu.sh's options mode: each attention option
against the plain kernel, and against PyTorch, from one run's JSON files.

    python3 bench/options_table.py DIR
        reads DIR/flashvk-DTYPE-NAME.json and DIR/torch-DTYPE-NAME.json
        (flashvk-bench/1, as `flashvk bench --json` and bench/torch_sdpa.py
        write them; NAME is one of POINTS below, "alone" the packed batch's
        sequences run one by one) and prints, per dtype, head dim and
        direction, each option's median, TFLOP/s, its TFLOP/s as a fraction
        of plain's (the visible pairs are counted exactly, so a mask's
        saving is not a speed-up) and PyTorch's median, then the targets.
    python3 bench/options_table.py --make-inputs DIR --seq N
        writes DIR/doc.npy (a [1,1,N,N] boolean mask of four equal
        documents) and DIR/bias.npy (a dense [1,1,N,N] float16 bias, normal
        values, seed 1) for the mask and bias points (needs numpy).

Standard library only, but for --make-inputs.
"""
import argparse
import json
import math
import os
import sys

# The points: name, label. gpu.sh runs each with the flags it lists beside
# the same names; every point is causal but "full".
POINTS = [
    ("plain", "plain"),
    ("full", "plain, not causal"),
    ("window", "window 4095,0"),
    ("softcap", "softcap 50"),
    ("alibi", "ALiBi"),
    ("dropout", "dropout 0.1"),
    ("doc", "four-document mask"),
    ("bias", "dense N×N fp16 bias"),
    ("packed", "packed batch"),
    ("alone", "its sequences alone"),
]

# Targets: (point, what, bound) — the fraction of plain's TFLOP/s the
# option keeps, at least bound.
KEEP = [("softcap", 0.85), ("alibi", 0.85), ("dropout", 0.85)]
WINDOW_MAX = 1.15  # window time ÷ (full time × its visible-pair share)
PACKED_MAX = 1.1  # packed time ÷ the sum of its sequences alone
PADDED_MIN = 2.0  # PyTorch on the padded batch with a mask ÷ packed


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f).get("results", [])


def key(r):
    return (r["dtype"], r["d"], r["direction"])


def index(results):
    """One result per (dtype, d, direction); several (the sequences run
    alone) are kept as a list."""
    out = {}
    for r in results:
        out.setdefault(key(r), []).append(r)
    return out


def fmt_ms(x):
    return "—" if x is None else f"{x:.3f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def fmt_x(x):
    return "—" if x is None else f"{x:.2f}×"


def verdict(ok):
    return "met" if ok else "NOT met"


def table(d):
    fvk, trc = {}, {}  # (name, dtype, d, direction) → results
    for name, _ in POINTS:
        for dt in dtypes(d):
            for k, v in index(load(os.path.join(d, f"flashvk-{dt}-{name}.json"))).items():
                fvk[(name,) + k] = v
            for k, v in index(load(os.path.join(d, f"torch-{dt}-{name}.json"))).items():
                trc[(name,) + k] = v
    keys = sorted({k[1:] for k in fvk})
    if not keys:
        print(f"no flashvk results in {d}")
        return 1
    lines = []
    for k in keys:
        dt, dim, direction = k
        first = next(v[0] for kk, v in sorted(fvk.items()) if kk[1:] == k and kk[0] not in ("packed", "alone"))
        packed = (fvk.get(("packed",) + k) or [{}])[0].get("seqlens") or []
        head = f"== {dt} d{dim} {direction}: B {first['B']}, H {first['H']}, N {first['Nq']}, causal but where said"
        if packed:
            head += f"; packed: {len(packed)} sequences, {sum(packed)} tokens"
        lines.append(head)
        lines.append(f"{'option':<24} {'flashvk ms':>10} {'TFLOP/s':>8} {'× plain':>8} {'PyTorch ms':>10}  {'flashvk ÷ PyTorch time':>22}  PyTorch kernel")
        plain = fvk.get(("plain",) + k, [None])[0]
        med = {}
        for name, label in POINTS:
            rs = fvk.get((name,) + k)
            if not rs:
                continue
            if name == "alone":
                # The packed batch's sequences alone: the sum over the
                # batch's lengths, each length's median once per sequence.
                packed = fvk.get(("packed",) + k, [None])[0]
                by_n = {r["Nq"]: r["median_ms"] for r in rs}
                lens = (packed or {}).get("seqlens") or []
                if lens and all(n in by_n for n in lens):
                    med[name] = sum(by_n[n] for n in lens)
                    lines.append(f"{label:<24} {fmt_ms(med[name]):>10} {'':>8} {'':>8} {'':>10}  {'':>22}  (sum over {len(lens)} sequences)")
                continue
            r = rs[0]
            med[name] = r["median_ms"]
            keep = ratio(r["tflops"], plain["tflops"]) if plain and name not in ("plain", "packed") else None
            t = (trc.get((name,) + k) or [None])[0]
            tms = t["median_ms"] if t else None
            lines.append(f"{label:<24} {fmt_ms(r['median_ms']):>10} {r['tflops']:>8.3g} {fmt_x(keep) if keep else '':>8} "
                         f"{fmt_ms(tms):>10}  {fmt_x(ratio(r['median_ms'], tms)):>22}  {t['kernel'] if t else ''}")
        if any((n,) + k in fvk for n in ("doc", "bias")):
            lines.append("(the mask's and the bias's TFLOP/s count every pair the causal mask leaves, those they hide "
                         "included: their × plain is plain's time ÷ theirs)")
        lines.append("targets:")
        for name, bound in KEEP:
            r = (fvk.get((name,) + k) or [None])[0]
            if r and plain:
                x = r["tflops"] / plain["tflops"]
                lines.append(f"  {name} keeps ≥ {bound}× plain's TFLOP/s: {x:.2f}× ({verdict(x >= bound)})")
        win, full = (fvk.get(("window",) + k) or [None])[0], (fvk.get(("full",) + k) or [None])[0]
        if win and full:
            # time ÷ (full time × visible pairs ÷ all pairs) = full's TFLOP/s ÷ the window's
            x = full["tflops"] / win["tflops"]
            lines.append(f"  window time ≤ {WINDOW_MAX}× full's × its visible-pair share: {x:.2f}× ({verdict(x <= WINDOW_MAX)})")
        if "packed" in med and "alone" in med:
            x = med["packed"] / med["alone"]
            lines.append(f"  packed ≤ {PACKED_MAX}× its sequences alone: {x:.2f}× ({verdict(x <= PACKED_MAX)})")
        t = (trc.get(("packed",) + k) or [None])[0]
        if t and "packed" in med:
            padded = [v for b, v in (t.get("backends_ms") or {}).items() if b.startswith("sdpa-padded")]
            if padded:
                x = min(padded) / med["packed"]
                lines.append(f"  packed ≥ {PADDED_MIN}× faster than PyTorch's padded batch with a mask "
                             f"({min(padded):.3f} ms): {x:.2f}× ({verdict(x >= PADDED_MIN)})")
        lines.append("")
    print("\n".join(lines))
    return 0


def dtypes(d):
    out = set()
    for f in os.listdir(d):
        for p in ("flashvk-", "torch-"):
            if f.startswith(p) and f.endswith(".json"):
                out.add(f[len(p):].split("-")[0])
    return sorted(out)


def make_inputs(d, n):
    import numpy as np
    os.makedirs(d, exist_ok=True)
    m = np.zeros((1, 1, n, n), dtype=bool)
    w = max(n // 4, 1)
    for s in range(0, n, w):
        m[0, 0, s:s + w, s:s + w] = True
    np.save(os.path.join(d, "doc.npy"), m)
    rng = np.random.default_rng(1)
    np.save(os.path.join(d, "bias.npy"), rng.standard_normal((1, 1, n, n), dtype=np.float32).astype(np.float16))
    print(f"wrote {d}/doc.npy and {d}/bias.npy ([1,1,{n},{n}])")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="the directory of the JSON files")
    ap.add_argument("--make-inputs", metavar="DIR", help="write the mask and bias files there instead")
    ap.add_argument("--seq", type=int, help="N of the mask and bias (with --make-inputs)")
    a = ap.parse_args()
    if a.make_inputs:
        if not a.seq or a.seq < 1:
            ap.error("--make-inputs needs --seq N (N ≥ 1)")
        return make_inputs(a.make_inputs, a.seq)
    if not a.dir:
        ap.error("give the directory of the JSON files, or --make-inputs DIR --seq N")
    return table(a.dir)


if __name__ == "__main__":
    sys.exit(main())
