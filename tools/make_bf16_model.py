#!/usr/bin/env python3
"""Writes a Llama-shaped BF16 safetensors model with random weights, streamed to disk (bounded memory):
config.json, tokenizer_config.json, generation_config.json, model-0000i-of-0000n.safetensors shards of at
most --shard-gb and model.safetensors.index.json. For the scale test (make test-scale) and quantize timings.

  tools/make_bf16_model.py OUT --layers 32                      # Llama-3.1-8B shapes (16 GB)
  tools/make_bf16_model.py OUT --layers 2 --hidden 576 --intermediate 1536 --heads 9 --kv-heads 3 --vocab 49152
"""
import argparse
import json
import os
import struct

import numpy as np


def tensors(a):
    head_dim = a.hidden // a.heads
    kv = a.kv_heads * head_dim
    yield "model.embed_tokens.weight", (a.vocab, a.hidden)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (a.hidden,)
        yield p + "self_attn.q_proj.weight", (a.hidden, a.hidden)
        yield p + "self_attn.k_proj.weight", (kv, a.hidden)
        yield p + "self_attn.v_proj.weight", (kv, a.hidden)
        yield p + "self_attn.o_proj.weight", (a.hidden, a.hidden)
        yield p + "post_attention_layernorm.weight", (a.hidden,)
        yield p + "mlp.gate_proj.weight", (a.intermediate, a.hidden)
        yield p + "mlp.up_proj.weight", (a.intermediate, a.hidden)
        yield p + "mlp.down_proj.weight", (a.hidden, a.intermediate)
    yield "model.norm.weight", (a.hidden,)
    yield "lm_head.weight", (a.vocab, a.hidden)


def shards(a):
    limit = int(a.shard_gb * 1e9)
    out, cur, size = [], [], 0
    for name, shape in tensors(a):
        n = 2 * int(np.prod(shape))
        if cur and size + n > limit:
            out.append(cur)
            cur, size = [], 0
        cur.append((name, shape))
        size += n
    if cur:
        out.append(cur)
    return out


def random_bf16(rng, count):
    # Sign, an exponent of 2^-7..2^-5 and a random mantissa: like trained weights' magnitudes, and cheap.
    bits = rng.integers(0, 1 << 16, size=count, dtype=np.uint16)
    exp = (bits >> 7) % 3 + 120
    return ((bits & 0x807F) | (exp << 7).astype(np.uint16)).astype("<u2")


def write_shard(path, entries, rng):
    header, offset = {}, 0
    for name, shape in entries:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, shape in entries:
            left = int(np.prod(shape))
            while left:
                n = min(left, 1 << 24)
                f.write(random_bf16(rng, n).tobytes())
                left -= n
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--shard-gb", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    plan = shards(a)
    weight_map, total = {}, 0
    for i, entries in enumerate(plan):
        fname = f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
        total += write_shard(os.path.join(a.out, fname), entries, rng)
        weight_map.update({name: fname for name, _ in entries})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.hidden,
              "intermediate_size": a.intermediate, "num_attention_heads": a.heads,
              "num_key_value_heads": a.kv_heads, "head_dim": a.hidden // a.heads, "num_hidden_layers": a.layers,
              "vocab_size": a.vocab, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=2)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    print(f"wrote {a.out}: {a.layers} layers, {total / 1e9:.2f} GB BF16 in {len(plan)} shard(s)")


if __name__ == "__main__":
    main()
