"""mkc.py DEVICE_CACHE OUT FAMILY DIR DTYPE DIMS TILE [OPTIONS]: forces TILE for FAMILY (DIR) at every d of DIMS (comma list), causal and not."""
import json, sys
dev_cache, out, fam, dr, dt, dims, tile = sys.argv[1:8]
opts = sys.argv[8] if len(sys.argv) > 8 else ""
dt = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(dt, dt)
dev = json.load(open(dev_cache))["entries"][0]["device"]
entries = []
for d in [int(x) for x in dims.split(",")]:
    for causal in (False, True):
        key = {"family": fam, "dir": dr, "dtype": dt, "d": d, "dv": d, "causal": causal}
        if opts:
            key["options"] = opts
        entries.append({"device": dev, "key": key, "n": 8192, "b": 2, "h": max(2048 // d, 1), "candidate": tile,
                        "default": "", "median_ms": 1, "default_ms": 1, "tflops": 1, "date": "2026-12-01T12:00:00Z"})
json.dump({"version": 1, "tool": "mkc.py", "entries": entries}, open(out, "w"), indent=1)
