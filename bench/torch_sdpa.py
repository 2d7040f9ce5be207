#!/usr/bin/env python3
"""Time PyTorch SDPA on the FlashAttention-2 paper grid and write flashvk-bench/1 JSON.

Needs PyTorch with CUDA; bench/gpu.sh runs it beside `flashvk bench` in the same run:
    python3 bench/torch_sdpa.py --backend flash --dtype float16 --backward --json torch-float16.json
Same grid, FLOP convention and statistics as `flashvk bench`: B = tokens/N,
H = hidden/d, forward 4*B*H*N*N*d (halved when causal), backward 2.5x that;
warm-up, then the median of many runs timed with CUDA events around each call,
cycling through --rotate input sets so the L2 cache does not flatter small
problems. --backend best times every SDPA backend (flash, efficient, cudnn,
math) and reports the fastest.

Decode mode (--cache-seqlens, --paged, --append, or --decode with --nk) is the
anchor for `flashvk bench` in decode mode (KV-cache calls), on the same shapes:
B sequences hold --cache-seqlens rows each (one length per sequence; it sets
B), or without it Nk - --append rows each of B = --batch (default
tokens/max(Nq, Nk)) sequences; --append rows are appended, and --nq queries
per sequence (default 1) attend to the first length + append rows, with
FlashAttention's decoding mask (bottom-right causal: query i sees rows
j <= i + L - Nq, none for Nq = 1) unless --causal says otherwise. SDPA runs on
the gathered cache [B, Hkv, Lmax, d] (BHSD), with GQA by enable_gqa where the
PyTorch has it, else K and V heads repeated before timing; sequences of
different lengths are padded to the longest with a boolean mask (the flash
backend takes no mask, so it is skipped there). PyTorch has no paged SDPA: with
--paged the cache is built in blocks through a shuffled block table, gathered
to a contiguous cache before timing, and timed there (said in the output and
in each result's "note"). The append is not timed. The default --backend in
decode mode is best: every backend is timed, the fastest reported. Results have
direction "kv", Nk = the cache capacity, and cache_seqlens, append, block_size,
cache_bytes (the K and V bytes of the rows attended to: the memory-bound
floor, as attention.KVCacheBytes) and gb_per_s, so `flashvk compare` matches
them with flashvk's.
    python3 bench/torch_sdpa.py --cache-seqlens 128,4000,17 --heads 32 --kv-heads 8 --dim 128 --json torch-kv.json
    python3 bench/torch_sdpa.py --decode --nk 1024 8192 32768 --batch 16 --heads 32 --kv-heads 8 --dim 128 --dry-run

Options beyond the causal mask, the anchor for `flashvk bench` with the same
flags, on every point of the grid, forward and backward: --window L,R (a
sliding window: query i sees keys i-L ... i+R, -1 unbounded; with --causal R
is -1 or 0), --alibi (ALiBi, the bias -slope_h*|i - j| with the standard slopes
slope_h = 2^(-8(h+1)/H)) and --seqused-k N1,N2,... (the keys each sequence
uses, the rest masked: one value for every sequence, or one per sequence,
which sets B) become one additive float attn_mask for SDPA, in the storage
dtype and only as large as they need ([1, 1, N, N]; [B, 1, N, N] for key
counts that differ; [., H, N, N] with ALiBi; the causal mask is folded in):
16384^2 fp16 is 512 MiB per [1, 1] slice. The flash backend takes no
attn_mask, so the default --backend is then best, which times the others
(efficient, cudnn, math) and reports the fastest. --softcap C (each scaled
score s becomes C*tanh(s/C)) runs through torch.nn.attention.flex_attention,
compiled with torch.compile, with a score_mod (softcap, then ALiBi) and a
block mask (causal, window, key counts) where this PyTorch has it, else on an
eager math path that materialises the scores. Each result records the
options ("window", "softcap", "alibi", "seqused_k", "dropout", as flashvk
writes them), the implementation that ran ("kernel": "sdpa-<backend>",
"flex-attention" or "eager-softcap"), how ("note") and every implementation's median
("backends_ms"); TFLOP/s then counts the visible (query, key) pairs exactly,
as flashvk does. Diagonals are top-left (flashvk bench's default --align).
    python3 bench/torch_sdpa.py --dtype float16 --seq 4096 8192 --causal true --window 1024,0 --backward --json torch-window.json

Attention dropout (--dropout P, 0 < P < 1), the anchor for `flashvk bench
--dropout P`, on every point (grid and --seqlens), forward and backward:
SDPA's dropout_p (on the padded batch and on nested tensors alike). TIMINGS
ONLY: PyTorch draws its own mask from its own generator, not flashvk's
(Philox4x32-10 keyed by --dropout-seed and --dropout-offset, at a resolution
of 2^-8), so its outputs are not flashvk's and nothing here compares them;
the results record "dropout" (not a seed), which `flashvk compare` matches
on P alone. Each SDPA backend is tried with dropout_p: flash, efficient
and math take it; cudnn does in some PyTorch and cuDNN versions only (some
refuse dropout, some only at a resolution of 1/16): a backend that refuses
is skipped with PyTorch's reason on stderr, not fatal. flex_attention has
no dropout: with --softcap the eager math path runs instead, dropping the
softmax's probabilities with torch.dropout. Decode mode refuses --dropout.
    python3 bench/torch_sdpa.py --dtype float16 --seq 4096 8192 --causal true --dropout 0.1 --backward --json torch-dropout.json

Packed sequences (--seqlens N1,N2,...), the anchor for `flashvk bench
--seqlens`: one packed batch of self-attention sequences (sequence i has
Nq = Nk = Ni; B is their count; it replaces --seq and --tokens, H is --heads
else hidden/d, Hkv --kv-heads else H), at every d x mask. Two ways are timed
and the fastest reported: (a) SDPA on the batch padded to the longest length
[B, H, Nmax, d], with an additive attn_mask of the key padding (the causal
mask, --window, --alibi and --seqused-k folded in; query rows past a
sequence's length are padding, their outputs unused) on the efficient,
cudnn and math backends (flash takes no mask; with equal lengths and no
option there is no mask, is_causal, and flash runs too), or with --softcap
flex_attention or the eager math path as above; (b) where this PyTorch has
them, SDPA on nested jagged tensors [B, H, {Ni}, d] over the packed rows
(torch.nested.nested_tensor_from_jagged: the flash and efficient backends'
varlen kernels; empty sequences are left out, having no rows) -- nested
tensors take no mask, so only without --window, --alibi, --seqused-k and
--softcap. GQA (--kv-heads) runs by enable_gqa on the padded batch where
SDPA takes it; otherwise, and on nested tensors, K and V have all H heads.
Each result records "seqlens" (and the options), the implementation that
won ("kernel": "sdpa-padded-<backend>", "sdpa-nested-<backend>",
"flex-attention" or "eager-softcap"), how each ran ("note") and every
median ("backends_ms"); TFLOP/s counts each sequence's own visible pairs,
as flashvk's attention.Flops (causal: Ni(Ni+1)/2 per head, 2*H*(d+dv) each).
    python3 bench/torch_sdpa.py --seqlens 8192,512,2048,77 --dim 128 --causal true --backward --json torch-packed.json
    python3 bench/torch_sdpa.py --seqlens 300,0,77,512 --heads 8 --kv-heads 2 --dim 64 --dry-run

An attention bias or mask (--bias FILE.npy, --mask FILE.npy, --bias-grad),
the anchor for `flashvk bench --bias/--mask/--bias-grad`, on every point
(grid and --seqlens), forward and backward: SDPA's attn_mask. --bias is an
additive float bias (float32 or float16), --mask a boolean mask (bool, or
uint8 0/1; True attends), each [B|1, H|1, Nq|1, Nk] (a 3-D [H|1, Nq|1, Nk] or
2-D [Nq|1, Nk] file is one with leading 1s), the same files flashvk reads;
every point must fit the shape (B = tokens/N and H = hidden/d on the grid),
else the script refuses before timing, as flashvk bench does. SDPA takes a
float attn_mask in the query's dtype only: a float32 bias is rounded to
--dtype here (flashvk keeps it float32). The causal mask and --window,
--alibi and --seqused-k are folded into one additive mask with the bias
(SDPA takes no is_causal beside an attn_mask); a mask alone goes to SDPA as
a boolean attn_mask. The flash backend takes no attn_mask (skipped; the
default --backend is then best); with --softcap the eager math path runs
(the bias added to the softcapped scores), not flex_attention; on
--seqlens the nested tensors are not timed (they take no mask).
--bias-grad (with --backward) makes the bias a leaf that requires grad (a
mask becomes 0 and -inf in --dtype) and times the backward with its
gradient (torch.autograd.grad over q, k, v and the bias): flashvk's dBias.
A row the bias hides whole gets NaN from SDPA (flashvk gives 0): timings
only. The results record "bias" or "mask" as flashvk writes them (the
file's name, its shape as [B|1,H|1,Nq|1,Nk] and its element type:
"mask.npy [1,1,1024,1024] bool") and, on the backward, "bias_grad", so
`flashvk compare` matches them with flashvk's; TFLOP/s counts the visible
pairs exactly, as flashvk does (the pairs the bias hides included).
Decode mode refuses them. Reading the file's data needs numpy.
    python3 bench/torch_sdpa.py --dtype float16 --seq 1024 --dim 64 --causal true --mask mask.npy --backward --bias-grad --json torch-mask.json

The parts that need no GPU (the decode grid, the packed points, FLOPs,
bytes, masks' key limits, block tables, the options' visible pairs, the
bias file's header and shape) are plain functions with doctests:
    python3 -m doctest -v bench/torch_sdpa.py
and --dry-run prints the decode (or --seqlens) points as JSON lines
without timing anything.
"""
import argparse
import ast
import contextlib
import datetime
import json
import os
import random
import statistics
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # the helpers below need no torch (doctests, --dry-run)
    torch = F = SDPBackend = sdpa_kernel = None

BACKENDS = ["flash", "efficient", "cudnn", "math"]
SDP_NAMES = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
DTYPES = ["float16", "bfloat16", "float32"]
DTYPE_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


def sdp_backend(name):
    """The SDPBackend of a backend name (None where this PyTorch lacks it)."""
    return getattr(SDPBackend, SDP_NAMES[name], None)


def grid(dims, seqs, causals, tokens, hidden, batch=None):
    """The points (d, N, causal, B, H): B = batch, else tokens/N."""
    for d in dims:
        for n in seqs:
            for c in causals:
                yield d, n, c, batch or max(tokens // n, 1), max(hidden // d, 1)


def quantile(xs, q):
    """Nearest-rank quantile, as flashvk's BenchResult.Quantile.

    >>> quantile([5, 1, 4, 2, 3], 0.5)
    3
    >>> quantile([1, 2, 3, 4], 0.9)
    4
    """
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


def int_list(s):
    """A list flag's value: comma- and/or space-separated integers.

    >>> int_list("128,4000, 17")
    [128, 4000, 17]
    """
    return [int(x) for x in s.replace(",", " ").split()]


def flatten(xss):
    return None if xss is None else [x for xs in xss for x in xs]


def window_pair(s):
    """--window's value: L,R, two integers >= -1 (-1: unbounded).

    >>> window_pair("128,0"), window_pair("-1, 16")
    ([128, 0], [-1, 16])
    >>> window_pair("5")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: want L,R: two integers >= -1 (-1 unbounded)
    """
    parts = s.split(",")
    try:
        w = [int(x) for x in parts]
    except ValueError:
        w = []
    if len(w) != 2 or min(w) < -1:
        raise argparse.ArgumentTypeError("want L,R: two integers >= -1 (-1 unbounded)")
    return w


def dropout_p(s):
    """--dropout's value: the probability P of dropping each attention
    probability, 0 < P < 1 (0 is refused: omit --dropout for none).

    >>> dropout_p("0.1"), dropout_p(" 0.5 ")
    (0.1, 0.5)
    >>> dropout_p("1")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 1.0: want a probability 0 < P < 1
    >>> dropout_p("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 0 is no dropout: omit --dropout for none
    >>> dropout_p("nan")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: nan: want a probability 0 < P < 1
    >>> dropout_p("abc")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 'abc' is not a number: want a probability 0 < P < 1
    """
    try:
        p = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number: want a probability 0 < P < 1") from None
    if p == 0:
        raise argparse.ArgumentTypeError("0 is no dropout: omit --dropout for none")
    if not 0 < p < 1:
        raise argparse.ArgumentTypeError(f"{p}: want a probability 0 < P < 1")
    return p


def join_window(argv):
    """argv with "--window L,R" as "--window=L,R": argparse would take a
    value such as -1,0 for an option.

    >>> join_window(["--window", "-1,0", "--alibi"])
    ['--window=-1,0', '--alibi']
    """
    out = list(argv)
    for i in range(len(out) - 1):
        if out[i] == "--window":
            out[i:i + 2] = ["--window=" + out[i + 1]]
            break
    return out


# ---- options beyond the causal mask: the parts without CUDA ----

def alibi_slopes(h):
    """The standard ALiBi slopes of h heads, 2^(-8(i+1)/h) for i = 0 ... h-1
    (flashvk's --alibi).

    >>> alibi_slopes(4)
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    return [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]


def key_range(i, nk, window, causal):
    """The keys [lo, hi) query i of a sequence of nk keys sees under a
    top-left diagonal: j < nk, i - L <= j <= i + R (-1 unbounded) and, when
    causal, j <= i.

    >>> key_range(10, 64, [4, 2], False), key_range(10, 64, [4, -1], True), key_range(10, 8, None, False)
    ((6, 13), (6, 11), (0, 8))
    >>> key_range(10, 4, [2, 0], False)
    (4, 4)
    """
    lo, hi = 0, nk
    if window is not None and window[0] >= 0:
        lo = min(max(i - window[0], 0), nk)
    if window is not None and window[1] >= 0:
        hi = min(max(i + window[1] + 1, 0), nk)
    if causal:
        hi = min(hi, i + 1)
    return lo, max(lo, hi)


def feature_flops(b, h, n, d, causal, window, seqused, lens=None):
    """Forward FLOPs with options, as flashvk's attention.Flops counts them:
    2*H*(d+dv) per visible (query, key) pair, exactly (dv = d; seqused:
    one key count per sequence, or None for all; lens: a packed batch's
    lengths, sequence i having lens[i] queries and keys, or None for b
    sequences of n: each sequence counts only its own pairs).

    >>> feature_flops(1, 2, 8, 4, True, None, None)  # 36 pairs, not 32
    1152.0
    >>> feature_flops(2, 1, 8, 4, False, [1, 0], [8, 3])
    336.0
    >>> feature_flops(3, 2, 4, 8, True, None, None, lens=[4, 0, 2])  # 10 + 0 + 3 pairs
    832.0
    """
    lens = lens or [n] * b
    counts = seqused or lens
    pairs = sum(hi - lo for nq, nk in zip(lens, counts) for lo, hi in (key_range(i, nk, window, causal) for i in range(nq)))
    return 2.0 * h * (d + d) * pairs


def features_of(a):
    """The options a result records, as flashvk writes them (None: unset;
    dropout without a seed: PyTorch's mask is its own; the bias or mask by
    its descriptor, bias_grad on backward results only: see bias_grad_of).

    >>> ns = argparse.Namespace(window=None, softcap=None, alibi=False, seqused_k=[3], dropout=0.1, bias_spec=None)
    >>> features_of(ns)
    {'seqused_k': [3], 'dropout': 0.1}
    >>> ns.bias_spec = {"flag": "--mask", "descriptor": "m.npy [1,1,8,8] bool"}
    >>> features_of(ns)["mask"]
    'm.npy [1,1,8,8] bool'
    """
    spec = getattr(a, "bias_spec", None)
    return {k: v for k, v in (("window", a.window), ("softcap", a.softcap), ("alibi", a.alibi or None),
                              ("seqused_k", a.seqused_k), ("dropout", a.dropout),
                              (spec["flag"][2:] if spec else "bias", spec["descriptor"] if spec else None)) if v is not None}


# ---- --bias and --mask: the parts without CUDA ----

NPY_TYPES = {"f4": "float32", "f2": "float16", "b1": "bool", "?": "bool", "u1": "uint8"}


def npy_header(fh):
    """The element type and shape of a .npy file open for reading, from
    its header (flashvk's --bias takes float32 and float16, --mask bool
    and uint8; C order). Raises ValueError saying what is wrong.

    >>> import io
    >>> h = "{'descr': '|b1', 'fortran_order': False, 'shape': (4, 8), }"
    >>> npy_header(io.BytesIO(b"\\x93NUMPY\\x01\\x00" + struct.pack("<H", len(h)) + h.encode()))
    ('bool', [4, 8])
    >>> h = "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }"
    >>> npy_header(io.BytesIO(b"\\x93NUMPY\\x01\\x00" + struct.pack("<H", len(h)) + h.encode()))
    Traceback (most recent call last):
    ValueError: dtype '<f8' is not supported: want float32 or float16 (--bias), bool or uint8 (--mask)
    """
    pre = fh.read(8)
    if len(pre) < 8 or pre[:6] != b"\x93NUMPY":
        raise ValueError("not a valid .npy file: no .npy magic")
    if pre[6] not in (1, 2, 3):
        raise ValueError(f"unsupported .npy version {pre[6]}.{pre[7]}")
    size = 2 if pre[6] == 1 else 4
    (n,) = struct.unpack("<H" if size == 2 else "<I", fh.read(size))
    try:
        d = ast.literal_eval(fh.read(n).decode("latin1"))
        descr, fortran, shape = d["descr"], d["fortran_order"], list(d["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError) as e:
        raise ValueError(f"not a valid .npy file: bad header ({e})") from None
    if fortran:
        raise ValueError("Fortran-order array; save it in C order (np.ascontiguousarray)")
    t = descr.lstrip("<>|=") if isinstance(descr, str) else ""
    if t not in NPY_TYPES:
        raise ValueError(f"dtype {descr!r} is not supported: want float32 or float16 (--bias), bool or uint8 (--mask)")
    return NPY_TYPES[t], shape


def bias_spec_of(flag, path, etype, dims):
    """The bias of --bias or --mask (flag) path, an array of element type
    etype and shape dims, as flashvk reads it: a dict of the flag, path,
    type, dims, shape ([B|1, H|1, Nq|1, Nk]: dims with leading 1s) and
    descriptor (what results record). Raises ValueError with flashvk's
    reasons.

    >>> s = bias_spec_of("--mask", "/tmp/mask.npy", "bool", [512, 512])
    >>> s["shape"], s["descriptor"]
    ([1, 1, 512, 512], 'mask.npy [1,1,512,512] bool')
    >>> bias_spec_of("--bias", "m.npy", "bool", [8, 8])
    Traceback (most recent call last):
    ValueError: a bool array: --bias takes an additive float bias (float32 or float16); give a boolean mask to --mask
    >>> bias_spec_of("--bias", "b.npy", "float32", [8])
    Traceback (most recent call last):
    ValueError: shape [8]: want 4 dimensions [B|1, H|1, Nq|1, Nk] (or 3, [H|1, Nq|1, Nk], or 2, [Nq|1, Nk])
    """
    if flag == "--bias" and etype in ("bool", "uint8"):
        raise ValueError(f"a {etype} array: --bias takes an additive float bias (float32 or float16); give a boolean mask to --mask")
    if flag == "--mask" and etype not in ("bool", "uint8"):
        raise ValueError(f"a {etype} array: --mask takes a boolean mask (bool, or uint8 0 and 1: true attends); give an additive float bias to --bias")
    if not 2 <= len(dims) <= 4:
        raise ValueError(f"shape [{','.join(map(str, dims))}]: want 4 dimensions [B|1, H|1, Nq|1, Nk] (or 3, [H|1, Nq|1, Nk], or 2, [Nq|1, Nk])")
    if min(dims) <= 0:
        raise ValueError(f"shape [{','.join(map(str, dims))}]: every dimension must be positive")
    shape = [1] * (4 - len(dims)) + list(dims)
    desc = f"{os.path.basename(path)} [{','.join(map(str, shape))}] {etype}"
    return {"flag": flag, "path": path, "type": etype, "dims": list(dims), "shape": shape, "descriptor": desc}


def bias_fits(shape, b, h, nq, nk):
    """Whether a bias of shape [B|1, H|1, Nq|1, Nk] fits a problem of b
    sequences, h query heads, nq queries and nk keys.

    >>> bias_fits([1, 8, 1, 64], 4, 8, 64, 64), bias_fits([1, 8, 64, 64], 4, 16, 64, 64)
    (True, False)
    """
    return shape[0] in (1, b) and shape[1] in (1, h) and shape[2] in (1, nq) and shape[3] == nk


def bias_grad_of(a, direction):
    """What a result records of --bias-grad: bias_grad on the backward.

    >>> bias_grad_of(argparse.Namespace(bias_grad=True), "bwd"), bias_grad_of(argparse.Namespace(bias_grad=True), "fwd")
    ({'bias_grad': True}, {})
    """
    return {"bias_grad": True} if a.bias_grad and direction == "bwd" else {}


def check_bias_args(ap, a, points):
    """Refuse what flashvk refuses for --bias, --mask and --bias-grad
    (exit 2), and read the file's header into a.bias_spec (None without):
    points are the (B, H, Nq, Nk) the bias must fit, every one."""
    a.bias_spec = None
    if a.bias and a.mask:
        ap.error("--bias and --mask go apart: give an additive float bias (--bias) or a boolean mask (--mask), not both")
    if a.bias_grad and not (a.bias or a.mask):
        ap.error("--bias-grad needs --bias or --mask: it asks for the gradient of the bias")
    if a.bias_grad and not a.backward:
        ap.error("--bias-grad has no effect without --backward: only the backward points compute dBias")
    flag, path = ("--bias", a.bias) if a.bias else ("--mask", a.mask)
    if not path:
        return
    try:
        with open(path, "rb") as fh:
            etype, dims = npy_header(fh)
        spec = bias_spec_of(flag, path, etype, dims)
    except (OSError, ValueError) as e:
        ap.error(f"{flag} {path}: {e}")
    for b, h, nq, nk in points:
        if not bias_fits(spec["shape"], b, h, nq, nk):
            ap.error(f"{flag} {path}: shape [{','.join(map(str, spec['dims']))}] does not fit the point B={b} H={h} Nq={nq} Nk={nk}: want [{b},{h},{nq},{nk}] "
                     "(B, H, Nq, Nk), each of the first three 1 to broadcast; every point must fit it (give the sizes it was made for)")
    if a.backend == "flash":
        ap.error(f"--backend flash takes no attn_mask, which {flag} needs: give efficient, cudnn, math or best")
    a.bias_spec = spec


def refusal(e, a):
    """Why an implementation refused a point: the first line of its error,
    and with --dropout a hint that dropout may be what it refused."""
    why = str(e).splitlines()[0] if str(e) else repr(e)
    if a.dropout is not None:
        why += f" (with dropout_p={a.dropout}: this backend may not take dropout in this PyTorch/cuDNN)"
    return why


def check_feature_args(ap, a, seqs, causals):
    """Refuse what flashvk bench refuses for --window, --softcap, --alibi and
    --seqused-k on a grid (exit 2; with --seqlens, seqs is the longest
    length, and check_packed_args checks the key counts)."""
    w = a.window
    if w == [-1, -1]:
        ap.error("--window -1,-1 has no effect: both sides are unbounded (omit --window)")
    if w is not None and w[1] > 0 and True in causals:
        ap.error(f"--window {w[0]},{w[1]} with --causal: R must be -1 or 0 (a causal mask shows no key after the diagonal)")
    if w is not None and w[0] == -1 and causals == [True]:
        ap.error(f"--window -1,{w[1]} has no effect with --causal: the left side is unbounded and the causal mask already bounds the right")
    if a.softcap is not None and not 0 < a.softcap < float("inf"):
        ap.error(f"--softcap {a.softcap}: want a finite c > 0 (omit --softcap for none)")
    if a.seqused_k and not a.seqlens:  # packed: check_packed_args checks them
        for k in a.seqused_k:
            if not 0 <= k <= min(seqs):
                ap.error(f"--seqused-k {k}: want 0 ... Nk = {min(seqs)} (every point's Nk)")
        if all(k == n for k in a.seqused_k for n in seqs):
            ap.error(f"--seqused-k has no effect: every sequence uses all Nk = {seqs[0]} keys")
    if a.softcap is not None and a.backend is not None:
        ap.error("--backend has no effect with --softcap: the softcap runs through flex_attention (or the eager math path)")
    if (w is not None or a.alibi or a.seqused_k) and a.backend == "flash":
        ap.error("--backend flash takes no attn_mask, which --window, --alibi and --seqused-k need: give efficient, cudnn, math or best")


# ---- packed sequences (--seqlens): the parts without CUDA ----

def packed_key_counts(lens, seqused):
    """Each sequence's key count in a packed batch: --seqused-k's (one value
    for every sequence, or one per sequence), else its length.

    >>> packed_key_counts([5, 0, 3], None), packed_key_counts([5, 2, 3], [2]), packed_key_counts([5, 0, 3], [4, 0, 1])
    ([5, 0, 3], [2, 2, 2], [4, 0, 1])
    """
    if not seqused:
        return list(lens)
    return seqused * len(lens) if len(seqused) == 1 else list(seqused)


def check_packed_args(ap, a):
    """Refuse what flashvk bench refuses for --seqlens (exit 2)."""
    if a.seq_given:
        ap.error("--seq does not apply with --seqlens: each sequence's length is both its Nq and its Nk")
    if a.tokens_given:
        ap.error("--tokens does not apply with --seqlens: B is the number of lengths (one per sequence)")
    for n in a.seqlens:
        if n < 0:
            ap.error(f"--seqlens {n}: a length must be >= 0")
    if not any(a.seqlens):
        ap.error(f"--seqlens {','.join(map(str, a.seqlens))}: every sequence is empty (give at least one length > 0)")
    if a.seqused_k and len(a.seqused_k) not in (1, len(a.seqlens)):
        ap.error(f"--seqused-k: {len(a.seqused_k)} key counts for the {len(a.seqlens)} sequences of --seqlens: "
                 "give one per sequence, or one for every sequence")
    ks = packed_key_counts(a.seqlens, a.seqused_k)
    for i, (k, n) in enumerate(zip(ks, a.seqlens)):
        if not 0 <= k <= n:
            ap.error(f"--seqused-k {k}: want 0 ... {n} for sequence {i} (its length in --seqlens)")
    if a.seqused_k and ks == list(a.seqlens):
        ap.error("--seqused-k has no effect: every sequence uses all its keys (its length in --seqlens)")
    for name, x in (("--heads", a.heads), ("--kv-heads", a.kv_heads)):
        if x is not None and x < 1:
            ap.error(f"{name} {x}: must be positive")
    if a.heads and a.kv_heads and a.heads % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads} does not divide --heads {a.heads}")


def packed_points(a, causals):
    """The points of --seqlens, as flashvk bench builds them: one packed
    batch at every d x mask; B the number of lengths, Nq = Nk the longest,
    H = --heads else hidden/d, Hkv = --kv-heads else H, and the FLOPs of
    each sequence's own visible pairs.

    >>> ns = argparse.Namespace(dim=[64], seqlens=[4, 0, 2], heads=None, kv_heads=None, hidden=128, window=None, seqused_k=None)
    >>> [(p["B"], p["H"], p["Nq"], p["causal"], p["seqlens"], p["flops"]) for p in packed_points(ns, [False, True])]
    [(3, 2, 4, False, [4, 0, 2], 10240.0), (3, 2, 4, True, [4, 0, 2], 6656.0)]
    """
    points = []
    lens = list(a.seqlens)
    ks = packed_key_counts(lens, a.seqused_k)
    for d in a.dim:
        for causal in causals:
            h = a.heads or max(a.hidden // d, 1)
            p = dict(B=len(lens), H=h, Hkv=a.kv_heads or h, Nq=max(lens), Nk=max(lens), d=d, causal=causal, seqlens=lens,
                     flops=feature_flops(len(lens), h, max(lens), d, causal, a.window, ks, lens))
            if a.seqused_k:
                p["seqused_k"] = ks
            points.append(p)
    return points


# ---- decode mode: the parts without CUDA ----

def key_limit(l, nq, i, causal):
    """How many leading rows of a sequence of l rows query i of nq sees
    (bottom-right causal: rows j <= i + l - nq; all l when not causal).

    >>> [key_limit(10, 3, i, True) for i in range(3)]
    [8, 9, 10]
    >>> key_limit(2, 4, 0, True), key_limit(10, 1, 0, False)
    (0, 10)
    """
    if not causal:
        return l
    return min(max(i + 1 + l - nq, 0), l)


def kv_flops(lens, append, nq, hq, d, dv, causal):
    """FLOPs of a KV-cache call: 2*(d+dv) per query head and visible
    (query, cache row) pair, as flashvk's BenchResult.Flops.

    >>> kv_flops([20, 50], 0, 1, 4, 16, 16, False)
    17920.0
    >>> kv_flops([100, 300], 2, 2, 8, 32, 32, True)
    825344.0
    """
    pairs = sum(key_limit(n + append, nq, i, causal) for n in lens for i in range(nq))
    return 2.0 * hq * (d + dv) * pairs


def kv_cache_bytes(lens, append, hkv, d, dv, dtype):
    """The cache bytes a call must read (attention.KVCacheBytes): the K and V
    rows each sequence attends to, once per KV head.

    >>> kv_cache_bytes([20, 50], 0, 2, 16, 16, "float32")
    17920.0
    """
    return float(sum(n + append for n in lens) * hkv * (d + dv) * DTYPE_SIZE[dtype])


def block_table(b, max_blocks, seed):
    """A paged cache's block table: the pool's b*max_blocks blocks in
    shuffled order, max_blocks per sequence (row-major [b, max_blocks]).

    >>> t = block_table(3, 4, 1)
    >>> len(t), sorted(x for row in t for x in row) == list(range(12))
    (3, True)
    """
    perm = list(range(b * max_blocks))
    random.Random(seed).shuffle(perm)
    return [perm[i * max_blocks:(i + 1) * max_blocks] for i in range(b)]


def decode_points(a):
    """The decode grid, as flashvk bench's decode mode builds it: every
    d x mask x Nq x Nk. Each point is a dict of the shape.

    >>> ns = argparse.Namespace(dim=[64], nq=[1, 4], nk=None, cache_seqlens=[10, 3], batch=None, heads=8, kv_heads=2,
    ...     hidden=2048, tokens=16384, append=1, paged=16, causal=None)
    >>> [(p["Nq"], p["Nk"], p["B"], p["causal"], p["lens"]) for p in decode_points(ns)]
    [(1, 11, 2, False, [10, 3]), (4, 11, 2, True, [10, 3])]
    >>> ns = argparse.Namespace(dim=[128], nq=None, nk=[1024, 8192], cache_seqlens=None, batch=None, heads=None, kv_heads=None,
    ...     hidden=2048, tokens=16384, append=0, paged=None, causal="both")
    >>> [(p["B"], p["H"], p["Hkv"], p["Nk"], p["causal"], p["lens"][:2]) for p in decode_points(ns)]
    [(16, 16, 16, 1024, False, [1024, 1024]), (2, 16, 16, 8192, False, [8192, 8192])]
    """
    nqs, nks = a.nq or [1], a.nk or [0]
    points, seen = [], set()
    for d in a.dim:
        for causal in (False, True):
            for nq in nqs:
                if a.causal is None and causal != (nq > 1):
                    continue
                if a.causal is not None and causal not in {"true": [True], "false": [False], "both": [False, True]}[a.causal]:
                    continue
                for nk in nks:
                    if a.cache_seqlens:
                        lens = list(a.cache_seqlens)
                        b = len(lens)
                        cap = nk or max(max(lens) + a.append, 1)
                    else:
                        b = a.batch or max(a.tokens // max(nq, nk), 1)
                        cap, lens = nk, [nk - a.append] * b
                    h = a.heads or max(a.hidden // d, 1)
                    p = dict(B=b, H=h, Hkv=a.kv_heads or h, Nq=nq, Nk=cap, d=d, lens=lens, append=a.append,
                             block=a.paged or 0, causal=causal and nq > 1)  # bottom-right, Nq = 1: no mask
                    key = json.dumps(p, sort_keys=True)
                    if key not in seen:
                        seen.add(key)
                        points.append(p)
    return points


def check_decode_args(ap, a):
    """Refuse what flashvk refuses in decode mode (exit 2)."""
    by = ("--cache-seqlens" if a.cache_seqlens else "--paged" if a.paged is not None
          else "--append" if a.append_given else "--decode")
    if a.backward:
        ap.error(f"--backward has no effect in decode mode ({by}): decoding has no backward pass")
    if a.seqlens is not None:
        ap.error(f"--seqlens does not apply in decode mode ({by}): a KV-cache call packs no sequences "
                 "(--cache-seqlens gives the rows each sequence holds)")
    for flag, given in (("--window", a.window), ("--softcap", a.softcap), ("--alibi", a.alibi), ("--seqused-k", a.seqused_k),
                        ("--dropout", a.dropout is not None), ("--bias", a.bias), ("--mask", a.mask), ("--bias-grad", a.bias_grad)):
        if given:
            ap.error(f"{flag} does not apply in decode mode ({by}): a KV-cache call takes no window, softcap, ALiBi, key counts, dropout or bias")
    if a.seq_given:
        ap.error(f"--seq has no effect in decode mode ({by}): --nq (default 1) and --nk or --cache-seqlens give the lengths")
    if not a.cache_seqlens and not a.nk:
        ap.error(f"decode mode ({by}) needs --nk (the cache capacity per sequence) or --cache-seqlens")
    for name, xs in (("--nq", a.nq), ("--nk", a.nk), ("--dim", a.dim)):
        for x in xs or []:
            if x < 1:
                ap.error(f"{name} {x}: must be positive")
    for n in a.cache_seqlens or []:
        if n < 0:
            ap.error(f"--cache-seqlens {n}: must be >= 0")
    if a.paged is not None and a.paged < 1:
        ap.error(f"--paged {a.paged}: must be positive")
    if a.append < 0:
        ap.error(f"--append {a.append}: must be >= 0")
    if a.cache_seqlens and a.batch and a.batch != len(a.cache_seqlens):
        ap.error(f"--batch {a.batch} disagrees with --cache-seqlens ({len(a.cache_seqlens)} lengths, one per sequence)")
    for nk in a.nk or []:
        for i, n in enumerate(a.cache_seqlens or []):
            if n + a.append > nk:
                ap.error(f"--cache-seqlens: sequence {i} holds {n} rows and --append adds {a.append}: more than --nk {nk}, the cache's capacity")
        if not a.cache_seqlens and a.append > nk:
            ap.error(f"--append {a.append}: more rows than the cache holds (--nk {nk})")
    if a.heads and a.kv_heads and a.heads % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads} does not divide --heads {a.heads}")
    if a.causal is not None and all(nq == 1 for nq in a.nq or [1]):
        ap.error("--causal has no effect: with Nq = 1 the decoding mask (bottom-right) shows the query every cache row")


# ---- decode mode: timing on CUDA ----

def gqa_native():
    """Whether SDPA takes enable_gqa (PyTorch >= 2.5); probed on the CPU."""
    q, kv = torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 3, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return True
    except TypeError:
        return False


def decode_inputs(p, dt, dev, gen):
    """Q [B, H, Nq, d] and the gathered cache K, V [B, Hkv, Lmax, d] of a
    point (paged: built in blocks, gathered through a shuffled table)."""
    b, hkv, d = p["B"], p["Hkv"], p["d"]
    att = [n + p["append"] for n in p["lens"]]
    lmax = max(max(att), 1)
    q = torch.randn(b, p["H"], p["Nq"], d, device=dev, dtype=dt, generator=gen)
    if p["block"]:
        bs = p["block"]
        mb = (p["Nk"] + bs - 1) // bs
        table = torch.tensor(block_table(b, mb, gen.initial_seed()), device=dev)
        pool_k = torch.randn(b * mb, bs, hkv, d, device=dev, dtype=dt, generator=gen)
        pool_v = torch.randn(b * mb, bs, hkv, d, device=dev, dtype=dt, generator=gen)
        need = (lmax + bs - 1) // bs
        # [B, need, bs, Hkv, d] -> [B, Hkv, Lmax, d]
        k = pool_k[table[:, :need]].reshape(b, need * bs, hkv, d)[:, :lmax].transpose(1, 2).contiguous()
        v = pool_v[table[:, :need]].reshape(b, need * bs, hkv, d)[:, :lmax].transpose(1, 2).contiguous()
        del pool_k, pool_v
    else:
        k = torch.randn(b, hkv, lmax, d, device=dev, dtype=dt, generator=gen)
        v = torch.randn(b, hkv, lmax, d, device=dev, dtype=dt, generator=gen)
    return q, k, v


def decode_mask(p, dev):
    """The attention mask of a point: None where no row is masked (uniform
    lengths and no causal mask), PyTorch's lower-right causal bias where the
    lengths are uniform, else a boolean [B, 1, Nq, Lmax] mask (padding and
    bottom-right causal)."""
    att = [n + p["append"] for n in p["lens"]]
    lmax, nq = max(max(att), 1), p["Nq"]
    uniform = all(l == lmax for l in att)
    if uniform and not p["causal"]:
        return None, "no mask"
    if uniform and nq <= lmax:
        try:
            from torch.nn.attention.bias import causal_lower_right
            return causal_lower_right(nq, lmax), "causal_lower_right"
        except ImportError:
            pass
    lims = torch.tensor([[key_limit(l, nq, i, p["causal"]) for i in range(nq)] for l in att], device=dev)
    mask = torch.arange(lmax, device=dev)[None, None, :] < lims[:, :, None]
    return mask[:, None], "boolean mask (lengths padded to the longest)" if not uniform else "boolean mask"


def time_decode(p, a, dev, native_gqa):
    """Times SDPA on one decode point with every backend asked for; returns
    {backend: times} and notes."""
    dt = getattr(torch, a.dtype)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed if a.seed is not None else 1)
    sets = [decode_inputs(p, dt, dev, gen) for _ in range(a.rotate)]
    mask, how = decode_mask(p, dev)
    notes = [how]
    if p["block"]:
        notes.append("paged: PyTorch has no paged SDPA; timed on the gathered contiguous cache")
    if p["append"]:
        notes.append("the append is not timed")
    group = p["H"] // p["Hkv"]
    expanded = None
    out = {}
    for name in BACKENDS if a.backend == "best" else [a.backend]:
        be = sdp_backend(name)
        if be is None:
            print(f"skip {name}: not in this PyTorch", file=sys.stderr)
            continue
        for gqa in ([True, False] if native_gqa and group > 1 else [False]):
            if not gqa and group > 1 and expanded is None:
                expanded = [(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)) for q, k, v in sets]
            use = sets if gqa or group == 1 else expanded
            kw = {"enable_gqa": True} if gqa else {}

            def fn(i, use=use, kw=kw):
                q, k, v = use[i % len(use)]
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
            try:
                with sdpa_kernel(be):
                    out[name] = time_calls(fn, a.warmup, a.iters)
                if group > 1 and not gqa:
                    notes.append(f"{name}: K and V heads repeated {group}x before timing")
                break
            except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:  # the backend refuses this shape, mask or GQA
                print(f"skip {name}{' enable_gqa' if gqa else ''}: {str(e).splitlines()[0] if str(e) else e}", file=sys.stderr)
    return out, notes


def run_decode(a):
    dev = torch.device("cuda")
    native_gqa = gqa_native()
    results = []
    for p in decode_points(a):
        label = (f"kv {a.dtype} d={p['d']} Nq={p['Nq']} Nk={p['Nk']} B={p['B']} H={p['H']}/{p['Hkv']} "
                 f"lens={','.join(map(str, p['lens'][:8]))}{'…' if len(p['lens']) > 8 else ''}"
                 f"{' +%d' % p['append'] if p['append'] else ''}{' paged %d' % p['block'] if p['block'] else ''}"
                 f" causal={int(p['causal'])}")
        times, notes = time_decode(p, a, dev, native_gqa)
        torch.cuda.empty_cache()
        if not times:
            print(f"skip {label}: no SDPA backend runs it", file=sys.stderr)
            continue
        flops = kv_flops(p["lens"], p["append"], p["Nq"], p["H"], p["d"], p["d"], p["causal"])
        nbytes = kv_cache_bytes(p["lens"], p["append"], p["Hkv"], p["d"], p["d"], a.dtype)
        meds = {name: statistics.median(ts) for name, ts in times.items()}
        for name, m in meds.items():
            print(f"{label} sdpa-{name}: {m:8.3f} ms {nbytes / (m * 1e-3) / 1e9:8.1f} GB/s", flush=True)
        best = min(meds, key=meds.get)
        ts, med = times[best], meds[best]
        r = dict(direction="kv", dtype=a.dtype, B=p["B"], H=p["H"], Hkv=p["Hkv"], Nq=p["Nq"], Nk=p["Nk"], d=p["d"], dv=p["d"],
                 causal=p["causal"], align="bottom-right", kernel=f"sdpa-{best}",
                 median_ms=med, p10_ms=quantile(ts, 0.1), p90_ms=quantile(ts, 0.9),
                 tflops=flops / (med * 1e-3) / 1e12, iters=a.iters, clock="cuda-events",
                 cache_seqlens=p["lens"], append=p["append"], cache_bytes=nbytes, gb_per_s=nbytes / (med * 1e-3) / 1e9,
                 backends_ms=meds, note="; ".join(notes))
        if p["block"]:
            r["block_size"] = p["block"]
        results.append(r)
        print(f"{label} best sdpa-{best}: {med:8.3f} ms {r['tflops']:9.3f} TFLOP/s {r['gb_per_s']:8.1f} GB/s ({r['note']})", flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default=None, choices=BACKENDS + ["best"],
                    help="SDPA backend, or best: time each and report the fastest (default: flash; best in decode mode)")
    ap.add_argument("--dtype", default="float16", choices=DTYPES)
    ap.add_argument("--dim", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--seq", type=int, nargs="+", default=None, help="sequence lengths N (default 512 … 16384)")
    ap.add_argument("--causal", default=None, choices=["true", "false", "both"],
                    help="masks (default both; in decode mode the decoding rule: bottom-right causal, none for Nq = 1)")
    ap.add_argument("--tokens", type=int, default=None, help="B*N (default 16384)")
    ap.add_argument("--hidden", type=int, default=2048, help="H*d (default 2048)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--rotate", type=int, default=4)
    ap.add_argument("--backward", action="store_true", help="also time the backward")
    ap.add_argument("--json", help="write results here")
    op = ap.add_argument_group("options beyond the causal mask (as flashvk bench's; not in decode mode)")
    op.add_argument("--window", type=window_pair, help="sliding window L,R: keys i-L ... i+R (-1 unbounded; with --causal R is -1 or 0)")
    op.add_argument("--softcap", type=float, help="cap each scaled score s to C*tanh(s/C) (flex_attention, else the eager math path)")
    op.add_argument("--alibi", action="store_true", help="ALiBi bias -slope_h*|i - j|, slope_h = 2^(-8(h+1)/H)")
    op.add_argument("--seqused-k", type=int_list, nargs="+",
                    help="keys each sequence uses (the rest masked): one for every sequence, or one per sequence (sets B)")
    op.add_argument("--dropout", type=dropout_p, metavar="P",
                    help="attention dropout P, 0 < P < 1: SDPA's dropout_p (TIMINGS ONLY: PyTorch's mask is its own, not flashvk's; "
                         "a backend that refuses dropout is skipped; with --softcap the eager math path)")
    op.add_argument("--bias", metavar="FILE.npy",
                    help="an additive bias on the scores, float32 or float16, [B|1, H|1, Nq|1, Nk] (or [H|1, Nq|1, Nk], [Nq|1, Nk]): "
                         "SDPA's float attn_mask (in --dtype), -inf hiding a key")
    op.add_argument("--mask", metavar="FILE.npy",
                    help="a boolean mask, bool or uint8 0/1 (True attends), shaped as --bias's: SDPA's boolean attn_mask")
    op.add_argument("--bias-grad", action="store_true",
                    help="time the backward with the bias's gradient too (needs --backward; the bias a leaf requiring grad)")
    op.add_argument("--seqlens", type=int_list, nargs="+",
                    help="a packed batch of sequences of these lengths (Nq = Nk = each, B their count): replaces --seq and --tokens; "
                         "takes --heads, --kv-heads and --dry-run (see above)")
    dm = ap.add_argument_group("decode mode (KV-cache calls, as flashvk bench's decode mode)")
    dm.add_argument("--decode", action="store_true", help="decode mode (implied by --cache-seqlens, --paged, --append)")
    dm.add_argument("--cache-seqlens", type=int_list, nargs="+", help="rows cached per sequence before the call (sets B)")
    dm.add_argument("--nq", type=int_list, nargs="+", help="queries per sequence (default 1)")
    dm.add_argument("--nk", type=int_list, nargs="+", help="cache capacities per sequence (default: longest length + append)")
    dm.add_argument("--batch", type=int, help="sequences B (default: len(--cache-seqlens), else tokens/max(Nq, Nk))")
    dm.add_argument("--heads", type=int, help="query heads H (default hidden/d; also with --seqlens)")
    dm.add_argument("--kv-heads", type=int, help="key/value heads Hkv (default H; also with --seqlens)")
    dm.add_argument("--paged", type=int, help="paged cache of blocks of this many rows (timed gathered: see above)")
    dm.add_argument("--append", type=int, default=None, help="new K/V rows appended per sequence (not timed)")
    dm.add_argument("--seed", type=int, default=None, help="seed of the inputs and the block table (default 1)")
    dm.add_argument("--dry-run", action="store_true",
                    help="print the decode (or --seqlens) points as JSON lines and time nothing (no GPU)")
    a = ap.parse_args(join_window(sys.argv[1:]))
    a.cache_seqlens, a.nq, a.nk, a.seqused_k = flatten(a.cache_seqlens), flatten(a.nq), flatten(a.nk), flatten(a.seqused_k)
    a.seqlens = flatten(a.seqlens)
    a.seq_given, a.append_given, a.tokens_given = a.seq is not None, a.append is not None, a.tokens is not None
    a.append = a.append or 0
    a.tokens = 16384 if a.tokens is None else a.tokens
    a.bias_spec = None
    decode = a.decode or a.cache_seqlens is not None or a.paged is not None or a.append_given

    if decode:
        if a.decode and (a.cache_seqlens is not None or a.paged is not None or a.append_given):
            ap.error("--decode has no effect: --cache-seqlens, --paged or --append selects decode mode")
        check_decode_args(ap, a)
        a.backend = a.backend or "best"
        if a.dry_run:
            for p in decode_points(a):
                p["cache_bytes"] = kv_cache_bytes(p["lens"], p["append"], p["Hkv"], p["d"], p["d"], a.dtype)
                p["flops"] = kv_flops(p["lens"], p["append"], p["Nq"], p["H"], p["d"], p["d"], p["causal"])
                print(json.dumps(p))
            return
    else:
        packed = a.seqlens is not None
        packed_flags = ("--heads", "--kv-heads", "--dry-run")
        for flag, given in (("--nq", a.nq), ("--nk", a.nk), ("--batch", a.batch), ("--heads", a.heads),
                            ("--kv-heads", a.kv_heads), ("--seed", a.seed is not None), ("--dry-run", a.dry_run)):
            if given and not (packed and flag in packed_flags):
                also = " or to --seqlens" if flag in packed_flags else ""
                ap.error(f"{flag} applies to decode mode (--cache-seqlens, --paged, --append or --decode){also}")
        causals = {"true": [True], "false": [False], "both": [False, True]}[a.causal or "both"]
        if packed:
            check_packed_args(ap, a)
        seqs = a.seq or [512, 1024, 2048, 4096, 8192, 16384]
        check_feature_args(ap, a, [max(a.seqlens)] if packed else seqs, causals)
        if packed:
            points = [(p["B"], p["H"], p["Nq"], p["Nk"]) for p in packed_points(a, causals)]
        else:
            batch = len(a.seqused_k) if a.seqused_k and len(a.seqused_k) > 1 else None
            points = [(b, h, n, n) for _, n, _, b, h in grid(a.dim, seqs, causals, a.tokens, a.hidden, batch)]
        check_bias_args(ap, a, points)
        masked = a.window is not None or a.alibi or a.seqused_k or packed or a.bias_spec is not None
        a.backend = a.backend or ("flex" if a.softcap is not None else "best" if masked else "flash")
        if a.dry_run:
            for p in packed_points(a, causals):
                print(json.dumps(p))
            return
    if torch is None:
        sys.exit("torch_sdpa.py: needs PyTorch with CUDA (import torch failed)")

    if decode:
        results = run_decode(a)
    elif a.seqlens is not None:
        results = run_packed(a)
    else:
        results = run_grid(a)

    doc = {
        "schema": "flashvk-bench/1", "tool": "torch", "version": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": torch.cuda.get_device_name(), "driver": f"CUDA {torch.version.cuda}",
                   "backend": f"torch-sdpa-{a.backend}" if a.backend != "flex" else
                   f"torch-{'flex-attention' if use_flex(a) else 'eager-softcap'}"},
        "results": results,
    }
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1)


# ---- options beyond the causal mask: on CUDA ----

def feature_mask(a, b, h, n, causal, dt, dev, ks=None):
    """The additive float attn_mask of --window, --alibi and --seqused-k (the
    causal mask folded in), in dtype dt, only as large as needed: [B or 1,
    H or 1, N, N]; 0 where a key is visible (plus ALiBi's bias), -inf where
    not. ks are each sequence's key counts (a packed batch padded to N: the
    keys past its length or --seqused-k are masked), else --seqused-k's or
    N each. A row that would see no key (a padding row of an empty sequence,
    a key count of 0) sees key 0: SDPA returns NaN for a row of -inf, and
    such a row's output is not flashvk's anyway (0). Returns the mask and
    its description."""
    i = torch.arange(n, device=dev)[:, None]
    j = torch.arange(n, device=dev)[None, :]
    vis = torch.ones(n, n, dtype=torch.bool, device=dev)
    w = a.window
    if w is not None and w[0] >= 0:
        vis &= j >= i - w[0]
    if w is not None and w[1] >= 0:
        vis &= j <= i + w[1]
    if causal:
        vis &= j <= i
    ks = ks or a.seqused_k or [n] * b
    per_batch = len(set(ks)) > 1
    mb, mh = (b if per_batch else 1), (h if a.alibi else 1)
    mask = torch.empty(mb, mh, n, n, dtype=dt, device=dev)
    dist = (i - j).abs().float() if a.alibi else None
    slopes = alibi_slopes(h)
    keyless = False
    for x in range(mb):
        keep = vis & (j < ks[x])
        none = ~keep.any(dim=-1)
        if bool(none.any()):
            keep[:, 0] = keep[:, 0] | none
            keyless = True
        for y in range(mh):
            bias = -slopes[y] * dist if a.alibi else torch.zeros(n, n, device=dev)
            mask[x, y] = bias.masked_fill_(~keep, float("-inf"))  # copied into dt
    del vis, dist
    what = [k for k, on in (("key padding of --seqlens", a.seqlens), ("window %d,%d" % tuple(w) if w else "", w),
                           ("alibi", a.alibi), ("seqused_k", a.seqused_k), ("causal", causal),
                           ("rows without a key see key 0", keyless)) if on]
    return mask, (f"additive {a.dtype} attn_mask {list(mask.shape)} ({', '.join(what)}; top-left diagonal), "
                  f"{mask.numel() * mask.element_size() / 2**20:.0f} MiB")


_flex = None


def flex():
    """flex_attention compiled with torch.compile, and create_block_mask;
    None where this PyTorch has no flex_attention."""
    global _flex
    if _flex is None:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            _flex = (torch.compile(flex_attention, dynamic=False), create_block_mask)
        except ImportError:
            _flex = ()
    return _flex or None


def use_flex(a):
    """Whether --softcap runs through flex_attention: where this PyTorch
    has it, without --dropout (flex_attention has no dropout) and without
    --bias or --mask (the eager path adds them as plain tensors)."""
    return a.dropout is None and a.bias_spec is None and flex() is not None


def load_bias(a, dt, dev):
    """--bias or --mask as SDPA takes it, on dev, [B|1, H|1, Nq|1, Nk]:
    a float bias in dt (SDPA takes a float attn_mask of the query's dtype
    only: a float32 file is rounded to dt, where flashvk keeps it float32)
    or a boolean mask (True attends). With --bias-grad it is a float leaf
    requiring grad (a mask as 0 and -inf in dt), returned twice: as the
    bias and as the leaf whose gradient the backward computes (None
    without)."""
    import numpy as np  # torch's own dependency; only here, on CUDA
    spec = a.bias_spec
    arr = np.ascontiguousarray(np.load(spec["path"]))
    if spec["type"] == "uint8" and arr.size and int(arr.max()) > 1:
        sys.exit(f"--mask {spec['path']}: a uint8 mask holds 0 (hide the key) and 1 (attend) only")
    t = torch.from_numpy(arr).reshape(spec["shape"]).to(dev)
    if spec["type"] in ("bool", "uint8"):
        t = t.bool()
        if not a.bias_grad:
            return t, None
        t = torch.zeros(t.shape, dtype=dt, device=dev).masked_fill_(~t, float("-inf"))
    else:
        t = t.to(dt)
    if a.bias_grad:
        t.requires_grad_()
        return t, t
    return t, None


def with_bias(a, mask, how, bias):
    """The attn_mask of a point: the feature mask (mask, None without; it
    has the causal mask folded in) plus the bias (a boolean mask as 0 and
    -inf), or the bias alone; and how, told."""
    if bias is None:
        return mask, how
    spec = a.bias_spec
    what = f"{spec['flag']} {spec['descriptor']}" + (" (a leaf requiring grad)" if a.bias_grad else "")
    if mask is None:
        return bias, what + (" as SDPA's boolean attn_mask" if bias.dtype == torch.bool else f" as the {a.dtype} attn_mask")
    if bias.dtype == torch.bool:
        bias = torch.zeros(bias.shape, dtype=mask.dtype, device=mask.device).masked_fill_(~bias, float("-inf"))
    return mask + bias, f"{how}, plus {what}"


def bias_leaves(leaf):
    """The leaves of the bias the backward differentiates (none without
    --bias-grad)."""
    return () if leaf is None else (leaf,)


def softcap_impl(a, b, h, n, causal, dt, dev, ks=None, bias=None):
    """--softcap's implementation of a point: flex_attention with a score_mod
    (the softcap, then ALiBi) and a block mask (causal, window, key counts:
    ks, as feature_mask takes them), or, without flex_attention (or with
    a bias), the eager math path (scores materialised, softcapped, the
    feature mask and the bias added, softmax in float32). Returns (name,
    attend(q, k, v), note)."""
    c, w = a.softcap, a.window
    ks = ks or a.seqused_k or [n] * b
    if use_flex(a):
        attend_flex, create_block_mask = flex()
        slopes = torch.tensor(alibi_slopes(h), device=dev)
        seqk = torch.tensor(ks, device=dev)

        def score_mod(score, bi, hi, qi, ki):
            score = c * torch.tanh(score / c)
            if a.alibi:
                score = score - slopes[hi] * (qi - ki).abs()
            return score

        def mask_mod(bi, hi, qi, ki):
            ok = ki < seqk[bi]
            if causal:
                ok = ok & (ki <= qi)
            if w is not None and w[0] >= 0:
                ok = ok & (ki >= qi - w[0])
            if w is not None and w[1] >= 0:
                ok = ok & (ki <= qi + w[1])
            return ok
        masked = causal or w is not None or any(k != n for k in ks)
        per_batch = len(set(ks)) > 1
        block = create_block_mask(mask_mod, b if per_batch else None, None, n, n, device=dev) if masked else None
        return ("flex-attention", lambda q, k, v: attend_flex(q, k, v, score_mod=score_mod, block_mask=block),
                "flex_attention (torch.compile) with a score_mod (softcap" + (", alibi" if a.alibi else "") + ")"
                + (" and a block mask" if masked else ""))
    mask, how = (feature_mask(a, b, h, n, causal, dt, dev, ks) if causal or w is not None or a.alibi or any(k != n for k in ks)
                 else (None, "no mask"))
    mask, how = with_bias(a, mask, how, bias)
    if mask is not None and mask.dtype == torch.bool:  # added to the scores: as 0 and -inf
        mask = torch.zeros(mask.shape, dtype=dt, device=dev).masked_fill_(~mask, float("-inf"))

    def attend_eager(q, k, v):
        s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        s = c * torch.tanh(s / c)
        if mask is not None:
            s = s + mask
        p = torch.softmax(s.float(), dim=-1)
        if a.dropout is not None:
            p = torch.dropout(p, a.dropout, True)
        return p.to(q.dtype) @ v
    why = ("flex_attention has no dropout" if a.dropout is not None and flex() is not None
           else "the bias runs as a plain tensor" if a.bias_spec is not None and flex() is not None
           else "no flex_attention in this PyTorch")
    drop = f", dropout {a.dropout} by torch.dropout on the probabilities" if a.dropout is not None else ""
    return "eager-softcap", attend_eager, f"{why}: eager math path (scores materialised{drop}); {how}"


def point_impls(a, b, h, n, causal, dt, dev, bias=None):
    """The implementations to time on a point: [(name, context, attend)],
    attend(q, k, v) -> O under context(), and a note on how the options
    ran ("" without options). bias is --bias or --mask's (load_bias)."""
    if a.softcap is not None:
        name, attend, note = softcap_impl(a, b, h, n, causal, dt, dev, bias=bias)
        return [(name, contextlib.nullcontext, attend)], note
    mask, note = None, ""
    if a.window is not None or a.alibi or a.seqused_k or (bias is not None and causal):
        mask, note = feature_mask(a, b, h, n, causal, dt, dev)
    mask, note = with_bias(a, mask, note, bias)
    impls = [(f"sdpa-{name}", context, attend) for name, context, attend in sdpa_impls(a, mask, causal)]
    if a.dropout is not None:
        note = "; ".join(x for x in (note, dropout_note(a)) if x)
    return impls, note


def dropout_note(a):
    """How --dropout ran on SDPA."""
    return f"dropout_p={a.dropout} (PyTorch's own mask: timings only)"


def sdpa_impls(a, mask, causal, kw=None, what=""):
    """The SDPA backends to time: [(backend, context, attend)] for those
    of a.backend ("best": every one of BACKENDS) that this PyTorch has and
    that take the mask (flash takes none), telling stderr of each skipped
    one (what, "" or e.g. "padded ", before "flash"). attend(q, k, v) -> O
    runs scaled_dot_product_attention with attn_mask=mask, or without a
    mask with is_causal=causal, and the keywords kw (and --dropout's
    dropout_p: a backend that refuses it raises when timed, and is
    skipped there with its reason)."""
    kw = dict(kw or {})
    if a.dropout is not None:
        kw["dropout_p"] = a.dropout
    impls = []
    for name in BACKENDS if a.backend == "best" else [a.backend]:
        be = sdp_backend(name)
        if be is None:
            print(f"skip {name}: not in this PyTorch", file=sys.stderr)
            continue
        if mask is not None and name == "flash":
            print(f"skip {what}flash: it takes no attn_mask", file=sys.stderr)
            continue
        if mask is None:
            def attend(q, k, v):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
        else:
            def attend(q, k, v):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
        impls.append((name, lambda be=be: sdpa_kernel(be), attend))
    return impls


def run_grid(a):
    dev = torch.device("cuda")
    dt = getattr(torch, a.dtype)
    seqs = a.seq or [512, 1024, 2048, 4096, 8192, 16384]
    causals = {"true": [True], "false": [False], "both": [False, True]}[a.causal or "both"]
    feats = features_of(a)
    batch = len(a.seqused_k) if a.seqused_k and len(a.seqused_k) > 1 else None
    bias, leaf = load_bias(a, dt, dev) if a.bias_spec else (None, None)
    results = []
    for d, n, causal, b, h in grid(a.dim, seqs, causals, a.tokens, a.hidden, batch):
        # BHSD, as SDPA takes it.
        sets = []
        for _ in range(a.rotate):
            q, k, v = (torch.randn(b, h, n, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
            sets.append((q, k, v, torch.randn(b, h, n, d, device=dev, dtype=dt)))
        if feats:
            seqused = a.seqused_k * b if a.seqused_k and len(a.seqused_k) == 1 else a.seqused_k
            flops = feature_flops(b, h, n, d, causal, a.window, seqused)
        else:
            flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        impls, note = point_impls(a, b, h, n, causal, dt, dev, bias)
        if note:
            print(f"d={d} N={n} causal={int(causal)}: {note}", file=sys.stderr)
        directions = ["fwd", "bwd"] if a.backward else ["fwd"]
        for direction in directions:
            timed = {}
            for name, context, attend in impls:
                with context():
                    try:
                        if direction == "fwd":
                            def fn(i, attend=attend):
                                q, k, v, _ = sets[i % len(sets)]
                                with torch.no_grad():
                                    attend(q, k, v)
                            f = flops
                        else:
                            outs = [attend(q, k, v) for q, k, v, _ in sets]

                            def fn(i, outs=outs):
                                j = i % len(sets)
                                q, k, v, do = sets[j]
                                torch.autograd.grad(outs[j], (q, k, v) + bias_leaves(leaf), do, retain_graph=True)
                            f = 2.5 * flops
                        timed[name] = time_calls(fn, a.warmup, a.iters)
                    except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:  # the implementation refuses this shape, mask or dropout
                        print(f"skip {name} d={d} N={n} causal={causal} {direction}: {refusal(e, a)}", file=sys.stderr)
                        continue
                    finally:
                        outs = fn = None  # the backward graphs of this implementation
            if not timed:
                continue
            best = min(timed, key=lambda name: statistics.median(timed[name]))
            ts = timed[best]
            med = statistics.median(ts)
            r = dict(direction=direction, dtype=a.dtype, B=b, H=h, Hkv=h, Nq=n, Nk=n, d=d, dv=d,
                     causal=causal, align="top-left", kernel=best,
                     median_ms=med, p10_ms=quantile(ts, 0.1), p90_ms=quantile(ts, 0.9),
                     tflops=f / (med * 1e-3) / 1e12, iters=a.iters, clock="cuda-events")
            if feats:
                r.update(feats)
                r.update(bias_grad_of(a, direction))
                if a.seqused_k:
                    r["seqused_k"] = seqused
                r.update(note=note, backends_ms={name: statistics.median(t) for name, t in timed.items()})
            results.append(r)
            print(f"{direction} {a.dtype} d={d:3d} N={n:5d} causal={int(causal)} B={b:2d} H={h:2d} "
                  f"{med:8.3f} ms {r['tflops']:7.1f} TFLOP/s {best}", flush=True)
        del sets, impls
        torch.cuda.empty_cache()
    return results


# ---- packed sequences (--seqlens): on CUDA ----

def packed_impls(a, p, dt, dev, native_gqa, bias=None):
    """The implementations to time on a packed point: [(name, context,
    layout, attend)], attend taking that layout's inputs ("padded": the
    batch padded to the longest length, [B, H, N, d]; "nested": nested
    jagged tensors over the packed rows); a note on how they ran; and the
    K and V heads of the padded inputs (Hkv where SDPA takes enable_gqa,
    else H). The padded batch runs SDPA with an additive mask of the key
    padding (and the causal mask, window, ALiBi and key counts), or, where
    every length is the same and no option needs one, with no mask
    (is_causal); the flash backend takes no mask. With --softcap it runs
    flex_attention or the eager math path instead (see softcap_impl).
    Nested tensors take no mask: SDPA on them (the flash and efficient
    backends' varlen kernels, is_causal) runs only without --window,
    --alibi, --seqused-k, --softcap, --bias and --mask (bias: load_bias's,
    added to the padded batch's mask)."""
    b, h, n, lens, causal = p["B"], p["H"], p["Nq"], p["seqlens"], p["causal"]
    ks = p.get("seqused_k", lens)
    group = h // p["Hkv"]
    gqa = native_gqa and group > 1 and a.softcap is None
    notes = []
    if group > 1:
        notes.append("GQA: " + ("padded by enable_gqa" if gqa else f"K and V with all {h} heads")
                     + ("" if a.softcap is not None else "; nested K and V with all heads (nested tensors take no GQA)"))
    if a.softcap is not None:
        name, attend, note = softcap_impl(a, b, h, n, causal, dt, dev, ks, bias)
        return [(name, contextlib.nullcontext, "padded", attend)], "; ".join([f"padded to {n}: {note}"] + notes), h
    mask, how = None, f"padded to {n}, no mask (every length {n})" + (", is_causal" if causal else "")
    options = a.window is not None or a.alibi or a.seqused_k or bias is not None
    if options or any(x != n for x in lens):
        if options and not (a.window is not None or a.alibi or a.seqused_k or causal) and all(x == n for x in lens):
            mask, how = with_bias(a, None, "", bias)  # the bias alone
        else:
            mask, how = with_bias(a, *feature_mask(a, b, h, n, causal, dt, dev, ks), bias)
        how = f"padded to {n}: {how}"
    notes.insert(0, how)
    kw = {"enable_gqa": True} if gqa else {}
    if a.dropout is not None:
        notes.append(dropout_note(a))
    impls = [(f"sdpa-padded-{name}", context, "padded", attend)
             for name, context, attend in sdpa_impls(a, mask, causal, kw, "padded ")]
    if options:
        notes.insert(1, "nested: not timed (nested tensors take no mask)")
    elif getattr(torch.nested, "nested_tensor_from_jagged", None) is None:
        notes.insert(1, "nested: not timed (no torch.nested.nested_tensor_from_jagged in this PyTorch)")
    else:
        drop = {"dropout_p": a.dropout} if a.dropout is not None else {}

        def attend_nested(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **drop).transpose(1, 2).values()
        for name in BACKENDS if a.backend == "best" else [a.backend]:
            be = sdp_backend(name)
            if be is not None:
                impls.append((f"sdpa-nested-{name}", lambda be=be: sdpa_kernel(be), "nested", attend_nested))
        empty = sum(1 for x in lens if x == 0)
        notes.insert(1, "nested: SDPA on nested jagged tensors [B, H, {Ni}, d] over the packed rows (varlen kernels)"
                     + (f", the {empty} empty sequences left out (no rows)" if empty else ""))
    return impls, "; ".join(notes), p["Hkv"] if gqa else h


def packed_inputs(p, dt, dev, hkv, nested):
    """One input set of a packed point: "padded" [q, k, v, do]
    [B, H, N, d] (K and V with hkv heads), and with nested "nested"
    (views, leaves, do): q, k, v nested jagged tensors [B', H, {Ni}, d]
    viewing the packed leaves [T, H, d] (the non-empty sequences' rows),
    and dO [T, H, d] for the backward."""
    b, h, n, d, lens = p["B"], p["H"], p["Nq"], p["d"], p["seqlens"]
    padded = [torch.randn(b, x, n, d, device=dev, dtype=dt, requires_grad=True) for x in (h, hkv, hkv)]
    padded.append(torch.randn(b, h, n, d, device=dev, dtype=dt))
    out = {"padded": padded}
    if nested:
        rows = [x for x in lens if x]
        offsets = torch.tensor([sum(rows[:i]) for i in range(len(rows) + 1)], device=dev, dtype=torch.int64)
        leaves = [torch.randn(sum(rows), h, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3)]
        views = [torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2) for x in leaves]
        out["nested"] = (views, leaves, torch.randn(sum(rows), h, d, device=dev, dtype=dt))
    return out


def run_packed(a):
    dev = torch.device("cuda")
    dt = getattr(torch, a.dtype)
    causals = {"true": [True], "false": [False], "both": [False, True]}[a.causal or "both"]
    native_gqa = gqa_native()
    feats = features_of(a)
    bias, leaf = load_bias(a, dt, dev) if a.bias_spec else (None, None)
    results = []
    for p in packed_points(a, causals):
        b, h, n, d, lens, causal = p["B"], p["H"], p["Nq"], p["d"], p["seqlens"], p["causal"]
        label = f"d={d} B={b} T={sum(lens)} seqlens={','.join(map(str, lens[:8]))}{'…' if len(lens) > 8 else ''} causal={int(causal)}"
        impls, note, hkv = packed_impls(a, p, dt, dev, native_gqa, bias)
        nested = any(layout == "nested" for _, _, layout, _ in impls)
        sets = [packed_inputs(p, dt, dev, hkv, nested) for _ in range(a.rotate)]
        print(f"{label}: {note}", file=sys.stderr)
        for direction in ["fwd", "bwd"] if a.backward else ["fwd"]:
            timed = {}
            for name, context, layout, attend in impls:
                # args(s): attend's inputs in set s; grads(s): the leaves
                # and dO of the backward.
                if layout == "padded":
                    def args(s):
                        return s["padded"][:3]

                    def grads(s):
                        return tuple(s["padded"][:3]) + bias_leaves(leaf), s["padded"][3]
                else:
                    def args(s):
                        return s["nested"][0]

                    def grads(s):
                        return s["nested"][1], s["nested"][2]
                with context():
                    try:
                        if direction == "fwd":
                            def fn(i, attend=attend, args=args):
                                with torch.no_grad():
                                    attend(*args(sets[i % len(sets)]))
                        else:
                            outs = [attend(*args(s)) for s in sets]

                            def fn(i, outs=outs, grads=grads):
                                j = i % len(sets)
                                leaves, do = grads(sets[j])
                                torch.autograd.grad(outs[j], leaves, do, retain_graph=True)
                        timed[name] = time_calls(fn, a.warmup, a.iters)
                    except (RuntimeError, TypeError, ValueError, NotImplementedError, AttributeError) as e:  # refuses this shape, mask, layout or dropout
                        print(f"skip {name} {label} {direction}: {refusal(e, a)}", file=sys.stderr)
                        continue
                    finally:
                        outs = fn = None  # the backward graphs of this implementation
            if not timed:
                print(f"skip {label} {direction}: no implementation runs it", file=sys.stderr)
                continue
            meds = {name: statistics.median(t) for name, t in timed.items()}
            best = min(meds, key=meds.get)
            ts, med = timed[best], meds[best]
            f = p["flops"] * (2.5 if direction == "bwd" else 1)
            r = dict(direction=direction, dtype=a.dtype, B=b, H=h, Hkv=p["Hkv"], Nq=n, Nk=n, d=d, dv=d,
                     causal=causal, align="top-left", kernel=best,
                     median_ms=med, p10_ms=quantile(ts, 0.1), p90_ms=quantile(ts, 0.9),
                     tflops=f / (med * 1e-3) / 1e12, iters=a.iters, clock="cuda-events")
            r.update(feats)
            r.update(bias_grad_of(a, direction))
            r.update(seqlens=lens, note=note, backends_ms=meds)
            if a.seqused_k:
                r["seqused_k"] = p["seqused_k"]
            results.append(r)
            print(f"{direction} {a.dtype} {label} {med:8.3f} ms {r['tflops']:7.1f} TFLOP/s {best}", flush=True)
        del sets, impls
        torch.cuda.empty_cache()
    return results


if __name__ == "__main__":
    main()
