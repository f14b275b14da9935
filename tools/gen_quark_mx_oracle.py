#!/usr/bin/env python3
"""AMD Quark's own MX activation quantization as an oracle table (tests/data/quark_mx/oracle.safetensors).

For each element format Quark's OCP-MX recipes quantize activations to (fp4, fp6_e2m3, fp6_e3m2) it runs
Quark's dynamic MX fake quantization (`fake_quantize_mx`, per 32 along the last axis, scale_calculation_mode
"even", round half to even, saturation), the function behind its dynamic MX input quantizers on CPU, on
seeded rows built to hit the rule's edges, and stores
  <fmt>.x  F32 [R, 128]  the input rows
  <fmt>.y  F32 [R, 128]  Quark's quantize-dequantize of them
tests/quant/quark_oracle_test.cpp checks qlinear's reference quantizer (dynamic FP4/FP6 MX keys, default rule)
against them value for value. Rows: normal data at several magnitudes; multiples of 2^-7 (exact element
ties after power-of-two scaling); blocks whose amax sits exactly at, and one f32 ulp below, each format's
binade threshold 2 - 2^-(M+1) (where "even" differs from OCP's floor rule); all-zero blocks; subnormal f32
values; values near f32's largest binades.
  /path/to/venv-with-amd-quark/bin/python tools/gen_quark_mx_oracle.py [OUT_FILE]
"""
import os
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "data", "quark_mx", "oracle.safetensors")
FORMATS = {"fp4": 1, "fp6_e2m3": 3, "fp6_e3m2": 2}  # Quark's name -> mantissa bits


def rows_for(mbits, rng):
    k = 128
    rows = []
    for scale in (1.0, 1e-3, 37.0, 3e4):
        rows.append(rng.standard_normal(k) * scale)
    rows.append(np.round(rng.standard_normal(k) * 4 * 128) / 128)
    rows.append(np.round(rng.standard_normal(k) * 64) / 128)
    threshold = 2.0 - 2.0 ** -(mbits + 1)
    for e in (-3, 0, 5):
        r = rng.uniform(-1, 1, k) * 2.0 ** e
        at = np.float32(threshold * 2.0 ** e)
        below = np.nextafter(at, np.float32(0))
        r[0], r[40], r[64], r[100] = at, -below, -at * 0.75, below
        rows.append(r)
    r = rng.standard_normal(k)
    r[:32] = 0
    r[32:64] = rng.standard_normal(32) * 1e-39  # f32 subnormals
    r[64:96] = rng.standard_normal(32) * 1e37
    rows.append(r)
    return np.stack(rows).astype(np.float32)


def main():
    from quark.torch.kernel.hw_emulation.hw_emulation_interface import fake_quantize_mx
    from safetensors.torch import save_file

    rng = np.random.default_rng(2025)
    out = {}
    for fmt, mbits in FORMATS.items():
        x = torch.from_numpy(rows_for(mbits, rng))
        y = fake_quantize_mx(x.clone(), axis=-1, block_size=32, scale_calculation_mode="even", mx_element_dtype=fmt)
        out[fmt + ".x"] = x.contiguous()
        out[fmt + ".y"] = y.to(torch.float32).contiguous()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(out, OUT, metadata={"format": "pt"})
    print("wrote", OUT)


if __name__ == "__main__":
    main()
