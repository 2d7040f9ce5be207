#!/usr/bin/env python3
"""Generate the .npy fixtures of cmd/flashvk's end-to-end tests.

Run from this directory with Debian's numpy (apt-get install -y python3-numpy):

    /usr/bin/python3 gen.py

The inputs are small and fixed (seeded). The expected outputs are computed
here, independently of flashvk, by a plain numpy softmax attention in float64
on the exact stored input values.

Shapes (BSHD = [batch, sequence, heads, head dim]): grouped-query attention
with Nq != Nk so that masks and head grouping both matter.
"""
import numpy as np

B, NQ, NK, HQ, HKV, D, DV = 2, 20, 24, 4, 2, 16, 16


def attention(q, k, v, causal=False, bottom_right=False):
    """O and LSE of softmax(QKᵀ/√d + mask)·V in float64; q, k, v are BSHD."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    b, nq, hq, d = q.shape
    nk, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = 1.0 / np.sqrt(d)
    o = np.zeros((b, nq, hq, v.shape[3]))
    lse = np.zeros((b, hq, nq))
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    visible = np.ones((nq, nk), dtype=bool)
    if causal:
        visible = j <= i + (nk - nq if bottom_right else 0)
    for bi in range(b):
        for h in range(hq):
            kh = h // group
            s = scale * q[bi, :, h, :] @ k[bi, :, kh, :].T
            s = np.where(visible, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            e = np.where(visible, np.exp(s - m), 0.0)
            l = e.sum(axis=1, keepdims=True)
            p = np.divide(e, l, out=np.zeros_like(e), where=l > 0)
            o[bi, :, h, :] = p @ v[bi, :, kh, :]
            with np.errstate(divide="ignore"):
                lse[bi, h, :] = np.where(l[:, 0] > 0, np.log(l[:, 0]) + m[:, 0], -np.inf)
    return o, lse


def main():
    rng = np.random.default_rng(20240611)
    q = rng.standard_normal((B, NQ, HQ, D)).astype(np.float32)
    k = rng.standard_normal((B, NK, HKV, D)).astype(np.float32)
    v = rng.standard_normal((B, NK, HKV, DV)).astype(np.float32)
    do = rng.standard_normal((B, NQ, HQ, DV)).astype(np.float32)

    # float32 inputs, BSHD.
    np.save("q.npy", q)
    np.save("k.npy", k)
    np.save("v.npy", v)
    np.save("do.npy", do)
    o, lse = attention(q, k, v)
    np.save("o_expected.npy", o)
    np.save("lse_expected.npy", lse)
    o_c, _ = attention(q, k, v, causal=True, bottom_right=True)
    np.save("o_causal_br_expected.npy", o_c)

    # The same float32 inputs stored BHSD ([B, H, S, D]); O expected BHSD.
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(f"{name}_bhsd.npy", np.ascontiguousarray(x.transpose(0, 2, 1, 3)))
    np.save("o_bhsd_expected.npy", np.ascontiguousarray(o.transpose(0, 2, 1, 3)))

    # float16 inputs; expected from the exact float16 values.
    q16, k16, v16 = q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)
    np.save("q16.npy", q16)
    np.save("k16.npy", k16)
    np.save("v16.npy", v16)
    o16, _ = attention(q16, k16, v16)
    np.save("o16_expected.npy", o16)

    # Bad inputs.
    raw = open("q.npy", "rb").read()
    open("truncated.npy", "wb").write(raw[: len(raw) - 100])
    np.save("int32.npy", np.arange(B * NQ * HQ * D, dtype=np.int32).reshape(B, NQ, HQ, D))
    np.save("float64.npy", q.astype(np.float64))
    np.save("k_baddim.npy", rng.standard_normal((B, NK, HKV, 8)).astype(np.float32))
    np.save("v_badseq.npy", rng.standard_normal((B, NK - 1, HKV, DV)).astype(np.float32))
    np.save("k_badheads.npy", rng.standard_normal((B, NK, 3, D)).astype(np.float32))
    np.save("not4d.npy", q.reshape(B * NQ, HQ * D))
    open("garbage.npy", "wb").write(b"this is not a numpy file\n")


if __name__ == "__main__":
    main()
