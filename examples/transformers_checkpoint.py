"""A compressed-tensors checkpoint (what llm-compressor writes) run inside a transformers model with qlinear's
kernels, then a short generation.

    pip install . transformers accelerate          # plus torch
    python examples/transformers_checkpoint.py BASE_MODEL_DIR QUANTIZED_CHECKPOINT_DIR [--device cuda] [--fuse]

BASE_MODEL_DIR is the dense model the checkpoint was quantized from (a transformers directory: config.json,
tokenizer, weights): it supplies the architecture, the tokenizer and the tensors the checkpoint leaves dense
(embeddings, norms, lm_head). Every nn.Linear the checkpoint quantizes is replaced by a QuantLinear built
from the checkpoint's own tensors; a name or shape that does not match is an error naming it.

Without a checkpoint at hand, make one from the base model's safetensors:
    qlinear quantize BASE_MODEL_DIR /tmp/ckpt-fp8 --scheme w8a8-fp8-channel
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from qlinear.torch import load_quantized_linears


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("checkpoint")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fuse", action="store_true", help="q/k/v and gate/up as one fused layer each")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base, torch_dtype=torch.bfloat16).to(args.device).eval()
    report = load_quantized_linears(model, args.checkpoint, device=args.device, fuse=args.fuse)
    print(report)

    inputs = tok(args.prompt, return_tensors="pt").to(args.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
    seconds = time.perf_counter() - start
    new = out.shape[1] - inputs["input_ids"].shape[1]
    print(tok.decode(out[0], skip_special_tokens=True))
    print(f"{new} tokens in {seconds:.2f} s ({new / seconds:.1f} tokens/s, greedy, {args.device})")


if __name__ == "__main__":
    main()
