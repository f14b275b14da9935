"""Shared helpers of the Python tests: where the fixtures are, a small safetensors reader (an oracle
independent of qlinear's own), and the relative error the C++ tests use."""
import json
import os
import struct

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
QUERY = "encoder.layer.0.attention.self.query"
INTERMEDIATE = "encoder.layer.0.intermediate.dense"


def read_safetensors(path):
    """{name: np.ndarray} for the F32 and BF16 tensors of a safetensors file (BF16 widened to f32)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = data[begin:end]
        if e["dtype"] == "F32":
            out[name] = np.frombuffer(raw, np.float32).reshape(e["shape"])
        elif e["dtype"] == "BF16":
            bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(e["shape"])
    return out


def rel_err(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


@pytest.fixture
def fixture_dir():
    return lambda name: os.path.join(FIXTURES, name)
