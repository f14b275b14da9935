"""tools/real_model_table.py's measuring pieces on the tiny Llama-shaped model (the script itself needs a GGUF
model and transformers, which CI does not have): the per-layer check against the reference sees a kernel's
summation error only, and sees a wrong layer; the paired perplexity ratio and its standard error; the
float32 variant of the fake-quant reference."""
import copy
import importlib.util
import math
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/setup.sh installs it)")

from qlinear.fake_quant import FakeQuantLinear, fake_quantize_linears  # noqa: E402
from qlinear.torch import QuantLinear, calibrate, quantize_linears  # noqa: E402
from tiny_llama import TinyLlama  # noqa: E402

torch.set_num_threads(1)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_LM_HEAD = lambda name, linear: name != "lm_head"  # noqa: E731


def table_module():
    spec = importlib.util.spec_from_file_location("real_model_table", os.path.join(ROOT, "tools", "real_model_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tokens(seed, length=40):
    return torch.randint(0, 96, (1, length), generator=torch.Generator().manual_seed(seed))


def run_check(rmt, model, reference, scheme, cal, x):
    check = rmt.LayerCheck(model, reference, scheme, cal)
    with torch.no_grad():
        model(x)
    check.remove()
    return check


@pytest.mark.parametrize("scheme,calibrated", [("w4a4-nvfp4", True), ("w4a4-nvfp4", False), ("w8a8-int8-static", True),
                                               ("w8a8-int8-static-asym", True), ("w4a4-mxfp4", False),
                                               ("w8a8-fp8-channel", False), ("w8a16-fp8", False)])
def test_layer_check_sees_summation_error_only_and_a_wrong_layer(scheme, calibrated):
    rmt = table_module()
    dense = TinyLlama(seed=2).to(torch.bfloat16)
    x = tokens(1)
    cal = calibrate(dense, [tokens(3), x]) if calibrated else None
    reference = fake_quantize_linears(copy.deepcopy(dense), scheme, include=NOT_LM_HEAD, calibration=cal)
    model = quantize_linears(copy.deepcopy(dense), scheme, include=NOT_LM_HEAD, calibration=cal)
    check = run_check(rmt, model, reference, scheme, cal, x)
    layers = sum(1 for n, m in model.named_modules() if type(m).__name__ == "QuantLinear")
    assert check.calls == layers
    # Both round their outputs to BF16 from the same quantized operands: at most a few outputs one BF16 ulp
    # apart (2^-8 relative), from f32 against f64 summation (measured up to 1.8e-4).
    assert check.worst < 2e-3, (check.worst, check.where)
    # The activations the kernels quantize are the reference's, value for value.
    quantized_input = scheme != "w8a16-fp8"
    assert check.quantized_input == quantized_input
    assert check.values_off == 0 and check.values == (x.numel() * 2 * (6 * 256 + 384) if quantized_input else 0)  # 2 blocks
    # A layer whose weight is off by one part in 100 is seen.
    down = reference.model.layers[0].mlp.down_proj
    down.weight.mul_(1.01)
    check = run_check(rmt, model, reference, scheme, cal, x)
    assert check.worst > 5e-3 and check.where == "model.layers.0.mlp.down_proj"
    # And so is a static activation scale that differs from the kernel's.
    if calibrated:
        down.static = down.static * 1.25 if isinstance(down.static, float) else (down.static[0] * 1.25, down.static[1])
        check = run_check(rmt, model, reference, scheme, cal, x)
        assert check.values_off > 0 and check.values_off_at == "model.layers.0.mlp.down_proj"


def test_paired_ratio_and_its_standard_error():
    rmt = table_module()
    windows = [torch.zeros(1, 65, dtype=torch.long), torch.zeros(1, 97, dtype=torch.long)]  # 64 + 96 predictions
    ref = torch.rand(160, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pct, two_se = rmt.paired(ref + 0.01, ref, windows)
    assert pct == pytest.approx(100 * math.expm1(0.01)) and two_se == pytest.approx(0, abs=1e-9)
    noise = torch.randn(160, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pct, two_se = rmt.paired(ref + 0.1 * noise, ref, windows)
    # 5 blocks of 32 tokens (the last 32 of the second window complete one; nothing is left over)
    blocks = torch.stack([(0.1 * noise)[i:i + 32].mean() for i in range(0, 160, 32)])
    assert two_se == pytest.approx(200 * float(blocks.std()) / math.sqrt(5))
    assert pct == pytest.approx(100 * math.expm1(float((0.1 * noise).mean())))


def test_reference_with_f32_matmul_differs_by_f32_summation_only():
    lin = torch.nn.Linear(256, 64)
    x = torch.randn(5, 256)
    f64 = FakeQuantLinear(lin, "w8a16-fp8")
    f32 = FakeQuantLinear(lin, "w8a16-fp8", matmul_dtype=torch.float32)
    a = f64(x.double()).double()
    b = f32(x.double()).double()
    err = float((a - b).abs().max() / a.abs().max())
    assert 0 < err < 256 * 2.0**-24


def test_table_has_one_cell_per_column_in_every_row():
    rmt = table_module()
    base = {"ppl": 31.0}
    rows = [("bf16", "torch", dict(base, prefill_ms=3.0, decode_tps=100.0)),
            ("s", "reference", {"ppl": 32.0, "top1": 0.9, "kl": 0.01}),
            ("s", "qlinear", {"ppl": 32.1, "top1": 0.9, "kl": 0.01, "vs_ref": 0.3, "vs_ref_2se": 0.5,
                              "layer_err": 1e-4, "act_values": 1000, "act_values_off": 0, "kernels": ["k1", "k2"],
                              "prefill_ms": 4.0, "decode_tps": 90.0}),
            ("t", "qlinear", {"error": "Error: no kernel"})]
    for timed in (False, True):
        lines = rmt.table(rows, base, timed).strip().split("\n")
        cells = {line.count("|") for line in lines}
        assert cells == {11 + 2 * timed}, lines
        assert "| s | qlinear | k1, k2 | 32.10 | +3.5% | +0.30% ± 0.50 | 0.900 | 0.0100 | 1.0e-04 | 0 of 1.00e+03 |" in lines[4]
        assert "not run: Error: no kernel" in lines[5]


@pytest.mark.parametrize("scheme", ["w8a8-fp8-block", "w8a8-fp8-channel", "w4a4-nvfp4"])
def test_reference_matches_the_library_where_k_is_not_a_multiple_of_128(scheme):
    # SmolLM2's hidden size is 576 = 4.5 x 128: the 1x128 activation groups and 128x128 weight blocks end
    # with a partial one.
    torch.manual_seed(5)
    lin = torch.nn.Linear(576, 200, bias=False)
    x = 3 * torch.randn(7, 576)
    got = QuantLinear.from_linear(lin, scheme)(x).double()
    want = FakeQuantLinear(lin, scheme)(x).double()
    assert float((got - want).norm() / want.norm()) < 1e-5


class WithLogits(TinyLlama):
    """The tiny model behind transformers' interface: model(ids).logits."""

    def forward(self, ids):
        return type("Output", (), {"logits": super().forward(ids)})()


class WordTokenizer:
    def __call__(self, text, return_tensors="pt"):
        ids = torch.tensor([[sum(map(ord, w)) % 96 for w in text.split()]])
        return type("Encoding", (), {"input_ids": ids})()


def test_the_script_end_to_end_on_the_tiny_model(tmp_path, monkeypatch):
    import json
    import sys
    import qlinear.fake_quant
    rmt = table_module()
    monkeypatch.setattr(rmt, "load_model", lambda path, device: (
        WordTokenizer(), WithLogits(seed=4).to(torch.bfloat16).eval(), "tiny"))
    real = qlinear.fake_quant.fake_quantize_linears

    def failing_for_int8(model, scheme, **kw):
        if scheme == "w8a8-int8-dynamic":
            raise RuntimeError("the reference failed")
        return real(model, scheme, **kw)

    monkeypatch.setattr(qlinear.fake_quant, "fake_quantize_linears", failing_for_int8)
    out, js = tmp_path / "t.md", tmp_path / "t.jsonl"
    monkeypatch.setattr(sys, "argv", ["real_model_table.py", "--gguf", "unused", "--windows", "2", "--no-timing",
                                      "--reference-f32", "--schemes", "w8a16-fp8,w4a4-nvfp4,w8a8-int8-dynamic",
                                      "--out", str(out), "--json", str(js)])
    rmt.main()
    lines = out.read_text().splitlines()
    assert lines[0].startswith("<!-- tiny, ") and "4 of 4 runs" in lines[0]
    rows = [json.loads(l) for l in js.read_text().splitlines()]
    # per run: reference, its f32 variant, qlinear; the failed reference leaves the qlinear row standing
    assert [(r["scheme"], r["implementation"]) for r in rows] == [
        ("w8a16-fp8", "reference"), ("w8a16-fp8", "reference, f32 matmul"), ("w8a16-fp8", "qlinear"),
        ("w4a4-nvfp4 (dynamic g)", "reference"), ("w4a4-nvfp4 (dynamic g)", "reference, f32 matmul"),
        ("w4a4-nvfp4 (dynamic g)", "qlinear"),
        ("w4a4-nvfp4 (calibrated g)", "reference"), ("w4a4-nvfp4 (calibrated g)", "reference, f32 matmul"),
        ("w4a4-nvfp4 (calibrated g)", "qlinear"),
        ("w8a8-int8-dynamic", "reference"), ("w8a8-int8-dynamic", "qlinear")]
    assert rows[9]["error"] == "RuntimeError: the reference failed" and rows[10]["ppl"] > 1
    assert "| w8a8-int8-dynamic | reference | not run: RuntimeError: the reference failed |" in out.read_text()
    for r in rows[2], rows[5], rows[8]:
        assert r["layer_calls"] == 14 and r["layer_err"] < 2e-3 and abs(r["vs_ref"]) < 3 * r["vs_ref_2se"] + 1
        assert r["kernels"] and r["tokens"] == sum(len(t.split()) - 1 for t in rmt.WINDOWS[:2])
    assert "act_values" not in rows[2] and rows[5]["act_values_off"] == 0 and rows[8]["act_values_off"] == 0
    assert rows[5]["act_values"] == rmt.CHECK_TOKENS * 2 * (6 * 256 + 384)
