#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/ from the repository's own test data.

    python3 fuzz/make_seeds.py        (idempotent; run after the fixtures change)

safetensors/   the small real files of tests/data/safetensors, and from each fixture model a small valid file
               (its first tensors that fit in 2 KiB) and its header alone (every range runs past the end).
quant_config/  each fixture's config.json (quantization_config kept whole, long ignore lists cut to 3), plus
               hand-written compressed-tensors and Quark configs with regex targets, fused shards, exclusions.
cli_args/      argv lines, one argument per line, for every command.
checkpoint_dir/ directory images (config.json, index.json, shards joined by "\n\x01\n", fuzz_checkpoint_dir.cpp):
               a tiny BF16 MLP block quantized to every scheme by the built qlinear (QLINEAR, default
               build/qlinear; skipped with a note when it is not built), with and without an index, and
               each fixture's config.json beside a small shard.
"""
import glob
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(OUT, target, name), mode) as f:
        f.write(data)


def safetensors_seeds():
    for f in sorted(glob.glob(os.path.join(ROOT, "tests/data/safetensors/**/*.safetensors"), recursive=True)):
        write("safetensors", os.path.relpath(f, os.path.join(ROOT, "tests/data/safetensors")).replace("/", "-"),
              open(f, "rb").read())
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*/model.safetensors"))):
        scheme = os.path.basename(os.path.dirname(path))
        b = open(path, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        header = json.loads(b[8:8 + n])
        small, data = {}, b""
        if "__metadata__" in header:
            small["__metadata__"] = header["__metadata__"]
        for name, e in header.items():
            if name == "__metadata__":
                continue
            begin, end = e["data_offsets"]
            if end - begin > 2048 or len(data) + end - begin > 2048:
                continue
            small[name] = {"dtype": e["dtype"], "shape": e["shape"],
                           "data_offsets": [len(data), len(data) + end - begin]}
            data += b[8 + n + begin:8 + n + end]
        h = json.dumps(small).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        write("safetensors", f"fixture-{scheme}-small.safetensors", struct.pack("<Q", len(h)) + h + data)
        if n <= 8192:
            write("safetensors", f"fixture-{scheme}-header-only.safetensors", b[:8 + n])
    # Sub-byte and empty tensors, and holes, which the format allows.
    h = json.dumps({"a": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
                    "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]},
                    "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]}}).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    write("safetensors", "hand-fp8-empty-hole.safetensors", struct.pack("<Q", len(h)) + h + bytes(range(12)))


def quant_config_seeds():
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*/config.json"))):
        scheme = os.path.basename(os.path.dirname(path))
        cfg = json.load(open(path))
        q = cfg["quantization_config"]
        if isinstance(q.get("ignore"), list):
            q["ignore"] = q["ignore"][:3]
        small = {"architectures": cfg.get("architectures"), "model_type": cfg.get("model_type"),
                 "quantization_config": q}
        write("quant_config", f"fixture-{scheme}.json", json.dumps(small, indent=1))
    args = lambda bits, typ, strategy, dynamic=False, **kw: dict(
        num_bits=bits, type=typ, strategy=strategy, symmetric=kw.pop("symmetric", True), dynamic=dynamic, **kw)
    ct = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
          "config_groups": {
              "attn": {"targets": ["re:.*self_attn\\.(q|k|v)_proj$"],
                       "weights": args(8, "float", "block", block_structure=[128, 128]),
                       "input_activations": args(8, "float", "group", True, group_size=128)},
              "mlp": {"targets": ["re:.*mlp.*"], "format": "int-quantized",
                      "weights": args(8, "int", "channel"),
                      "input_activations": args(8, "int", "token", True, symmetric=False)},
              "rest": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
                       "weights": args(4, "float", "tensor_group", group_size=16),
                       "input_activations": args(4, "float", "tensor_group", "local", group_size=16)},
              "kv": {"targets": ["LlamaAttention"], "input_activations": args(8, "float", "tensor")}},
          "ignore": ["lm_head", "re:.*layers\\.1\\.mlp\\.down_proj"],
          "kv_cache_scheme": args(8, "float", "tensor")}
    write("quant_config", "hand-ct-mixed.json",
          json.dumps({"model_type": "llama", "quantization_config": ct}, indent=1) + "\0model.layers.0.mlp.up_proj")
    mx = lambda dtype: {"dtype": dtype, "qscheme": "per_group", "group_size": 32, "ch_axis": -1, "symmetric": None,
                        "is_dynamic": False, "scale_format": "e8m0", "round_method": "half_even",
                        "scale_type": "float", "observer_cls": "PerBlockMXObserver"}
    fp8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "group_size": None, "ch_axis": None, "symmetric": True,
           "is_dynamic": False, "scale_format": None, "round_method": "half_even", "scale_type": "float",
           "observer_cls": "PerTensorMinMaxObserver"}
    layer = lambda w, i: {"weight": w, "input_tensors": i, "output_tensors": None, "bias": None}
    quark = {"quant_method": "quark", "global_quant_config": layer(mx("fp4"), mx("fp4")),
             "layer_quant_config": {"*down_proj": layer(mx("fp6_e3m2"), None),
                                    "*o_proj": layer(mx("fp6_e2m3"), mx("fp8_e4m3")),
                                    "*gate_proj": layer([mx("fp4"), fp8], None)},
             "exclude": ["lm_head", "re:.*layers\\.3\\..*"],
             "export": {"kv_cache_group": ["*k_proj", "*v_proj"], "pack_method": "reorder"},
             "algo_config": [{"name": "rotation", "online_rotation_layers": ["model.layers.0.mlp.down_proj"]}]}
    write("quant_config", "hand-quark-mx.json", json.dumps({"model_type": "llama", "quantization_config": quark},
                                                            indent=1))


def cli_seeds():
    lines = {
        "kernels-explain": ["kernels", "--explain", "--scheme", "w8a8-mxfp8", "--n", "4096", "--k=4100",
                            "--platform", "sm90", "--out", "f16", "--json"],
        "kernels-list": ["kernels", "--list-schemes", "--platform=cuda:0"],
        "run": ["run", "tests/fixtures/w8a8-fp8-tensor", "--m", "1,16,256", "--tp-rank", "1", "--tp-size=2",
                "--layers", "q_proj|k_proj", "--platform", "avx2", "--reps", "3", "--no-check"],
        "bench": ["bench", "--scheme", "w8a16-mxfp8", "--backend", "reference", "--m=1,7,257", "--n", "4000000000",
                  "--k", "4096", "--compare", "onednn", "--shapes", "llama3-8b", "--plot", "x.svg", "--roofline"],
        "inspect": ["inspect", "ckpt", "--explain", "--tp-rank", "0", "--tp-size", "8", "--json"],
        "quantize": ["quantize", "in.safetensors", "out", "--scheme", "w4a4-nvfp4"],
        "demo": ["demo", "--help"],
        "bad": ["run", "--m", "-1,x", "--tp-rank", "99999999999999999999", "--unknown", "extra", "--json=1"],
    }
    for name, argv in lines.items():
        write("cli_args", name, "\n".join(argv))


SEP = b"\n\x01\n"


def bf16_safetensors(tensors):
    import numpy as np
    header, data = {}, b""
    for name, shape in tensors:
        n = int(np.prod(shape))
        rng = np.random.default_rng(len(data))
        bits = (rng.standard_normal(n).astype(np.float32) * 0.05).view(np.uint32) >> 16
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [len(data), len(data) + 2 * n]}
        data += bits.astype("<u2").tobytes()
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def checkpoint_dir_seeds():
    import subprocess
    import tempfile
    qlinear = os.environ.get("QLINEAR", os.path.join(ROOT, "build", "qlinear"))
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*/config.json"))):
        scheme = os.path.basename(os.path.dirname(path))
        small = os.path.join(OUT, "safetensors", f"fixture-{scheme}-small.safetensors")
        write("checkpoint_dir", f"fixture-{scheme}", open(path, "rb").read() + SEP + SEP + open(small, "rb").read())
    if not os.access(qlinear, os.X_OK):
        print(f"make_seeds: {qlinear} not built: no quantized checkpoint_dir seeds")
        return
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "bf16")
        os.makedirs(src)
        p = "model.layers.0.mlp."
        with open(os.path.join(src, "model.safetensors"), "wb") as f:
            f.write(bf16_safetensors([(p + "gate_proj.weight", (32, 128)), (p + "up_proj.weight", (32, 128)),
                                      (p + "down_proj.weight", (128, 32))]))
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": 128}, f)
        listing = subprocess.run([qlinear, "kernels", "--list-schemes"], capture_output=True, text=True).stdout
        schemes = [line.split()[0] for line in listing.splitlines()[1:] if line.strip()]
        for scheme in schemes:
            out = os.path.join(tmp, scheme)
            r = subprocess.run([qlinear, "quantize", src, out, "--scheme", scheme, "--input-range", "-4,4"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                continue
            config = open(os.path.join(out, "config.json"), "rb").read()
            shard = open(os.path.join(out, "model.safetensors"), "rb").read()
            n = struct.unpack("<Q", shard[:8])[0]
            names = [k for k in json.loads(shard[8:8 + n]) if k != "__metadata__"]
            index = json.dumps({"weight_map": {k: "a.safetensors" for k in names}}).encode()
            write("checkpoint_dir", f"quantized-{scheme}", config + SEP + SEP + shard)
            write("checkpoint_dir", f"quantized-{scheme}-index", config + SEP + index + SEP + shard)


if __name__ == "__main__":
    shutil.rmtree(OUT, ignore_errors=True)
    safetensors_seeds()
    quant_config_seeds()
    cli_seeds()
    checkpoint_dir_seeds()
    for target in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, target))
        size = sum(os.path.getsize(os.path.join(OUT, target, f)) for f in files)
        print(f"fuzz/corpus/{target}: {len(files)} seeds, {size} bytes")
