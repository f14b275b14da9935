"""Quantized PyTorch models end to end, on a tiny Llama-shaped model (tiny_llama.py, random weights): every
scheme through quantize_linears (calibrated where its activation scales are static) and through a
checkpoint written by `qlinear quantize` and loaded into the model, the logits compared with a plain-PyTorch
fake-quant reference of the same scheme (qlinear.fake_quant) while the activations sweep to 1e4 and beyond;
static schemes without calibration are refused; nothing is clipped silently."""
import copy
import json
import os
import struct
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/setup.sh installs it)")
from torch import nn  # noqa: E402

import qlinear  # noqa: E402
from qlinear.fake_quant import fake_quantize_linears  # noqa: E402
from qlinear.torch import (FusedShardLinear, QuantLinear, calibrate, load_quantized_linears,  # noqa: E402
                           quantize_linears)
from conftest import rel_err  # noqa: E402
from tiny_llama import TinyLlama  # noqa: E402

SCHEMES = [s.name for s in qlinear.schemes()]
STATIC = ["w8a8-fp8-tensor", "w8a8-int8-static", "w8a8-int8-static-asym"]
NOT_LM_HEAD = lambda name, linear: name != "lm_head"  # noqa: E731  (as `qlinear quantize` ignores it)

# Logits against the dense model, f32, activations of any magnitude: the format's own error on this random
# model (the reference's too: both measured the same, to 1e-6, at 1 and 1e4), with a margin of about 1.6x
# the largest measured. A layer that clips its inputs is off by 70% to 97%.
BOUND_VS_DENSE = {
    "w8a8-fp8-tensor": 0.25, "w8a8-fp8-channel": 0.25, "w8a8-fp8-block": 0.25, "w8a16-fp8": 0.16,
    "w8a8-int8-dynamic": 0.07, "w8a8-int8-static": 0.1, "w8a8-int8-static-asym": 0.1,
    "w8a8-mxfp8": 0.25, "w8a16-mxfp8": 0.17, "w6a16-mxfp6-e2m3": 0.18, "w6a16-mxfp6-e3m2": 0.32,
    "w4a16-mxfp4": 0.65, "w4a4-nvfp4": 0.65,
}
# Against the fake-quant reference of the same scheme: 1e-7 to 1e-6 measured (the kernels accumulate in f32,
# the reference in f64), once 1.4e-3 where that difference moved one INT8 activation code across a rounding
# boundary in the next layer.
BOUND_VS_REFERENCE = 5e-3


def tokens(seed, batch=2, length=16, vocab=96):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def calibration_samples():
    return [tokens(100), tokens(101)]


# Every scheme, calibrated; NVFP4 also without calibration (its input global scale then dynamic).
MODEL_CASES = [(s, True) for s in SCHEMES] + [("w4a4-nvfp4", False)]


@pytest.mark.parametrize("scheme,calibrated", MODEL_CASES)
def test_quantize_linears_matches_the_fake_quant_reference_across_magnitudes(scheme, calibrated):
    for scale in (1.0, 1e4):
        dense = TinyLlama(seed=1, scale=scale)
        x = tokens(7)
        with torch.no_grad():
            want = dense(x)
        # the range covers what is measured: nothing saturates here
        cal = calibrate(dense, calibration_samples() + [x]) if calibrated else None
        q = quantize_linears(copy.deepcopy(dense), scheme, include=NOT_LM_HEAD, calibration=cal)
        ref = fake_quantize_linears(copy.deepcopy(dense), scheme, include=NOT_LM_HEAD, calibration=cal)
        assert isinstance(q.model.layers[0].self_attn.q_proj, QuantLinear)
        with torch.no_grad():
            got, expect = q(x), ref(x)
        where = f"{scheme} calibrated={calibrated} scale={scale:g}"
        assert rel_err(got.numpy(), expect.numpy()) < BOUND_VS_REFERENCE, where
        assert rel_err(got.numpy(), want.numpy()) < BOUND_VS_DENSE[scheme], where


@pytest.mark.parametrize("scheme", STATIC)
def test_static_schemes_without_calibration_are_refused(scheme):
    model = TinyLlama()
    with pytest.raises(qlinear.Error, match="static activation scales.*calibration="):
        quantize_linears(model, scheme)
    assert isinstance(model.lm_head, nn.Linear) and isinstance(model.model.layers[0].mlp.up_proj, nn.Linear)
    with pytest.raises(qlinear.Error, match="static activation scales.*input_min= and input_max="):
        QuantLinear.from_linear(model.lm_head, scheme)
    with pytest.raises(qlinear.Error, match="static activation scales"):
        qlinear.quantize_layer("l", scheme, np.ones((32, 128), np.float32))


def test_nvfp4_without_calibration_has_a_dynamic_global_scale_and_clips_nothing():
    torch.manual_seed(3)
    lin = nn.Linear(512, 256)
    q = QuantLinear.from_linear(lin, "w4a4-nvfp4")
    assert q.input_scales == "dynamic" and "input_global_scale" not in q.layer.param_names()
    assert "kNvfp4DynamicGlobal" in str(q.layer.config) and "input_scales=dynamic" in repr(q)
    assert "global scale dynamic (per call)" in str(q.layer.explain())
    calibrated = QuantLinear.from_linear(lin, "w4a4-nvfp4", input_range=(-4.0, 4.0))
    assert calibrated.input_scales == "static" and "activation=kNvfp4Dynamic " in str(calibrated.layer.config)
    assert "global scale static (input_global_scale)" in str(calibrated.layer.explain())
    for magnitude in (1.0, 10.0, 100.0, 1e4):
        x = magnitude * torch.randn(9, 512)
        with torch.no_grad():
            want = lin(x)
        # NVFP4 weights and activations, one layer: 0.13 to 0.14 at every magnitude (clipped: 0.7 to 0.97)
        assert rel_err(q(x).numpy(), want.numpy()) < 0.2, magnitude


def test_calibration_context_manager_and_saturation_counts():
    model = TinyLlama(seed=2)
    with calibrate(model) as cal:
        with torch.no_grad():
            model(tokens(1))
    assert set(cal.ranges) == {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    lo, hi = cal.range_of("model.layers.0.mlp.down_proj")
    assert lo < 0 < hi
    quantize_linears(model, "w8a8-int8-static", calibration=cal, count_saturated=True)
    layer = model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        model(tokens(1))  # the calibration input itself: nothing beyond the range
        assert layer.saturated_inputs == 0 and layer.observed_inputs > 0
        layer(torch.full((1, layer.in_features), 10 * max(-lo, hi)))
    assert layer.saturated_inputs == layer.in_features
    with pytest.raises(qlinear.Error, match="no range for nope"):
        cal.range_of("nope")


# ---- checkpoints written by `qlinear quantize`, loaded into the model ---------------------------------

def cli():
    path = os.environ.get("QLINEAR_CLI")
    if not path:
        pytest.skip("QLINEAR_CLI is not set (make test sets it to the qlinear command)")
    return path


def write_dense_checkpoint(model, directory):
    """model's state dict as one F32 safetensors file plus a config.json."""
    os.makedirs(directory)
    header, blobs, offset = {}, [], 0
    for name, t in model.state_dict().items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, f)


def quantize_checkpoint(tmp_path, dense, scheme, input_range):
    src, out = str(tmp_path / "dense"), str(tmp_path / scheme)
    write_dense_checkpoint(dense, src)
    args = [cli(), "quantize", src, out, "--scheme", scheme]
    if input_range is not None:
        args += ["--input-range", f"{input_range[0]!r},{input_range[1]!r}"]
    res = subprocess.run(args, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.parametrize("scheme", SCHEMES)
def test_checkpoint_into_the_model_matches_the_fake_quant_reference(tmp_path, scheme):
    dense = TinyLlama(seed=4, scale=1e2)
    x = tokens(8)
    cal = calibrate(dense, calibration_samples() + [x])
    # `qlinear quantize` takes one range for every layer: the union of the observed ones
    lo = min(cal.range_of(n)[0] for n in cal.ranges if n != "lm_head")
    hi = max(cal.range_of(n)[1] for n in cal.ranges if n != "lm_head")
    needs_range = qlinear.static_activation_scales(scheme) != ""
    path = quantize_checkpoint(tmp_path, dense, scheme, (lo, hi) if needs_range else None)
    for n in cal.ranges:
        cal.ranges[n] = (lo, hi)
    ref = fake_quantize_linears(copy.deepcopy(dense), scheme, include=NOT_LM_HEAD, calibration=cal)
    with torch.no_grad():
        expect = ref(x)
    for fuse in (False, True):
        model = copy.deepcopy(dense)
        report = load_quantized_linears(model, path, fuse=fuse)
        assert report.dense == ["lm_head"] and len(report.replaced) == 14, str(report)
        shard_type = FusedShardLinear if fuse else QuantLinear
        assert isinstance(model.model.layers[1].self_attn.k_proj, shard_type)
        assert isinstance(model.model.layers[1].mlp.up_proj, shard_type)
        assert isinstance(model.model.layers[1].self_attn.o_proj, QuantLinear)
        with torch.no_grad():
            got = model(x)
        assert rel_err(got.numpy(), expect.numpy()) < BOUND_VS_REFERENCE, f"{scheme} fuse={fuse}"


def test_qlinear_quantize_refuses_static_schemes_without_a_range(tmp_path):
    src = str(tmp_path / "dense")
    write_dense_checkpoint(TinyLlama(), src)
    for scheme in STATIC + ["w4a4-nvfp4"]:
        res = subprocess.run([cli(), "quantize", src, str(tmp_path / scheme), "--scheme", scheme],
                             capture_output=True, text=True)
        assert res.returncode == 2 and "--input-range" in res.stderr, (scheme, res.stderr)


def test_checkpoint_that_does_not_fit_the_model_names_every_mismatch(tmp_path):
    path = quantize_checkpoint(tmp_path, TinyLlama(), "w8a16-fp8", None)
    other = TinyLlama(inter=256)
    with pytest.raises(qlinear.Error) as err:
        load_quantized_linears(other, path)
    msg = str(err.value)
    for block in (0, 1):
        for proj in ("gate_proj", "up_proj"):
            assert f"model.layers.{block}.mlp.{proj}: the model's Linear is [out=256, in=256], the checkpoint's " \
                   "weight is [384, 256]" in msg
        assert f"model.layers.{block}.mlp.down_proj: the model's Linear is [out=256, in=256]" in msg
    assert isinstance(other.model.layers[0].self_attn.q_proj, nn.Linear)  # nothing replaced
    fewer = TinyLlama()
    del fewer.model.layers[1]
    with pytest.raises(qlinear.Error, match="model.layers.1.self_attn.q_proj: in the checkpoint .*not in the model"):
        load_quantized_linears(fewer, path)
