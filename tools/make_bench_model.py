#!/usr/bin/env python3
"""Writes a random BF16 model with Llama-3-8B-shaped linear layers (hidden 4096, 32 query / 8 KV heads of 128,
intermediate 14336) for load-time benchmarks: `qlinear quantize` turns it into any scheme.

    python3 tools/make_bench_model.py OUT_DIR [--blocks 2]

Only the seven linear weights of each decoder block are written (no embeddings or norms): what the weight
cache processes. Values are N(0, 0.02) rounded to BF16; numpy only, own safetensors writer (header + bytes)."""
import argparse
import json
import os

import numpy as np

SHAPES = {  # module -> (out, in)
    "self_attn.q_proj": (4096, 4096),
    "self_attn.k_proj": (1024, 4096),
    "self_attn.v_proj": (1024, 4096),
    "self_attn.o_proj": (4096, 4096),
    "mlp.gate_proj": (14336, 4096),
    "mlp.up_proj": (14336, 4096),
    "mlp.down_proj": (4096, 14336),
}


def bf16(rng, shape):
    x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(2026)
    tensors, header, offset = [], {}, 0
    for b in range(a.blocks):
        for mod, shape in SHAPES.items():
            name = f"model.layers.{b}.{mod}.weight"
            t = bf16(rng, shape)
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + t.nbytes]}
            offset += t.nbytes
            tensors.append(t)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for t in tensors:
            f.write(t.tobytes())
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "num_hidden_layers": a.blocks, "torch_dtype": "bfloat16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()
