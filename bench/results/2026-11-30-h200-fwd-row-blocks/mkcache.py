import json, sys
# mkcache.py OUT dtype d cand: forces flash_cm fwd tile cand for (dtype, d, causal both)
out, dt, d, cand = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
opts = sys.argv[5] if len(sys.argv) > 5 else ""
dt = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(dt, dt)
dev = json.load(open('.gpu/caches/base2.json'))['entries'][0]['device']
ents = []
for causal in (False, True):
    ents.append({"device": dev, "key": {"family": "flash_cm", "dir": "fwd", "dtype": dt, "d": d, "dv": d, "causal": causal, **({"options": opts} if opts else {})},
                 "n": 8192, "b": 2, "h": 2048 // d, "candidate": cand, "default": "", "median_ms": 1, "default_ms": 1, "tflops": 1,
                 "date": "2026-11-30T12:00:00Z"})
json.dump({"version": 1, "tool": "x", "entries": ents}, open(out, 'w'), indent=1)
