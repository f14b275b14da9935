"""qlinear with PyTorch: tensors through DLPack, QuantLinear in place of nn.Linear, CUDA tensors on
PyTorch's current stream. Skipped where PyTorch is not installed (it is too big for the CI machine); on a
machine with a Hopper GPU the CUDA tests run too (README: "Python" says how)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch to run these)")
from torch import nn  # noqa: E402

import qlinear  # noqa: E402
from qlinear.torch import QuantLinear, quantize_linears  # noqa: E402
from conftest import FIXTURES, QUERY, read_safetensors, rel_err  # noqa: E402

needs_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and qlinear.built_with_cuda()
         and torch.cuda.get_device_capability() >= (9, 0)),
    reason="needs a CUDA (sm_90) device, PyTorch with CUDA and qlinear built with its CUDA backend")


def linear(k=256, n=128, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return nn.Linear(k, n).to(dtype)


def test_torch_cpu_tensors_match_the_numpy_path():
    lin = linear()
    q = QuantLinear.from_linear(lin, "w8a8-int8-dynamic")
    x = torch.randn(4, 7, 256)
    y = q(x)
    assert isinstance(y, torch.Tensor) and y.shape == (4, 7, 128) and y.dtype == torch.float32
    np.testing.assert_array_equal(y.numpy(), q.layer(x.numpy()))
    with torch.no_grad():
        assert rel_err(y.numpy(), lin(x).numpy()) < 2e-2


def test_torch_out_tensor_is_written_in_place():
    q = QuantLinear.from_linear(linear(), "w8a16-fp8")
    x = torch.randn(5, 256)
    out = torch.full((5, 128), float("nan"))
    assert qlinear.apply(q.layer, x, out=out) is out
    assert torch.equal(out, q(x))


def test_bf16_module_and_quantize_linears():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 64)).to(torch.bfloat16)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x).float()
    quantize_linears(model, "w8a8-fp8-channel")
    assert isinstance(model[0], QuantLinear) and isinstance(model[2], QuantLinear)
    assert "scheme=w8a8-fp8-channel" in repr(model)
    y = model(x)
    assert y.dtype == torch.bfloat16
    # FP8 E4M3 weights and activations in two layers: 4.5% to 6.1% measured on such models (five seeds,
    # through the NumPy path); a wrong layout or scale is off by 100% or more.
    assert rel_err(y.float().numpy(), want.numpy()) < 0.12


def test_loaded_layer_as_module_matches_compressed_tensors():
    path = os.path.join(FIXTURES, "w8a8-fp8-channel")
    model = qlinear.load_checkpoint(path, fuse=False, layers="query", input_dtype="f32", out_dtype="f32")
    q = QuantLinear(model.layers[0])
    expected = read_safetensors(os.path.join(path, "expected.safetensors"))
    y = q(torch.from_numpy(expected[QUERY + ".x"].copy()))
    assert rel_err(y.numpy(), expected[QUERY + ".y_input_qdq"]) < 4e-3


def test_wrong_dtype_and_device_are_errors():
    q = QuantLinear.from_linear(linear(), "w8a8-int8-dynamic")
    with pytest.raises(qlinear.Error, match="input dtype torch.float16, the layer takes torch.float32"):
        q(torch.randn(2, 256, dtype=torch.float16))
    with pytest.raises(qlinear.Error, match="not supported"):
        QuantLinear.from_linear(linear().to(torch.float64), "w8a8-int8-dynamic")


@needs_cuda
def test_cuda_module_matches_cpu_and_runs_on_the_current_stream():
    lin = linear(k=512, n=256, dtype=torch.bfloat16)
    cpu = QuantLinear.from_linear(lin, "w8a8-fp8-channel", device="cpu")
    gpu = QuantLinear.from_linear(lin, "w8a8-fp8-channel", device="cuda")
    assert gpu.layer.platform.kind == "cuda" and gpu.layer.kernel.name != cpu.layer.kernel.name
    x = torch.randn(33, 512, dtype=torch.bfloat16)
    want = cpu(x).float()
    xd = x.cuda()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = torch.empty(33, 256, dtype=torch.bfloat16, device="cuda")
        y = qlinear.apply(gpu.layer, xd, out=out)
        assert y.data_ptr() == out.data_ptr()  # written in place, no copy
    stream.synchronize()
    assert rel_err(y.float().cpu().numpy(), want.numpy()) < 1e-2  # bf16 outputs, f32 accumulation either way
    with pytest.raises(qlinear.Error, match="input on cpu, the layer runs on cuda"):
        gpu(x)


@needs_cuda
def test_cuda_loaded_checkpoint_layers_match_the_cpu():
    path = os.path.join(FIXTURES, "w8a8-fp8-block")
    x = torch.randn(16, 384, dtype=torch.bfloat16)
    for name in ("query", "intermediate"):
        cpu = QuantLinear(qlinear.load_checkpoint(path, fuse=False, layers=name).layers[0])
        gpu = QuantLinear(qlinear.load_checkpoint(path, fuse=False, layers=name).layers[0], device="cuda")
        y = gpu(x.cuda())
        torch.cuda.synchronize()
        assert rel_err(y.float().cpu().numpy(), cpu(x).float().numpy()) < 1e-2
