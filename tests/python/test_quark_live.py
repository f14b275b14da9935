"""qlinear's OCP-MX schemes with quantized activations against AMD Quark itself, live, on fresh random data:
weights quantized by Quark's "even" rule (quantize_layer(mx_rule="quark_even")) and Quark's dynamic MX
quantization of the input (fake_quantize_mx), both then multiplied in float64, must equal the layer's output
on every CPU kernel up to f32 summation order. Skips without amd-quark and PyTorch (pip install amd-quark);
tests/quant/quark_oracle_test.cpp and tests/checkpoint/test_quark_mx.cpp check the same against a stored
table and Quark-written checkpoints when it is absent."""
import numpy as np
import pytest

import qlinear

torch = pytest.importorskip("torch")
hw = pytest.importorskip("quark.torch.kernel.hw_emulation.hw_emulation_interface")

# scheme -> (Quark's weight element dtype, Quark's input element dtype)
SCHEMES = {
    "w4a4-mxfp4": ("fp4", "fp4"),
    "w6a6-mxfp6-e2m3": ("fp6_e2m3", "fp6_e2m3"),
    "w6a6-mxfp6-e3m2": ("fp6_e3m2", "fp6_e3m2"),
    "w4a6-mxfp4-mxfp6-e2m3": ("fp4", "fp6_e2m3"),
}


def quark_qdq(a, fmt):
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    return hw.fake_quantize_mx(t, axis=-1, block_size=32, scale_calculation_mode="even",
                               mx_element_dtype=fmt).numpy().astype(np.float64)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("m", [1, 3, 17, 257])
def test_layer_equals_quarks_fake_quant(scheme, m):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    n, k = 67, 160
    w = (rng.standard_normal((n, k)) * 0.1).astype(np.float32)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-6, 6, (m, 1)))).astype(np.float32)
    wfmt, xfmt = SCHEMES[scheme]
    want = quark_qdq(x, xfmt) @ quark_qdq(w, wfmt).T
    mag = np.abs(quark_qdq(x, xfmt)) @ np.abs(quark_qdq(w, wfmt)).T
    for kernel in [None, "reference_" + qlinear.find_scheme(scheme).family]:
        layer = qlinear.quantize_layer("t", scheme, w, mx_rule="quark_even", input_dtype="f32", out_dtype="f32")
        layer.process(kernel=kernel)
        out = np.empty((m, n), np.float32)
        out.fill(np.nan)  # poisoned
        y = qlinear.apply(layer, x, out=out)
        err = np.abs(y.astype(np.float64) - want)
        assert np.all(err <= (k + 16) * 2.0**-24 * mag + 1e-30), (seed, kernel, float(np.max(err / (mag + 1e-30))))
