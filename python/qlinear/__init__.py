"""qlinear from Python: quantized linear layers of LLM checkpoints on x86 CPUs and NVIDIA Hopper GPUs.

    import numpy as np, qlinear
    model = qlinear.load_checkpoint("tests/fixtures/w8a8-fp8-channel", input_dtype="f32", out_dtype="f32")
    layer = model.layers[0]
    print(layer.explain())          # every candidate kernel with its verdict
    layer.process()                 # selects the first kernel that fits and prepares the weights, once
    y = layer(np.ones((4, layer.in_features), np.float32))

Arrays cross through DLPack without copies when they are C-contiguous: NumPy arrays (float32, float16,
bf16 as ml_dtypes.bfloat16 or as uint16 bit patterns) and PyTorch tensors on the CPU or a CUDA device
(qlinear.torch has the nn.Module). Every error of the library is raised as qlinear.Error with its message.
Docs: docs/api/python.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

from ._qlinear import (
    Candidate,
    Error,
    Kernel,
    Layer,
    LinearConfig,
    Platform,
    QuantKey,
    Scheme,
    Selection,
    Verdict,
    _load_checkpoint,
    _quantize_layer,
    built_with_cuda,
    cpu_threads,
    explain_selection,
    find_kernel,
    find_scheme,
    formats,
    kernels,
    make_config,
    named_keys,
    priority_list,
    schemes,
    select_kernel,
    set_cpu_threads,
)

__version__ = "0.1.0"

__all__ = [
    "Candidate", "Error", "Kernel", "Layer", "LinearConfig", "Model", "Platform", "QuantKey", "Scheme",
    "Selection", "Verdict", "apply", "built_with_cuda", "explain_selection", "find_kernel", "find_scheme",
    "formats", "kernels", "load_checkpoint", "make_config", "named_keys", "priority_list", "quantize_layer",
    "schemes", "select_kernel", "static_activation_scales", "cpu_threads", "set_cpu_threads",
]


@dataclass
class Model:
    """A loaded checkpoint: its quantized linear layers (fused and sliced as vLLM does) and the rest."""

    path: str
    quant_method: str                 # "compressed-tensors" or "quark"
    layers: List[Layer]
    unquantized: List[str] = field(default_factory=list)  # linear modules the config leaves dense

    def layer(self, name: str) -> Layer:
        for l in self.layers:
            if l.name == name:
                return l
        raise Error(f"{self.path}: no quantized layer named '{name}'; layers: "
                    + ", ".join(l.name for l in self.layers))


def load_checkpoint(path: str, *, tp_rank: int = 0, tp_size: int = 1, layers: str = "", fuse: bool = True,
                    input_dtype: str = "bf16", out_dtype: str = "bf16") -> Model:
    """Loads a compressed-tensors or Quark checkpoint (a directory with config.json and safetensors files).

    layers: a regex selecting layers by their (fused) name; input_dtype / out_dtype: the activation and output
    dtypes the layers will be applied with ("f32", "bf16", "f16"): kernels are chosen for them.
    """
    loaded, method, unquantized = _load_checkpoint(str(path), tp_rank, tp_size, layers, fuse, input_dtype, out_dtype)
    return Model(str(path), method, loaded, list(unquantized))


def check_range(where: str, lo: float, hi: float):
    """(min, max) as static scales need it: finite, widened to include 0, not empty."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise Error(f"{where}: input range ({lo}, {hi}) must be finite with min <= max")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo == 0.0:
        raise Error(f"{where}: input range ({lo}, {hi}) is empty (every observed input was 0); static scales "
                    "need a nonzero range")
    return lo, hi


def static_activation_scales(scheme: str) -> str:
    """What static activation scales `scheme` stores: "" (none), "input_scale", "input_scale+zero_point" or
    "input_global_scale" (NVFP4)."""
    s = find_scheme(scheme)
    ak = s.activation_key
    if ak is None:
        return ""
    if s.family == "nvfp4":
        return "input_global_scale"
    if ak.is_static:
        return "input_scale" if ak.symmetric else "input_scale+zero_point"
    return ""


def quantize_layer(name: str, scheme: str, weight: Any, *, bias: Any = None, input_min: Optional[float] = None,
                   input_max: Optional[float] = None, mx_rule: str = "ceil_over_max",
                   logical_widths: Sequence[int] = (), input_dtype: str = "bf16", out_dtype: str = "bf16") -> Layer:
    """Quantizes a dense weight [N, K] (float32/float64/float16/bf16, host) into a layer of `scheme`.

    input_min, input_max: the activations' observed range (qlinear.torch.calibrate observes it). Schemes with
    static activation scales (w8a8-fp8-tensor, w8a8-int8-static, w8a8-int8-static-asym, w4a8-mxfp4-fp8) need
    it and are refused without it: no range is assumed. NVFP4 (w4a4-nvfp4) takes its input global scale from
    it; without a range each call computes the global scale from its own activation (key kNvfp4DynamicGlobal).
    mx_rule is the weights' MX shared-exponent rule ("ceil_over_max", "floor_log2", "ocp", "quark_even";
    dynamic MX activations follow their key's rule, docs/FORMATS.md); logical_widths splits N into fused shards.
    """
    stored = static_activation_scales(scheme)
    if (input_min is None) != (input_max is None):
        raise Error(f"quantize_layer {name}: give both input_min and input_max (the activations' range), or neither")
    dynamic_global = False
    if input_min is None:
        if stored == "input_global_scale":
            dynamic_global = True
            input_min, input_max = -1.0, 1.0  # unused
        elif stored:
            raise Error(f"quantize_layer {name}: scheme {scheme} has static activation scales ({stored}), made from "
                        "the activations' range: pass input_min= and input_max= (QuantLinear.from_linear: "
                        "input_range=; quantize_linears: calibration=, see qlinear.torch.calibrate), or use a "
                        "dynamic scheme (w8a8-fp8-channel, w8a8-int8-dynamic)")
        else:
            input_min, input_max = -1.0, 1.0  # unused: no static activation scale
    elif stored:
        input_min, input_max = check_range(f"quantize_layer {name}", input_min, input_max)
    weight = _host_contiguous(weight)
    if bias is not None:
        bias = _host_contiguous(bias)
    return _quantize_layer(name, scheme, weight, bias, float(input_min), float(input_max), dynamic_global, mx_rule,
                           [int(w) for w in logical_widths], input_dtype, out_dtype)


# ---- apply ------------------------------------------------------------------------------------------------

_KEEP_BIAS = object()


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_cuda")


def _host_contiguous(a: Any) -> Any:
    if _is_torch(a):
        return a.detach().contiguous()
    import numpy as np
    a = np.ascontiguousarray(a)
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def _numpy_dtype(name: str):
    import numpy as np
    return {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[name]


def _bf16_view(a):
    """uint16 bf16 bits as ml_dtypes.bfloat16 when ml_dtypes is installed (else the bits as they are)."""
    try:
        import ml_dtypes
    except ImportError:
        return a
    return a.view(ml_dtypes.bfloat16)


def apply(layer: Layer, x: Any, *, out: Any = None, bias: Any = _KEEP_BIAS, row_amax: Any = None) -> Any:
    """y[..., N] = x[..., K] W^T (+ bias) with the kernel that processed `layer`.

    x: a NumPy array or a PyTorch tensor (CPU, or the CUDA device the layer was processed for); leading
    dimensions are batch dimensions. The result is of the same kind, in the layer's out_dtype (NumPy bf16:
    ml_dtypes.bfloat16 when installed, else uint16 bits). bias: omitted uses the layer's own; None uses none;
    an array replaces it. out: an array to write into (C-contiguous [..., N]). PyTorch CUDA tensors run on
    PyTorch's current stream, without synchronizing. row_amax: f32 [rows of x] on x's device, for layers with
    dynamic per-token FP8 / INT8 activations: each row is quantized with this maximum instead of its own (a
    tensor-parallel row slice and its whole row's maximum; qlinear.distributed).
    """
    k, n = layer.config.k, layer.config.n
    shape = tuple(x.shape)
    if len(shape) == 0 or shape[-1] != k:
        raise Error(f"apply to layer {layer.name}: x has shape {list(shape)}, expected [..., {k}] (K={k})")
    lead = shape[:-1]
    use_layer_bias = bias is _KEEP_BIAS
    if _is_torch(x):
        import torch
        x2 = x.detach().reshape(-1, k)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        tdtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[layer.config.out_dtype]
        y = out if out is not None else torch.empty((*lead, n), dtype=tdtype, device=x.device)
        if tuple(y.shape) != (*lead, n) or not y.is_contiguous():
            raise Error(f"apply to layer {layer.name}: out must be a contiguous [{', '.join(map(str, (*lead, n)))}]"
                        f" tensor, got shape {list(y.shape)}{'' if y.is_contiguous() else ' (not contiguous)'}")
        stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else None
        b = None if use_layer_bias or bias is None else bias.detach().contiguous()
        a = None if row_amax is None else row_amax.detach().reshape(-1).to(torch.float32).contiguous()
        layer._apply_into(x2, y.view(-1, n), bias=b, use_layer_bias=use_layer_bias, stream=stream, row_amax=a)
        return y
    import numpy as np
    x2 = _host_contiguous(np.asarray(x)).reshape(-1, k)
    if out is None:
        y = np.empty((*lead, n), dtype=_numpy_dtype(layer.config.out_dtype))
        ret = y
    else:
        if tuple(out.shape) != (*lead, n) or not out.flags.c_contiguous:
            raise Error(f"apply to layer {layer.name}: out must be a C-contiguous [{', '.join(map(str, (*lead, n)))}]"
                        f" array, got shape {list(out.shape)}{'' if out.flags.c_contiguous else ' (not contiguous)'}")
        ret = out
        y = out.view(np.uint16) if out.dtype.name == "bfloat16" else out
    b = None if use_layer_bias or bias is None else _host_contiguous(bias)
    a = None if row_amax is None else np.ascontiguousarray(np.asarray(row_amax, dtype=np.float32).reshape(-1))
    layer._apply_into(x2, y.reshape(-1, n), bias=b, use_layer_bias=use_layer_bias, row_amax=a)
    if out is None and layer.config.out_dtype == "bf16":
        return _bf16_view(ret)
    return ret


Layer.apply = apply
Layer.__call__ = apply
