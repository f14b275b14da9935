#!/usr/bin/env python3
"""Independent oracle for qlinear's reference quantizers (src/quant/, include/qlinear/quantize.hpp).

Written from the numerics spec (quantize.hpp, the comments at the top of each src/quant/*_quant.cpp, and
vLLM's formulas in shared/reference/vllm-linear-kernels.md §3.2, 3.3, 5.3, 5.5-5.7), not from the C++:
  * element rounding snaps to the nearest value of the format's *value table* (decoded by ml_dtypes from
    every code), ties to the even code, instead of bit manipulation;
  * E8M0 exponents are found by exact comparisons against powers of two (np.ldexp), not by log2;
  * FP6/FP4 packing is written out from the layout description.
(ml_dtypes' own float64 -> float8 cast rounds through float32 first, a double rounding that differs from
RNE on some quotients, so it is used only to decode codes, never to encode.)

For fixed seeded inputs it writes, into tests/data/quant/:
  inputs.bin      the input tensors' raw little-endian bytes (f32, bf16, f16 or f64), concatenated
  expected.bin    every case's expected data codes, scale, scale2 and zero point, concatenated
  manifest.json   where each of those lies (offset, bytes, dtype, shape), and each case's key and options
`--check` regenerates into a temporary folder and compares it with the committed files (exit 1 on any
difference).
"""
import argparse
import filecmp
import json
import os
import sys
import tempfile

import ml_dtypes
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(REPO, "tests", "data", "quant")

FP8_MAX = 448.0
FP8_MIN_SCALING_FACTOR = np.float32(1.0) / np.float32(448.0 * 512.0)  # f32, as in quantize.hpp


# ---- Element formats: rounding by value table -----------------------------------------------------------
class MiniFloat:
    """A small float format; codes are sign | magnitude, magnitude codes ordered like their values."""

    def __init__(self, name, ml_type, bits):
        self.name, self.bits = name, bits
        mags = np.arange(2 ** (bits - 1), dtype=np.uint8)
        values = mags.view(ml_type).astype(np.float64)
        finite = np.isfinite(values)
        self.values = values[finite]  # ascending, index == magnitude code
        assert np.all(np.diff(self.values) > 0)
        self.max = self.values[-1]

    def encode(self, x):
        """RNE with saturation: the nearest table value, ties to the even code; sign kept (also for 0)."""
        x = np.asarray(x, dtype=np.float64)
        a = np.minimum(np.abs(x), self.max)
        n = len(self.values)
        lo = np.clip(np.searchsorted(self.values, a, side="right") - 1, 0, n - 1)
        hi = np.minimum(lo + 1, n - 1)
        mid = (self.values[lo] + self.values[hi]) / 2  # exact: both have few significant bits
        up = (a > mid) | ((a == mid) & (lo % 2 == 1))
        mag = np.where((hi != lo) & up, hi, lo).astype(np.uint32)
        return mag | (np.signbit(x).astype(np.uint32) << (self.bits - 1))

    def decode(self, codes):
        codes = np.asarray(codes, dtype=np.uint32)
        mag = self.values[codes & ((1 << (self.bits - 1)) - 1)]
        return np.where(codes >> (self.bits - 1) == 1, -mag, mag)


E4M3 = MiniFloat("f8e4m3fn", ml_dtypes.float8_e4m3fn, 8)
E2M3 = MiniFloat("f6e2m3fn", ml_dtypes.float6_e2m3fn, 6)
E3M2 = MiniFloat("f6e3m2fn", ml_dtypes.float6_e3m2fn, 6)
E2M1 = MiniFloat("f4e2m1fn", ml_dtypes.float4_e2m1fn, 4)
ELEMENTS = {f.name: f for f in (E4M3, E2M3, E3M2, E2M1)}


def f32(v):
    """Round float64 values to float32 once (the stored f32 scale), back as float64."""
    return np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)


def pack(codes, fmt):
    """Rows of codes -> packed bytes: FP4 two per byte (low nibble first); FP6 four in three bytes,
    w = v0 | v1<<6 | v2<<12 | v3<<18 little-endian; E4M3 one byte each."""
    codes = codes.astype(np.uint32)
    rows, cols = codes.shape
    if fmt.bits == 8:
        return codes.astype(np.uint8)
    if fmt.bits == 4:
        c = codes.reshape(rows, cols // 2, 2)
        return (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)
    c = codes.reshape(rows, cols // 4, 4)
    w = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
    return np.stack([w & 0xFF, (w >> 8) & 0xFF, (w >> 16) & 0xFF], axis=-1).reshape(rows, -1).astype(np.uint8)


# ---- Keys (mirroring quant_key.hpp's named keys) ---------------------------------------------------------
def key(dtype, sdtype, static, group, scale2=False, symmetric=True):
    return {"dtype": dtype, "scale": {"dtype": sdtype, "static": static, "group": list(group)},
            "scale2": {"dtype": "f32", "static": True, "group": [-1, -1]} if scale2 else None,
            "symmetric": symmetric}


PT, TOK, CH = (-1, -1), (1, -1), (-1, 1)
KEYS = {
    "kFp8StaticTensorSym": key("f8e4m3fn", "f32", True, PT),
    "kFp8DynamicTensorSym": key("f8e4m3fn", "f32", False, PT),
    "kFp8StaticTokenSym": key("f8e4m3fn", "f32", True, TOK),
    "kFp8StaticChannelSym": key("f8e4m3fn", "f32", True, CH),
    "kFp8DynamicTokenSym": key("f8e4m3fn", "f32", False, TOK),
    "kFp8Dynamic128Sym": key("f8e4m3fn", "f32", False, (1, 128)),
    "kFp8Dynamic64Sym": key("f8e4m3fn", "f32", False, (1, 64)),
    "kFp8Static128BlockSym": key("f8e4m3fn", "f32", True, (128, 128)),
    "kFp8Dynamic128x128Sym": key("f8e4m3fn", "f32", False, (128, 128)),
    "kInt8StaticTensorSym": key("i8", "f32", True, PT),
    "kInt8StaticTensorAsym": key("i8", "f32", True, PT, symmetric=False),
    "kInt8DynamicTokenSym": key("i8", "f32", False, TOK),
    "kInt8DynamicTokenAsym": key("i8", "f32", False, TOK, symmetric=False),
    "kInt8StaticChannelSym": key("i8", "f32", True, CH),
    "Int8DynamicTensorSym": key("i8", "f32", False, PT),  # not a named key: dynamic per-tensor INT8
    "kNvfp4Static": key("f4e2m1fn", "f8e4m3fn", True, (1, 16), scale2=True),
    "kNvfp4Dynamic": key("f4e2m1fn", "f8e4m3fn", False, (1, 16), scale2=True),
}
MX_KEYS = {"f8e4m3fn": "kMxfp8", "f6e2m3fn": "kMxfp6E2M3", "f6e3m2fn": "kMxfp6E3M2", "f4e2m1fn": "kMxfp4"}
for elem, prefix in MX_KEYS.items():
    KEYS[prefix + "Static"] = key(elem, "e8m0fnu", True, (1, 32))
    KEYS[prefix + "Dynamic"] = key(elem, "e8m0fnu", False, (1, 32))


# ---- FP8 / INT8 with f32 scales --------------------------------------------------------------------------
def group_extent(group, rows, cols):
    """Rows and cols one scale covers; per-channel (-1, 1) is one scale per row (an output channel)."""
    if tuple(group) == CH:
        return 1, max(cols, 1)
    r, c = group
    return (max(rows, 1) if r == -1 else r), (max(cols, 1) if c == -1 else c)


def expand(per_group, rows, cols, er, ec):
    """A [grid_rows, grid_cols] array broadcast to [rows, cols]."""
    return np.repeat(np.repeat(per_group, er, axis=0), ec, axis=1)[:rows, :cols]


def group_amax(x, er, ec):
    rows, cols = x.shape
    gr, gc = -(-rows // er), -(-cols // ec)
    padded = np.zeros((gr * er, gc * ec))
    padded[:rows, :cols] = np.abs(x)
    return padded.reshape(gr, er, gc, ec).max(axis=(1, 3))


def scale_tensor_shape(group, rows, cols):
    if tuple(group) == PT:
        return (1,)
    if group == CH:
        return (rows, 1)
    er, ec = group_extent(group, rows, cols)
    return (1 if group[0] == -1 else -(-rows // er), 1 if group[1] == -1 else -(-cols // ec))


def quant_f32_scaled(x, k, opts):
    rows, cols = x.shape
    group, static = tuple(k["scale"]["group"]), k["scale"]["static"]
    is_int8 = k["dtype"] == "i8"
    er, ec = group_extent(group, rows, cols)
    shape = scale_tensor_shape(group, rows, cols)
    if "static_scale" in opts:
        s = np.asarray(opts["static_scale"], dtype=np.float32).astype(np.float64).reshape(shape)
    else:
        amax = group_amax(x, er, ec)
        if is_int8:
            s = f32(amax / 127.0)
            s[s == 0] = 1.0
        elif group == TOK and not static:  # vLLM dynamic per-token, MIN_SCALING_FACTOR lower bound
            ub = opts.get("scale_ub", np.inf)
            s = np.maximum(f32(np.minimum(amax, ub) / FP8_MAX), FP8_MIN_SCALING_FACTOR)
        elif group[0] == 1 and group[1] >= 1:  # 1xG groups: clamp(min=1e-10) on an f32 amax
            s = f32(np.maximum(amax, np.float64(np.float32(1e-10))) / FP8_MAX)
        else:
            s = f32(amax / FP8_MAX)
            s[s == 0] = FP8_MIN_SCALING_FACTOR
    q = x / expand(s.reshape(1, 1) if shape == (1,) else s, rows, cols, er, ec)
    if is_int8:
        data = np.clip(np.rint(q), -128, 127).astype(np.int8)
    else:
        data = E4M3.encode(q).astype(np.uint8)
    return {"data": data, "scale": s.astype(np.float32).reshape(shape)}


def quant_int8_asym(x, k, opts):
    rows, cols = x.shape
    if k["scale"]["static"]:
        s = np.float64(np.float32(opts["static_scale"][0]))
        zp = np.float64(opts["static_zero_point"][0])
        q = np.clip(np.rint(x / s) + zp, -128, 127)
        return {"data": q.astype(np.int8), "scale": np.array([s], np.float32),
                "zero_point": np.array([zp], np.int32)}
    scales, zps, data = [], [], []
    for row in x:
        lo, hi = row.min(), row.max()
        if hi == lo:  # a constant row: widen to include 0 so that s > 0 (unless it is all zeros)
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        s = float(f32((hi - lo) / 255.0))
        if s == 0:
            s = 1.0
        zp = float(np.clip(np.rint(-128.0 - lo / s), -2 ** 31, 2 ** 31 - 1))
        data.append(np.clip(np.rint(row / s) + zp, -128, 127))
        scales.append(s)
        zps.append(zp)
    return {"data": np.array(data).astype(np.int8), "scale": np.array(scales, np.float32).reshape(rows, 1),
            "zero_point": np.array(zps, np.int32).reshape(rows, 1)}


# ---- MX --------------------------------------------------------------------------------------------------
def floor_log2(v):
    """Largest e with 2^e <= v (v > 0), by exact comparison."""
    e = int(np.floor(np.log2(v)))
    while np.ldexp(1.0, e) > v:
        e -= 1
    while np.ldexp(1.0, e + 1) <= v:
        e += 1
    return e


def mx_exponent(amax, fmt, rule):
    if amax == 0:
        return -127
    if rule == "ceil_over_max":  # smallest e with amax <= max * 2^e
        e = floor_log2(amax) - floor_log2(fmt.max)
        while np.ldexp(fmt.max, e) < amax:
            e += 1
        while np.ldexp(fmt.max, e - 1) >= amax:
            e -= 1
    elif rule == "floor_log2":
        e = floor_log2(amax)
    else:  # "ocp": floor(log2 amax) - emax, emax = exponent of the largest normal
        e = floor_log2(amax) - floor_log2(fmt.max)
    return int(np.clip(e, -127, 127))


def quant_mx(x, k, opts):
    fmt = ELEMENTS[k["dtype"]]
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 32, 32)
    if "static_scale" in opts:
        e = np.asarray(opts["static_scale"], dtype=np.int64).reshape(rows, cols // 32) - 127
    else:
        amax = np.abs(blocks).max(axis=2)
        e = np.vectorize(lambda a: mx_exponent(a, fmt, opts["mx_rule"]))(amax).astype(np.int64)
    scaled = blocks * np.ldexp(1.0, -e)[..., None]  # exact: a power of two
    codes = fmt.encode(scaled).reshape(rows, cols)
    return {"data": pack(codes, fmt), "scale": (e + 127).astype(np.uint8)}


# ---- NVFP4 -----------------------------------------------------------------------------------------------
def quant_nvfp4(x, k, opts):
    rows, cols = x.shape
    if "nvfp4_global_scale" in opts:
        g = float(np.float32(opts["nvfp4_global_scale"]))
    else:
        amax = np.abs(x).max() if x.size else 0.0
        g = float(f32(FP8_MAX * 6.0 / amax)) if amax > 0 else 1.0
        if not np.isfinite(g):
            g = float(np.finfo(np.float32).max)
    blocks = x.reshape(rows, cols // 16, 16)
    if "static_scale" in opts:
        sf_codes = np.asarray(opts["static_scale"], dtype=np.uint32).reshape(rows, cols // 16)
    else:
        sf_codes = E4M3.encode(np.abs(blocks).max(axis=2) / 6.0 * g)
    sf = E4M3.decode(sf_codes)[..., None]
    codes = np.where(sf == 0, 0, E2M1.encode(blocks * g / np.where(sf == 0, 1.0, sf)))  # sf = 0: code +0
    return {"data": pack(codes.reshape(rows, cols), E2M1), "scale": sf_codes.astype(np.uint8),
            "scale2": np.array([g], np.float32)}


def oracle_quantize(x, k, opts):
    if k["scale"]["dtype"] == "e8m0fnu":
        return quant_mx(x, k, opts)
    if k["scale"]["dtype"] == "f8e4m3fn":
        return quant_nvfp4(x, k, opts)
    if not k["symmetric"]:
        return quant_int8_asym(x, k, opts)
    return quant_f32_scaled(x, k, opts)


# ---- Inputs ----------------------------------------------------------------------------------------------
def midpoints(fmt):
    v = fmt.values
    return (v[:-1] + v[1:]) / 2


def make_inputs():
    rng = np.random.default_rng(20240607)
    inputs = {}

    # mixed: zeros, normal, huge, tiny, f32-subnormal, wide dynamic range, zero blocks, a lone value, a
    # constant negative row, an all-positive row, and 32-blocks whose amax sits on MX rule boundaries.
    m = np.zeros((11, 256))
    m[1] = rng.standard_normal(256)
    m[2] = rng.standard_normal(256) * 1e30
    m[3] = rng.standard_normal(256) * 1e-30
    m[4] = rng.standard_normal(256) * 1e-42
    m[5] = rng.standard_normal(256) * 10.0 ** rng.uniform(-8, 8, 256)
    m[6, 128:] = rng.standard_normal(128) * 3
    m[7, 77] = 5.0
    m[8] = -3.0
    m[9] = rng.uniform(1, 2, 256)
    targets = [448.0, 1.0, 6.0, 7.5, 28.0, 0.125, 449.0, float(np.float32(448 * (1 + 2 ** -20)))]
    for b, t in enumerate(targets):
        blk = rng.standard_normal(32)
        blk = blk / np.abs(blk).max() * t * 0.9
        blk[rng.integers(32)] = t * (1 if b % 2 else -1)
        m[10, 32 * b:32 * (b + 1)] = blk
    inputs["mixed"] = m.astype(np.float32)

    # ties: values exactly halfway between codes once scaled by a scale of 1 (or 2 for one NVFP4 block).
    t = np.zeros((5, 128))
    mids = midpoints(E4M3)
    t[0] = rng.choice(mids, 128) * rng.choice([-1, 1], 128)
    t[0, ::32] = FP8_MAX  # every block and row has amax 448: FP8 per-token s = 1, MX ceil rule e = 0
    t[0, 1:3] = [2.0 ** -10, -3 * 2.0 ** -10]  # half the smallest subnormal; one and a half of it
    t[1] = rng.integers(-127, 127, 128) + 0.5
    t[1, ::32] = 127.0  # INT8 symmetric s = 1
    for b, fmt in enumerate((E2M1, E2M3, E3M2, E4M3)):  # MX: block b has amax = the format's max
        blk = rng.choice(midpoints(fmt), 32) * rng.choice([-1, 1], 32)
        blk[0] = fmt.max
        t[2, 32 * b:32 * (b + 1)] = blk
    for b in range(8):  # NVFP4 with g = 1: amax 6 -> sf = 1, amax 12 -> sf = 2; E2M1 ties within
        mul = 1.0 if b % 2 == 0 else 2.0
        blk = rng.choice(midpoints(E2M1), 16) * rng.choice([-1, 1], 16) * mul
        blk[0] = 6.0 * mul
        t[3, 16 * b:16 * (b + 1)] = blk
    t[4] = rng.integers(-128, 127, 128) + 0.5
    t[4, 0], t[4, 1] = -128.0, 127.0  # INT8 asymmetric: s = 1, zp = 0
    inputs["ties"] = t.astype(np.float32)

    # ragged: 129 x 40 bf16: a second, one-row 128x128 block row and partial 1x64 / 1x128 / 128-col groups.
    r = rng.standard_normal((129, 40)) * 10.0 ** rng.uniform(-3, 3, (129, 1))
    r[5] = 0
    inputs["ragged"] = r.astype(ml_dtypes.bfloat16)

    # small: bf16 [6, 96] for MX / NVFP4 (96 = 3 MX blocks, 6 NVFP4 blocks), near-f32-range extremes.
    s = rng.standard_normal((6, 96)) * np.array([[1], [0], [1e38], [1e-38], [1e-3], [50]])
    s[5, :32] = 0
    inputs["small"] = s.astype(ml_dtypes.bfloat16)

    # half: f16 [4, 64] including f16 subnormals (< 6.1e-5).
    h = rng.standard_normal((4, 64)) * np.array([[1], [1e-6], [1000], [30000]])
    inputs["half"] = np.clip(h, -65504, 65504).astype(np.float16)

    # double: f64 values that f32 cannot hold exactly.
    d = rng.standard_normal((4, 64)) * np.array([[1], [1e-5], [1e20], [1 / 3]])
    inputs["double"] = d.astype(np.float64)
    return inputs


DTYPE_NAMES = {np.dtype(np.float32): "f32", np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float16): "f16",
               np.dtype(np.float64): "f64", np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8",
               np.dtype(np.int32): "i32"}


# ---- Cases -----------------------------------------------------------------------------------------------
def make_cases(inputs):
    rows = {name: a.shape[0] for name, a in inputs.items()}
    cases = []

    def add(name, input_name, opts=None):
        cases.append((name, input_name, opts or {}))

    for inp in ("mixed", "ragged", "half", "double"):
        add("kFp8StaticTensorSym", inp)  # weight: scale from the data
    add("kFp8StaticTensorSym", "mixed", {"static_scale": [0.5]})
    add("kFp8StaticTensorSym", "ties", {"static_scale": [1.0]})
    for inp in ("mixed", "ragged"):
        add("kFp8DynamicTensorSym", inp)
    add("kFp8StaticTokenSym", "mixed",
        {"static_scale": [float(np.float32(0.01 * (i + 1))) for i in range(rows["mixed"])]})
    for inp in ("mixed", "ragged", "small"):
        add("kFp8StaticChannelSym", inp)
    add("kFp8StaticChannelSym", "ties", {"static_scale": [1.0] * rows["ties"]})
    for inp in ("mixed", "ties", "ragged", "small", "half", "double"):
        add("kFp8DynamicTokenSym", inp)
    add("kFp8DynamicTokenSym", "mixed", {"scale_ub": 1.0})
    for g in ("kFp8Dynamic128Sym", "kFp8Dynamic64Sym"):
        for inp in ("mixed", "ragged", "small"):
            add(g, inp)
    for inp in ("mixed", "ragged"):
        add("kFp8Static128BlockSym", inp)
        add("kFp8Dynamic128x128Sym", inp)
    add("kFp8Static128BlockSym", "mixed", {"static_scale": [0.25, 2.0]})

    add("kInt8StaticTensorSym", "ties", {"static_scale": [1.0]})
    add("kInt8StaticTensorSym", "mixed", {"static_scale": [float(np.float32(0.01))]})
    add("kInt8StaticTensorSym", "mixed")
    add("kInt8StaticTensorAsym", "ties", {"static_scale": [1.0], "static_zero_point": [3]})
    add("kInt8StaticTensorAsym", "mixed", {"static_scale": [float(np.float32(0.05))], "static_zero_point": [-7]})
    for inp in ("mixed", "ties", "ragged", "half", "double"):
        add("kInt8DynamicTokenSym", inp)
        add("kInt8DynamicTokenAsym", inp)
    for inp in ("mixed", "ragged"):
        add("kInt8StaticChannelSym", inp)
    add("Int8DynamicTensorSym", "mixed")

    for prefix in MX_KEYS.values():
        for rule in ("ceil_over_max", "floor_log2", "ocp"):
            for inp in ("mixed", "ties", "small", "half", "double"):
                add(prefix + "Dynamic", inp, {"mx_rule": rule})
            add(prefix + "Static", "mixed", {"mx_rule": rule})
        scales = np.random.default_rng(7).integers(110, 140, rows["small"] * 3).tolist()
        add(prefix + "Static", "small", {"static_scale": scales})

    for inp in ("mixed", "ties", "small", "half", "double"):
        add("kNvfp4Dynamic", inp)
    add("kNvfp4Dynamic", "ties", {"nvfp4_global_scale": 1.0})
    add("kNvfp4Dynamic", "mixed", {"nvfp4_global_scale": 100.0})
    add("kNvfp4Static", "mixed")
    sf = np.random.default_rng(8).integers(0, 0x7F, rows["small"] * 6).tolist()  # finite E4M3, >= 0
    add("kNvfp4Static", "small", {"static_scale": sf, "nvfp4_global_scale": 3.0})
    return cases


def case_name(key_name, input_name, opts):
    parts = [key_name, input_name]
    if "mx_rule" in opts:
        parts.append(opts["mx_rule"])
    for opt in ("static_scale", "scale_ub", "nvfp4_global_scale"):
        if opt in opts:
            parts.append({"static_scale": "given", "scale_ub": "ub", "nvfp4_global_scale": "g"}[opt])
    return ".".join(parts)


def storage_dtypes(k):
    """How quantize() stores each field (quantize.hpp, QuantizedTensor)."""
    data = {"f8e4m3fn": "f8e4m3fn", "i8": "i8"}.get(k["dtype"], "u8")  # FP6 / FP4 are packed bytes
    scale = {"f32": "f32", "e8m0fnu": "u8", "f8e4m3fn": "f8e4m3fn"}[k["scale"]["dtype"]]
    return {"data": data, "scale": scale, "scale2": "f32", "zero_point": "i32"}


def options_entry(k, opts, shape):
    """QuantizeOptions as the C++ test builds them; given tensors carry their dtype and shape."""
    rows, cols = shape
    out = {o: opts[o] for o in ("mx_rule", "scale_ub", "nvfp4_global_scale") if o in opts}
    if "static_scale" in opts:
        sdtype = storage_dtypes(k)["scale"]
        if sdtype == "f32":
            sshape = list(scale_tensor_shape(tuple(k["scale"]["group"]), rows, cols))
        else:
            sshape = [rows, cols // k["scale"]["group"][1]]
        out["static_scale"] = {"dtype": sdtype, "shape": sshape, "values": list(opts["static_scale"])}
    if "static_zero_point" in opts:
        out["static_zero_point"] = {"dtype": "i32", "shape": [1], "values": list(opts["static_zero_point"])}
    return out


def generate(out_dir):
    """Writes inputs.bin, expected.bin (raw little-endian sections) and manifest.json (where each is)."""
    os.makedirs(out_dir, exist_ok=True)
    inputs = make_inputs()
    manifest = {"inputs": {}, "cases": []}
    input_blob, expected_blob = bytearray(), bytearray()

    def section(blob, arr, dtype, **extra):
        arr = np.ascontiguousarray(arr)
        entry = dict(extra, dtype=dtype, shape=list(arr.shape), offset=len(blob), nbytes=arr.nbytes)
        blob += arr.tobytes()
        return entry

    for name, arr in inputs.items():
        manifest["inputs"][name] = section(input_blob, arr, DTYPE_NAMES[arr.dtype])
    for key_name, input_name, opts in make_cases(inputs):
        k = KEYS[key_name]
        x = inputs[input_name].astype(np.float64)
        result = oracle_quantize(x, k, opts)
        name = case_name(key_name, input_name, opts)
        assert not any(c["name"] == name for c in manifest["cases"]), name
        dtypes = storage_dtypes(k)
        sections = []
        for field in ("data", "scale", "scale2", "zero_point"):
            if field in result:
                arr = result[field]
                assert arr.dtype.itemsize == {"f32": 4, "i32": 4}.get(dtypes[field], 1), (name, field)
                sections.append(section(expected_blob, arr, dtypes[field], field=field))
        manifest["cases"].append({"name": name, "key_name": key_name if key_name.startswith("k") else "",
                                  "key": k, "input": input_name, "options": options_entry(k, opts, x.shape),
                                  "expected": sections})
    with open(os.path.join(out_dir, "inputs.bin"), "wb") as f:
        f.write(input_blob)
    with open(os.path.join(out_dir, "expected.bin"), "wb") as f:
        f.write(expected_blob)
    # One case per line: readable, and a regenerated table diffs line by line.
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        f.write('{"inputs": ' + json.dumps(manifest["inputs"], sort_keys=True) + ',\n "cases": [\n')
        f.write(",\n".join(json.dumps(c, sort_keys=True) for c in manifest["cases"]))
        f.write("\n]}\n")
    return manifest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare")
    parser.add_argument("--out", default=DATA_DIR, help="output folder (default tests/data/quant)")
    args = parser.parse_args()
    if not args.check:
        manifest = generate(args.out)
        print(f"wrote {len(manifest['cases'])} cases to {args.out}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        fresh, committed = sorted(os.listdir(tmp)), sorted(os.listdir(args.out)) if os.path.isdir(args.out) else []
        problems = [f"missing in {args.out}: {n}" for n in fresh if n not in committed]
        problems += [f"stale in {args.out}: {n}" for n in committed if n not in fresh]
        problems += [f"differs: {n}" for n in fresh if n in committed
                     and not filecmp.cmp(os.path.join(tmp, n), os.path.join(args.out, n), shallow=False)]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"gen_quant_oracle --check: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
