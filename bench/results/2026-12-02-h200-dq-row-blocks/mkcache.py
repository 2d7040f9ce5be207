"""mkcache.py DEVICE_CACHE OUT DTYPE D STAGE TILE [OPTIONS]

Writes a tune cache OUT that forces the backward stage STAGE (bwd_cm_dq or
bwd_cm_dkdv) to tile TILE (e.g. nsg4-step64-mode1-pf1-rb2) for storage
type DTYPE (float16, bfloat16) at head dim D, causal and not, for calls
with OPTIONS (spec.Problem.Features; none: plain calls). The device block
is the first entry's of DEVICE_CACHE, any tune cache `flashvk tune` wrote
on that device. Run `flashvk bench` with FLASHVK_TUNE_CACHE=OUT; its JSON
says which tile ran.
"""
import json
import sys

dev_cache, out, dt, d, stage, tile = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
opts = sys.argv[7] if len(sys.argv) > 7 else ""
dt = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(dt, dt)
dev = json.load(open(dev_cache))["entries"][0]["device"]
entries = []
for causal in (False, True):
    key = {"family": stage, "dir": "bwd", "dtype": dt, "d": d, "dv": d, "causal": causal}
    if opts:
        key["options"] = opts
    entries.append({"device": dev, "key": key, "n": 8192, "b": 2, "h": max(2048 // d, 1), "candidate": tile,
                    "default": "", "median_ms": 1, "default_ms": 1, "tflops": 1, "date": "2026-12-02T12:00:00Z"})
json.dump({"version": 1, "tool": "mkcache.py", "entries": entries}, open(out, "w"), indent=1)
