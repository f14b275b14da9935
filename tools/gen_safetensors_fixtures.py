#!/usr/bin/env python3
"""Writes tests/data/safetensors/: small safetensors files made by the official `safetensors` package, which
tests/checkpoint/test_safetensors.cpp reads back bit-exactly with qlinear's own reader.

    python3 tools/gen_safetensors_fixtures.py   # needs: pip install safetensors numpy ml_dtypes

Tensor contents are bit patterns from a formula the C++ test recomputes (so every code, NaNs with payloads
included, must come back unchanged), plus two tensors of readable values whose bytes the test spells out.

    bits(i) = ((i * 0x9E3779B97F4A7C15 + seed) mod 2^64) >> (64 - element_bits)

safetensors.numpy takes ml_dtypes arrays for BF16 and FP8: the official writer names them BF16, F8_E4M3 and
F8_E5M2 in the header.
"""
import json
import os

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors")

# name, numpy dtype, unsigned dtype of the same width, shape, seed. Mirrored in test_safetensors.cpp.
PATTERNS = [
    ("f64", np.float64, np.uint64, (3, 5), 1),
    ("f32", np.float32, np.uint32, (2, 3, 4), 2),
    ("f16", np.float16, np.uint16, (7,), 3),
    ("bf16", ml_dtypes.bfloat16, np.uint16, (4, 3), 4),
    ("f8_e4m3", ml_dtypes.float8_e4m3fn, np.uint8, (5, 4), 5),
    ("f8_e5m2", ml_dtypes.float8_e5m2, np.uint8, (3, 3), 6),
    ("i64", np.int64, np.uint64, (4,), 7),
    ("i32", np.int32, np.uint32, (2, 2), 8),
    ("i16", np.int16, np.uint16, (6,), 9),
    ("i8", np.int8, np.uint8, (9,), 10),
    ("u8", np.uint8, np.uint8, (2, 8), 11),
    ("scalar_f32", np.float32, np.uint32, (), 12),
    ("empty_bf16", ml_dtypes.bfloat16, np.uint16, (0, 4), 13),
]


def pattern(dtype, udtype, shape, seed):
    n = int(np.prod(shape, dtype=np.int64))
    bits = np.dtype(udtype).itemsize * 8
    with np.errstate(over="ignore"):
        x = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed)
    x = (x >> np.uint64(64 - bits)).astype(udtype)
    return x.view(dtype).reshape(shape)


def main():
    os.makedirs(os.path.join(OUT, "sharded"), exist_ok=True)

    tensors = {name: pattern(dt, udt, shape, seed) for name, dt, udt, shape, seed in PATTERNS}
    tensors["values_f32"] = np.array([[1.0, 2.5, -3.0], [0.0, 1e-3, 448.0]], dtype=np.float32)
    tensors["values_f8_e4m3"] = np.array([0.0, 0.5, -1.75, 448.0, -448.0, 2.0**-9], dtype=ml_dtypes.float8_e4m3fn)
    # One metadata key: the official writer keeps metadata in a hash map, so several keys come out in a
    # different order on each run and the committed file would not be reproducible.
    save_file(tensors, os.path.join(OUT, "python_dtypes.safetensors"), metadata={"format": "pt"})

    # A two-shard checkpoint with the index layout transformers writes.
    shards = {
        "model-00001-of-00002.safetensors": {
            "layers.0.weight": pattern(ml_dtypes.float8_e4m3fn, np.uint8, (4, 8), 21),
            "layers.0.weight_scale": pattern(np.float32, np.uint32, (4, 1), 22),
        },
        "model-00002-of-00002.safetensors": {
            "layers.1.weight": pattern(ml_dtypes.bfloat16, np.uint16, (2, 4), 23),
        },
    }
    weight_map = {}
    total = 0
    for file, content in shards.items():
        save_file(content, os.path.join(OUT, "sharded", file), metadata={"format": "pt"})
        for name, array in content.items():
            weight_map[name] = file
            total += array.nbytes
    with open(os.path.join(OUT, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
