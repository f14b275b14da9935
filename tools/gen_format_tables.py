#!/usr/bin/env python3
"""Writes the oracle tables that tests/formats/test_formats.cpp checks qlinear's scalar codec against.

The expected values come from ml_dtypes' and numpy's own conversions, never from a re-implementation of
qlinear's codec, so the C++ test compares two independent implementations.

Files in tests/data/formats/, all little-endian:
  decode_<name>.f32  float32[2**bits]: the value of code c at index c, for every format of at most 16 bits.
                     Every such value is exact in float32 (asserted below).
  encode_<name>.bin  records {float64 input; uint32 code_nonsaturating; uint32 code_saturating}, 16 bytes
                     each, for every float, scale and integer format of at most 32 bits.

What an encode table holds, per float format: the value of every code (a sample of codes for the 16- and
32-bit formats), every midpoint between neighbouring magnitudes (including the overflow threshold halfway
past max_finite), each midpoint +- 1 ulp of float64 and of float32, values beyond max, below half of the
smallest subnormal, +-0, +-Inf, NaN, and pseudo-random float64 values over the whole range; all with both
signs. The non-saturating code is what astype gives (round to nearest even); the saturating code is
astype of np.clip(x, -max, max).

Why the float32 detour: ml_dtypes converts a float64 to its types through float32, rounding twice, so a
float64 just above a midpoint can come back rounded down. qlinear rounds once. We therefore hand ml_dtypes
float32 values rounded *to odd* from the float64 input: rounding to odd in a format with at least two more
bits of precision, then to nearest even, equals one rounding to nearest even (Boldo & Melquiond, "Emulation
of FMA and correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008). float32 has
24 bits, every target here at most 11. The script cross-checks the step against numpy's float16, which
converts float64 directly.

Choices formats.hpp makes where ml_dtypes has none or differs (so not taken from it):
  - FP6/FP4 have no NaN; qlinear encodes NaN as +0 (ml_dtypes gives a signed zero whose sign is not that
    of the NaN). No NaN inputs in their tables; the C++ test checks NaN -> +0 by hand.
  - E8M0 rounds to the nearest power of two in log2 (ml_dtypes rounds linearly, at 1.5 * 2^k). The table
    finds, with exact rational arithmetic, which of the two ml_dtypes values bracketing x is nearer in
    ratio. Zero, negatives and NaN give NaN (0xFF); past 2^127 the non-saturating code is NaN.
  - Integers round half to even (np.rint) and clamp (np.clip) in both modes; NaN gives 0.

Usage: gen_format_tables.py [--out DIR]   write the tables (default: tests/data/formats of this checkout)
       gen_format_tables.py --check       regenerate into a temporary folder, compare byte for byte with
                                          the committed tables, exit 1 on any difference
"""
import argparse
import filecmp
import math
import os
import sys
import tempfile
from fractions import Fraction

import ml_dtypes
import numpy as np

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "formats")

# qlinear's canonical name -> (numpy/ml_dtypes type, bits per code)
FLOATS = {
    "f16": (np.float16, 16),
    "bf16": (ml_dtypes.bfloat16, 16),
    "f8e4m3fn": (ml_dtypes.float8_e4m3fn, 8),
    "f8e5m2": (ml_dtypes.float8_e5m2, 8),
    "f6e2m3fn": (ml_dtypes.float6_e2m3fn, 6),
    "f6e3m2fn": (ml_dtypes.float6_e3m2fn, 6),
    "f4e2m1fn": (ml_dtypes.float4_e2m1fn, 4),
}
FLOATS_WITHOUT_NAN = {"f6e2m3fn", "f6e3m2fn", "f4e2m1fn"}
E8M0 = ("e8m0fnu", ml_dtypes.float8_e8m0fnu)
INTEGERS = {"i8": np.int8, "u8": np.uint8, "i16": np.int16, "i32": np.int32}

RECORD = np.dtype([("input", "<f8"), ("nonsaturating", "<u4"), ("saturating", "<u4")])
# Sizes keep the committed tables near 1.5 MB.
RANDOM_COUNT = 512  # pseudo-random float64 inputs per format
SAMPLED_CODES = 512  # pseudo-random codes per 16- or 32-bit format, on top of the chosen ones
INTEGER_SAMPLED_CODES = 256  # pseudo-random codes per 16- or 32-bit integer format
BINADE_EDGE = 64  # in the chosen 16-bit binades, the codes this close to either end


def splitmix64(seed):
    """A fixed pseudo-random stream: the tables must not change with numpy's or Python's generators."""
    mask = (1 << 64) - 1
    state = seed
    while True:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        yield z ^ (z >> 31)


def random_words(seed, count):
    stream = splitmix64(seed)
    return [next(stream) for _ in range(count)]


def random_doubles(seed, count, min_exp, max_exp):
    """Doubles of either sign with a random 52-bit mantissa and exponent in [min_exp, max_exp]."""
    out = []
    for w in random_words(seed, count):
        exponent = min_exp + ((w >> 52) & 0x7FF) % (max_exp - min_exp + 1)
        value = math.ldexp(float((1 << 52) | (w & ((1 << 52) - 1))), exponent - 52)
        out.append(-value if w >> 63 else value)
    return np.array(out, dtype=np.float64)


def code_dtype(bits):
    return np.uint8 if bits <= 8 else np.uint16


def all_codes(dtype, bits):
    return np.arange(1 << bits, dtype=code_dtype(bits)).view(dtype)


def codes_of(values, bits):
    codes = values.view(code_dtype(bits)).astype(np.uint32)
    assert not np.any(codes >> bits), "ml_dtypes left bits above the code"
    return codes


def round_to_odd_f32(x):
    """float64 -> float32, rounding to odd: truncate toward zero, then set the last bit if inexact."""
    y = x.astype(np.float32)
    inexact = ~np.isnan(x) & (y.astype(np.float64) != x)
    rounded_away = inexact & (np.abs(y.astype(np.float64)) > np.abs(x))
    y = np.where(rounded_away, np.nextafter(y, np.float32(0)), y)
    return (y.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


def correctly_rounded(x, dtype):
    """x (float64) rounded once, to nearest even, to dtype; out-of-range behaves like astype."""
    if dtype is np.float16 or dtype is np.float32:
        return x.astype(dtype)  # numpy converts float64 directly
    return round_to_odd_f32(x).astype(dtype)


def write_records(path, inputs, nonsaturating, saturating):
    records = np.empty(len(inputs), dtype=RECORD)
    records["input"] = inputs
    records["nonsaturating"] = nonsaturating
    records["saturating"] = saturating
    records.tofile(path)


def with_both_signs(parts):
    """Both signs of every input, once each, in a fixed order (sorted by bit pattern)."""
    x = np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in parts])
    x = np.concatenate([x, -x])
    return np.unique(x.view(np.uint64)).view(np.float64)


def rounding_cases(magnitudes, grid, max_finite):
    """For each magnitude on `grid` (sorted representable magnitudes): the midpoint to the next one up
    (past max_finite: the overflow threshold max + spacing/2) and that midpoint +- 1 ulp of float64 and
    of float32."""
    spacing_at_top = grid[-1] - grid[-2]
    index = np.searchsorted(grid, magnitudes)
    upper = np.where(index + 1 < len(grid), grid[np.minimum(index + 1, len(grid) - 1)],
                     max_finite + spacing_at_top)
    mid = (magnitudes + upper) / 2
    mid32 = mid.astype(np.float32)
    assert np.all(mid32.astype(np.float64) == mid), "midpoints must be exact in float32"
    inf32 = np.float32(np.inf)
    return [mid, np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf),
            np.nextafter(mid32, -inf32).astype(np.float64), np.nextafter(mid32, inf32).astype(np.float64)]


def extreme_inputs(min_subnormal, max_finite):
    tiny = [min_subnormal / 4, min_subnormal / 3, 2.0**-149, 5e-324, 1e-300, 0.0]
    f32max, f64max = float(np.finfo(np.float32).max), float(np.finfo(np.float64).max)
    huge = [max_finite * 2, 1e30, f32max, 3.5e38, 1e300, f64max, np.inf]
    return tiny + huge


# ---- Tables --------------------------------------------------------------------------------------------


def write_decode_tables(out):
    types = {name: (t, bits) for name, (t, bits) in FLOATS.items()}
    types[E8M0[0]] = (E8M0[1], 8)
    types.update({name: (t, np.iinfo(t).bits) for name, t in INTEGERS.items() if np.iinfo(t).bits <= 16})
    for name, (dtype, bits) in types.items():
        values = all_codes(dtype, bits).astype(np.float64)
        as_f32 = values.astype(np.float32)
        same = (as_f32.astype(np.float64) == values) | (np.isnan(values) & np.isnan(as_f32))
        assert np.all(same), f"{name}: a value is not exact in float32"
        as_f32.astype("<f4").tofile(os.path.join(out, f"decode_{name}.f32"))


def sampled_codes(name, bits, seed):
    """All codes of a narrow format; for 16 bits, in a few binades (subnormals, the lowest normals, the
    one holding 1.0, the top finite one) the codes near either end, plus pseudo-random codes."""
    codes = np.arange(1 << bits, dtype=np.int64)
    if bits <= 8:
        return codes
    finfo = ml_dtypes.finfo(FLOATS[name][0])
    mantissa_bits = finfo.nmant
    top_exponent = (1 << finfo.iexp) - 2
    bias = (1 << (finfo.iexp - 1)) - 1
    exponent = codes >> mantissa_bits & ((1 << finfo.iexp) - 1)
    mantissa = codes & ((1 << mantissa_bits) - 1)
    near_edge = (mantissa < BINADE_EDGE) | (mantissa >= (1 << mantissa_bits) - BINADE_EDGE)
    chosen = codes[(codes < 1 << (bits - 1)) & np.isin(exponent, [0, 1, bias, top_exponent]) & near_edge]
    random = np.array(random_words(seed, SAMPLED_CODES), dtype=np.uint64) & np.uint64((1 << bits) - 1)
    return np.concatenate([chosen, random.astype(np.int64)])


def write_float_encode_table(out, name, seed):
    dtype, bits = FLOATS[name]
    finfo = ml_dtypes.finfo(dtype)
    max_finite = float(finfo.max)
    min_subnormal = float(finfo.smallest_subnormal)
    values = all_codes(dtype, bits).astype(np.float64)
    grid = np.unique(np.abs(values[np.isfinite(values)]))
    chosen = np.abs(values[sampled_codes(name, bits, seed)])
    magnitudes = np.unique(chosen[np.isfinite(chosen)])
    exponents = (math.floor(math.log2(min_subnormal)) - 4, math.floor(math.log2(max_finite)) + 3)
    parts = [magnitudes, *rounding_cases(magnitudes, grid, max_finite),
             extreme_inputs(min_subnormal, max_finite), random_doubles(seed, RANDOM_COUNT, *exponents)]
    x = with_both_signs(parts)
    if name not in FLOATS_WITHOUT_NAN:
        x = np.concatenate([x, [np.nan, -np.nan]])
    nonsaturating = codes_of(correctly_rounded(x, dtype), bits)
    saturating = codes_of(correctly_rounded(np.clip(x, -max_finite, max_finite), dtype), bits)
    write_records(os.path.join(out, f"encode_{name}.bin"), x, nonsaturating, saturating)
    return x


def write_f32_encode_table(out, seed):
    special = [0x00000001, 0x007FFFFF, 0x00800000, 0x3F800000, 0x7F7FFFFE, 0x7F7FFFFF]
    random = [w & 0x7FFFFFFF for w in random_words(seed, SAMPLED_CODES)]
    magnitudes = np.array(special + random, dtype=np.uint32).view(np.float32)
    magnitudes = np.unique(magnitudes[np.isfinite(magnitudes)])
    f32max = np.finfo(np.float32).max
    upper = np.where(magnitudes < f32max, np.nextafter(magnitudes, np.float32(np.inf)).astype(np.float64),
                     float(f32max) + float(f32max - np.nextafter(f32max, np.float32(0))))
    mid = (magnitudes.astype(np.float64) + upper) / 2
    parts = [magnitudes.astype(np.float64), mid, np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf),
             extreme_inputs(2.0**-149, float(f32max)), random_doubles(seed, RANDOM_COUNT, -153, 130)]
    x = np.concatenate([with_both_signs(parts), [np.nan, -np.nan]])
    nonsaturating = correctly_rounded(x, np.float32).view(np.uint32)
    saturating = correctly_rounded(np.clip(x, -f32max, f32max), np.float32).view(np.uint32)
    write_records(os.path.join(out, "encode_f32.bin"), x, nonsaturating, saturating)


def write_e8m0_encode_table(out, seed):
    name, dtype = E8M0
    values = all_codes(dtype, 8).astype(np.float64)
    codes = np.arange(256, dtype=np.uint32)
    finite = np.isfinite(values)
    order = np.argsort(values[finite])
    grid, grid_codes = values[finite][order], codes[finite][order]
    powers = np.ldexp(1.0, np.arange(-127, 128))
    sqrt2_above = powers * np.sqrt(2.0)  # the double nearest sqrt(2) * 2^k lies above it
    x = np.concatenate([
        powers, sqrt2_above, np.nextafter(sqrt2_above, 0), powers * 1.5, powers * 1.45,
        [2.0**-128, 2.0**-140, 5e-324, 1e-300, 2.0**128, 1e300, np.inf, 0.0, -0.0, -1.0, -np.inf, np.nan],
        np.abs(random_doubles(seed, RANDOM_COUNT, -135, 134))])
    nan_code, max_code = 0xFF, int(grid_codes[-1])
    nonsaturating, saturating = [], []
    for v in x:
        if not v > 0:  # zero, negative, NaN
            nonsaturating.append(nan_code)
            saturating.append(nan_code)
            continue
        i = int(np.searchsorted(grid, v))
        if i < len(grid) and grid[i] == v:
            code = int(grid_codes[i])
        elif i == 0:
            code = int(grid_codes[0])  # below the smallest code: it is the nearest
        else:
            # Nearest in log2 between lo < v < hi: compare v / lo with hi / v, exactly. Past the largest
            # code the candidate above is 2^128, which does not exist: that is the overflow.
            lo = Fraction(grid[i - 1])
            hi = Fraction(grid[i]) if i < len(grid) else Fraction(2) ** 128
            if math.isinf(v):
                nearer_hi = True
            else:
                exact = Fraction(v)
                assert exact / lo != hi / exact, "log2 ties cannot happen"
                nearer_hi = exact / lo > hi / exact
            if not nearer_hi:
                code = int(grid_codes[i - 1])
            else:
                code = int(grid_codes[i]) if i < len(grid) else None
        nonsaturating.append(nan_code if code is None else code)
        saturating.append(max_code if code is None else code)
    write_records(os.path.join(out, f"encode_{name}.bin"), x, nonsaturating, saturating)


def write_integer_encode_table(out, name, seed):
    dtype = INTEGERS[name]
    info = np.iinfo(dtype)
    if info.bits <= 8:
        base = np.arange(info.min, info.max + 1, dtype=np.float64)
    else:
        words = np.array(random_words(seed, INTEGER_SAMPLED_CODES), dtype=np.uint64)
        words &= np.uint64((1 << info.bits) - 1)
        sampled = words.astype(np.uint32 if info.bits == 32 else np.uint16).view(dtype).astype(np.float64)
        base = np.concatenate([sampled, [info.min, info.min + 1, -1.0, 0.0, 1.0, info.max - 1, info.max]])
    offsets = [0.0, 0.25, 0.5, 0.75, -0.5, -0.25]
    near_half = [np.nextafter(base + 0.5, -np.inf), np.nextafter(base + 0.5, np.inf)]
    x = with_both_signs([base + o for o in offsets] + near_half + [[
        float(info.max) + 0.5, float(info.max) + 1, float(info.min) - 0.5, float(info.min) - 1, 1e10, 1e300,
        np.inf, 1e-300]])
    x = np.concatenate([x, [np.nan]])
    # numpy's float -> int cast of NaN is undefined: qlinear's choice (0) is filled in.
    rounded = np.where(np.isnan(x), 0.0, np.clip(np.rint(x), info.min, info.max))
    codes = rounded.astype(np.int64).astype(np.uint64) & np.uint64((1 << info.bits) - 1)
    write_records(os.path.join(out, f"encode_{name}.bin"), x, codes, codes)


def check_round_to_odd(inputs):
    """The float32 round-to-odd detour must agree with numpy's direct float64 -> float16 conversion."""
    direct = inputs.astype(np.float16).view(np.uint16)
    detour = round_to_odd_f32(inputs).astype(np.float16).view(np.uint16)
    same = (direct == detour) | np.isnan(inputs)
    assert np.all(same), f"round-to-odd detour disagrees with numpy on {inputs[~same][:5]}"


def generate(out):
    os.makedirs(out, exist_ok=True)
    write_decode_tables(out)
    for seed, name in enumerate(FLOATS, start=1):
        x = write_float_encode_table(out, name, seed)
        if name == "f16":
            check_round_to_odd(x)
    write_f32_encode_table(out, seed=100)
    write_e8m0_encode_table(out, seed=101)
    for seed, name in enumerate(INTEGERS, start=200):
        write_integer_encode_table(out, name, seed)


def check(committed):
    with tempfile.TemporaryDirectory() as fresh:
        generate(fresh)
        new = sorted(os.listdir(fresh))
        old = sorted(os.listdir(committed)) if os.path.isdir(committed) else []
        problems = [f"missing from {committed}: {f}" for f in new if f not in old]
        problems += [f"not generated any more: {f}" for f in old if f not in new]
        problems += [f"differs: {f}" for f in new if f in old and
                     not filecmp.cmp(os.path.join(fresh, f), os.path.join(committed, f), shallow=False)]
    for p in problems:
        print(f"gen_format_tables: {p}", file=sys.stderr)
    if problems:
        print("gen_format_tables: the committed tables are not what ml_dtypes/numpy give; "
              "run tools/gen_format_tables.py and review the diff", file=sys.stderr)
        return 1
    print(f"gen_format_tables: {len(new)} tables in {os.path.normpath(committed)} match "
          f"ml_dtypes {ml_dtypes.__version__} / numpy {np.__version__}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DATA_DIR, help="folder of the tables (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="regenerate into a temporary folder and compare")
    args = parser.parse_args()
    # Overflowing and NaN casts are the point of the tables, not accidents.
    with np.errstate(over="ignore", invalid="ignore"):
        if args.check:
            return check(args.out)
        generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
