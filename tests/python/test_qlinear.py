"""The Python package against the library and against independent oracles (compressed-tensors' outputs in
the fixtures, NumPy matmuls). Runs with NumPy only; tests/python/test_torch.py covers PyTorch."""
import os
import subprocess
import threading

import numpy as np
import pytest

import qlinear
from conftest import FIXTURES, INTERMEDIATE, QUERY, read_safetensors, rel_err, bf16_bits_to_f32

ALL_FIXTURES = sorted(d for d in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, d)))


def rng_normal(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ---- tables and selection ------------------------------------------------------------------------------

def test_schemes_kernels_and_keys_are_the_library_tables():
    names = [s.name for s in qlinear.schemes()]
    for expected in ["w8a8-fp8-tensor", "w8a8-fp8-channel", "w8a8-fp8-block", "w8a16-fp8", "w8a8-int8-dynamic",
                     "w8a8-mxfp8", "w4a16-mxfp4", "w4a4-nvfp4", "w4a4-mxfp4", "w6a6-mxfp6-e2m3",
                     "w6a6-mxfp6-e3m2", "w4a6-mxfp4-mxfp6-e2m3", "w4a8-mxfp4-fp8"]:
        assert expected in names
    s = qlinear.find_scheme("w8a8-fp8-channel")
    assert s.family == "fp8_scaled_mm"
    assert s.weight_key.dtype == "f8e4m3fn" and s.activation_key.name == "kFp8DynamicTokenSym"
    assert qlinear.find_scheme("w4a16-mxfp4").activation_key is None
    assert qlinear.find_scheme("w4a4-mxfp4").activation_key.name == "kMxfp4Dynamic"
    kernel_names = [k.name for k in qlinear.kernels()]
    assert len(kernel_names) == len(set(kernel_names)) and "reference_mxfp4" in kernel_names
    assert qlinear.find_kernel("reference_mxfp4").family == "mxfp4"
    assert "f8e4m3fn" in qlinear.formats() and "e8m0fnu" in qlinear.formats()
    assert dict(qlinear.named_keys())["kMxfp8Dynamic"].group == "1x32"


def test_cpu_threads_cap_is_settable_and_restorable():
    default = qlinear.cpu_threads()
    assert default >= 1
    qlinear.set_cpu_threads(3)
    assert qlinear.cpu_threads() == 3
    assert qlinear.Platform.host_cpu().num_threads == 3
    qlinear.set_cpu_threads(0)
    assert qlinear.cpu_threads() == default


def test_unknown_names_raise_qlinear_error_listing_the_known_ones():
    with pytest.raises(qlinear.Error, match=r"unknown scheme 'w9a9'; known schemes: w8a8-fp8-tensor"):
        qlinear.find_scheme("w9a9")
    with pytest.raises(qlinear.Error, match=r"unknown kernel 'fast'; known kernels: .*reference_"):
        qlinear.find_kernel("fast")
    with pytest.raises(qlinear.Error, match=r"unknown dtype 'f12'"):
        qlinear.make_config("w8a16-fp8", 64, 64, input_dtype="f12")
    assert issubclass(qlinear.Error, Exception)


def test_selection_explains_every_candidate_with_a_reason():
    config = qlinear.make_config("w4a16-mxfp4", 256, 512, input_dtype="f32", out_dtype="f32")
    sel = qlinear.explain_selection(config)
    assert sel.kernel is not None and sel.kernel == qlinear.select_kernel(config)
    chosen = [c for c in sel.candidates if c.chosen]
    assert len(chosen) == 1 and chosen[0].kernel == sel.kernel
    assert sel.candidates[-1].kernel.name == "reference_mxfp4"
    assert sel.kernel.name in sel.explain() and str(sel) == sel.explain()
    # A CPU without AVX2: every x86 kernel says why not, and the reference is chosen.
    scalar = qlinear.Platform.synthetic_cpu([])
    sel = qlinear.explain_selection(config, scalar)
    assert sel.kernel.name == "reference_mxfp4"
    refused = [c for c in sel.candidates if not c.chosen]
    assert refused and all(c.reason for c in refused)
    assert qlinear.find_kernel(refused[0].kernel.name).is_supported(scalar).ok is False


def test_selection_refuses_a_bad_shape_naming_it():
    config = qlinear.make_config("w4a16-mxfp4", 256, 4100, input_dtype="f32", out_dtype="f32")
    with pytest.raises(qlinear.Error, match="4100"):
        qlinear.select_kernel(config)
    sel = qlinear.explain_selection(config)  # never raises: every candidate carries the reason
    assert sel.kernel is None and sel.candidates
    assert all(not c.chosen and "4100" in c.reason for c in sel.candidates)


def test_force_disable_and_environment(monkeypatch):
    config = qlinear.make_config("w8a8-int8-dynamic", 256, 512, input_dtype="f32", out_dtype="f32")
    first = qlinear.select_kernel(config)
    assert qlinear.select_kernel(config, force="reference_int8_scaled_mm").name == "reference_int8_scaled_mm"
    if first.name != "reference_int8_scaled_mm":
        assert qlinear.select_kernel(config, disabled=[first.name]) != first
        monkeypatch.setenv("QLINEAR_DISABLED_KERNELS", first.name)
        sel = qlinear.explain_selection(config)
        assert sel.kernel != first
        assert "QLINEAR_DISABLED_KERNELS" in [c for c in sel.candidates if c.kernel == first][0].reason
        assert qlinear.explain_selection(config, read_environment=False).kernel == first
    monkeypatch.setenv("QLINEAR_DISABLED_KERNELS", "no_such_kernel")
    with pytest.raises(qlinear.Error, match="QLINEAR_DISABLED_KERNELS: unknown kernel 'no_such_kernel'"):
        qlinear.select_kernel(config)


# ---- checkpoints -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", ALL_FIXTURES)
def test_loaded_layers_match_compressed_tensors_outputs(fixture):
    """qlinear's output on each fixture against the packages' own forward pass (tests/fixtures/README.md);
    the bounds are those of tests/checkpoint/test_fixtures.cpp, for the same reasons."""
    path = os.path.join(FIXTURES, fixture)
    model = qlinear.load_checkpoint(path, fuse=False, input_dtype="f32", out_dtype="f32")
    assert model.quant_method == "compressed-tensors"
    expected = read_safetensors(os.path.join(path, "expected.safetensors"))
    for name in (QUERY, INTERMEDIATE):
        layer = model.layer(name)
        assert layer.kernel is None
        kernel = layer.process()
        assert layer.kernel == kernel and kernel.name in layer.explain().explain()
        x = expected[name + ".x"]
        want = expected.get(name + ".y_input_qdq", expected[name + ".y"])
        y = layer(x)
        assert y.dtype == np.float32 and y.shape == want.shape
        family = layer.scheme.family
        bound = 1e-6 if family in ("mxfp8", "mxfp4") else 1.2e-2 if fixture == "w8a8-int8-dynamic" else 4e-3
        assert rel_err(y, want) < bound, (name, kernel.name, rel_err(y, want))


def test_fused_layers_and_tensor_parallel_slices():
    path = os.path.join(FIXTURES, "w8a8-fp8-channel")
    model = qlinear.load_checkpoint(path)
    qkv = model.layer("encoder.layer.0.attention.self.qkv_proj")
    assert qkv.shards == [f"encoder.layer.0.attention.self.{s}" for s in ("query", "key", "value")]
    assert qkv.config.logical_widths == [384, 384, 384] and qkv.parallelism == "column"
    assert qkv.config.input_dtype == "bf16"
    half = qlinear.load_checkpoint(path, tp_rank=1, tp_size=2, layers=r"output\.dense$")
    names = sorted(l.name for l in half.layers)
    assert names == ["encoder.layer.0.attention.output.dense", "encoder.layer.0.output.dense"]
    row = half.layer("encoder.layer.0.output.dense")
    assert (row.parallelism, row.config.k, row.full_k, row.tp_rank) == ("row", 768, 1536, 1)
    assert row.bias is None  # row-parallel: the bias is added on rank 0 only


def test_params_are_read_only_views_of_the_checkpoint():
    model = qlinear.load_checkpoint(os.path.join(FIXTURES, "w8a8-fp8-channel"), fuse=False, layers="query")
    layer = model.layers[0]
    assert set(layer.param_names()) >= {"weight", "weight_scale"}
    w = layer.param("weight")
    assert layer.param_dtype("weight") == "f8e4m3fn" and w.dtype == np.uint8 and w.shape == (384, 384)
    with pytest.raises(ValueError):
        w[0, 0] = 1
    assert layer.param("weight_scale").dtype == np.float32  # the loader normalizes scales to f32
    with pytest.raises(qlinear.Error, match="input_zero_point"):
        layer.param("input_zero_point")


def test_load_errors_carry_the_library_message_unchanged():
    """The exception's text is the library's: the same as the CLI prints for the same mistake."""
    missing = os.path.join(FIXTURES, "no-such-checkpoint")
    with pytest.raises(qlinear.Error) as err:
        qlinear.load_checkpoint(missing)
    assert "no-such-checkpoint" in str(err.value)
    cli = os.environ.get("QLINEAR_CLI")
    if cli:  # set by the ctest that runs this suite
        res = subprocess.run([cli, "inspect", missing], capture_output=True, text=True)
        assert res.returncode != 0 and str(err.value) in res.stderr, res.stderr


# ---- apply -----------------------------------------------------------------------------------------------

def int8_layer(n=96, k=256, bias=True, dtype="f32", seed=3):
    w = rng_normal((n, k), seed, 0.05)
    b = rng_normal((n,), seed + 1) if bias else None
    return w, b, qlinear.quantize_layer("test.proj", "w8a8-int8-dynamic", w, bias=b, input_dtype=dtype,
                                        out_dtype=dtype)


def test_quantized_layer_against_numpy_and_the_reference_kernel():
    w, b, layer = int8_layer()
    ref = qlinear.quantize_layer("test.proj", "w8a8-int8-dynamic", w, bias=b, input_dtype="f32", out_dtype="f32")
    layer.process()
    ref.process(kernel="reference_int8_scaled_mm")
    x = rng_normal((17, 256), 9)
    y = layer(x)
    # Same quantized inputs: only f32 accumulation separates the kernels. Against the float matmul, INT8
    # per-channel weights and per-token activations cost ~1% (2 x 2^-8 relative per product, averaged).
    assert rel_err(y, ref(x)) < 1e-5
    assert rel_err(y, x @ w.T + b) < 2e-2
    assert rel_err(layer(x, bias=None), x @ w.T) < 2e-2
    assert np.allclose(layer(x, bias=np.zeros(96, np.float32)), layer(x, bias=None))


def test_batch_dimensions_strides_and_out():
    _, _, layer = int8_layer()
    layer.process()
    x = rng_normal((2, 3, 256), 5)
    y = layer(x)
    assert y.shape == (2, 3, 96)
    np.testing.assert_array_equal(y.reshape(6, 96), layer(x.reshape(6, 256)))
    wide = rng_normal((6, 512), 6)
    np.testing.assert_array_equal(layer(wide[:, ::2]), layer(np.ascontiguousarray(wide[:, ::2])))
    out = np.full((2, 3, 96), np.nan, np.float32)
    assert layer(x, out=out) is out
    np.testing.assert_array_equal(out, y)
    with pytest.raises(qlinear.Error, match=r"out must be a C-contiguous \[2, 3, 96\]"):
        layer(x, out=np.empty((6, 96), np.float32))
    assert layer(np.empty((0, 256), np.float32)).shape == (0, 96)


def test_bf16_as_uint16_bits_and_as_ml_dtypes():
    w, b, layer = int8_layer(dtype="bf16")
    layer.process()
    x32 = rng_normal((5, 256), 11)
    bits = (x32.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: an exact bf16 input
    y = layer(bits)
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    assert y.dtype == ml_dtypes.bfloat16
    y_ml = layer(bits.view(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(y.view(np.uint16), y_ml.view(np.uint16))
    _, _, f32 = int8_layer(dtype="f32")
    f32.process()
    want = f32(bf16_bits_to_f32(bits))
    assert rel_err(y.astype(np.float32), want) < 4e-3  # one bf16 rounding of each output


def test_apply_errors_name_what_was_wrong():
    _, _, layer = int8_layer()
    x = rng_normal((4, 256), 1)
    with pytest.raises(qlinear.Error, match="layer test.proj is not processed: call process()"):
        layer(x)
    layer.process()
    with pytest.raises(qlinear.Error, match=r"layer test.proj was already processed by "):
        layer.process()
    with pytest.raises(qlinear.Error, match=r"x has shape \[4, 128\], expected \[..., 256\]"):
        layer(np.ones((4, 128), np.float32))
    with pytest.raises(qlinear.Error, match="activation dtype must be f32, bf16 or f16, got i32"):
        layer(np.ones((4, 256), np.int32))
    with pytest.raises(qlinear.Error, match=r"bias must be f32/bf16/f16 \[96\]"):
        layer(x, bias=np.ones(95, np.float32))
    with pytest.raises(qlinear.Error, match=r"weight must be"):
        qlinear.quantize_layer("bad", "w8a16-fp8", np.ones((4,), np.float32))


def test_process_with_a_named_kernel_checks_the_platform():
    _, _, layer = int8_layer()
    avx2 = [k for k in qlinear.kernels() if "avx2" in k.name and k.family == "int8_scaled_mm"]
    if avx2:
        with pytest.raises(qlinear.Error, match=f"kernel {avx2[0].name} does not run on"):
            layer.process(kernel=avx2[0].name, platform=qlinear.Platform.synthetic_cpu([]))
    assert layer.kernel is None
    assert layer.process(kernel="reference_int8_scaled_mm").name == "reference_int8_scaled_mm"


def test_concurrent_apply_from_threads_gives_the_same_results():
    _, _, layer = int8_layer()
    layer.process()
    xs = [rng_normal((33, 256), 100 + i) for i in range(8)]
    want = [layer(x) for x in xs]
    got = [None] * len(xs)

    def run(i):
        for _ in range(5):
            got[i] = layer(xs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
