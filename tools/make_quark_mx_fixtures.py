#!/usr/bin/env python3
"""Quark OCP-MX checkpoints with quantized activations, written by AMD Quark itself (tests/data/quark_mx/).

For each of Quark's LLM recipes that quantize activations to OCP MX (or FP8 on MXFP4 weights) it builds a
one-layer Llama (hidden 64, intermediate 96, seeded random weights; nothing is downloaded), quantizes it with
`LLMTemplate.get("llama").get_config(scheme=...)` and `ModelQuantizer` (8 seeded random token sequences as
calibration, which only the static FP8 input scale of mxfp4_fp8 uses), and saves it with Quark's own
`export_safetensors`. Only the layer-0 projections are kept in model.safetensors; config.json is Quark's.

expected.safetensors holds, for L in {mlp.down_proj (K = 96, three MX blocks), self_attn.q_proj}
(prefix model.layers.0.):
  L.x        F32 [5, K] seeded normal input (some rows scaled to reach other binades)
  L.y        F32 [5, N] = the quantized module's own forward in float32 on x: Quark's fake-quant model
             (weights and inputs quantize-dequantized exactly as Quark does, then F.linear)
Run with the venv that has amd-quark (pip install amd-quark torch transformers):
  /path/to/venv/bin/python tools/make_quark_mx_fixtures.py [OUT_DIR]
"""
import json
import os
import shutil
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "data", "quark_mx")

# qlinear scheme -> Quark recipe name
RECIPES = {
    "w4a4-mxfp4": "mxfp4",
    "w6a6-mxfp6-e2m3": "mxfp6_e2m3",
    "w6a6-mxfp6-e3m2": "mxfp6_e3m2",
    "w4a6-mxfp4-mxfp6-e2m3": "mxfp4_mxfp6_e2m3",
    "w4a8-mxfp4-fp8": "mxfp4_fp8",
}
LAYERS = ["model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"]


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=128, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return model


def module(model, name):
    m = model
    for part in name.split("."):
        m = getattr(m, part)
    return m


def make(scheme, recipe):
    from quark.torch import LLMTemplate, ModelQuantizer, export_safetensors
    from safetensors.torch import load_file, save_file

    model = tiny_llama()
    config = LLMTemplate.get("llama").get_config(scheme=recipe)
    calib = [torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(i)) for i in range(8)]
    model = ModelQuantizer(config).quantize_model(model, calib)
    model = model.eval()

    expected = {}
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name in LAYERS:
            lin = module(model, name)
            k = lin.in_features if hasattr(lin, "in_features") else lin.weight.shape[1]
            x = torch.randn((5, k), generator=gen)
            x[1] *= 40.0
            x[2] *= 1.0 / 64
            x[3, :32] = 0.0
            expected[name + ".x"] = x.contiguous()
            expected[name + ".y"] = lin(x).float().contiguous()

    tmp = tempfile.mkdtemp()
    export_safetensors(model, tmp)
    dest = os.path.join(OUT, scheme)
    os.makedirs(dest, exist_ok=True)
    tensors = {}
    for f in sorted(os.listdir(tmp)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(tmp, f)))
    keep = {n: t.contiguous() for n, t in tensors.items()
            if n.startswith("model.layers.0.self_attn.") or n.startswith("model.layers.0.mlp.")}
    save_file(keep, os.path.join(dest, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(tmp, "config.json"), os.path.join(dest, "config.json"))
    save_file(expected, os.path.join(dest, "expected.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(tmp)
    print(scheme, {n: (str(t.dtype), list(t.shape)) for n, t in keep.items() if "down_proj" in n})


def main():
    for scheme, recipe in RECIPES.items():
        make(scheme, recipe)


if __name__ == "__main__":
    main()
