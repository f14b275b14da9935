"""qlinear.torch: QuantLinear, a drop-in replacement for torch.nn.Linear that runs a qlinear kernel.

    from qlinear.torch import QuantLinear, quantize_linears, calibrate, load_quantized_linears
    q = QuantLinear.from_linear(model.fc, "w8a8-int8-dynamic")        # quantize an nn.Linear's weight
    q = QuantLinear(qlinear.load_checkpoint(path).layer("...q_proj"))  # or wrap a loaded layer
    quantize_linears(model, "w8a16-fp8")                               # replace every nn.Linear in place
    quantize_linears(model, "w8a8-fp8-tensor", calibration=samples)    # static scales from observed ranges
    load_quantized_linears(model, checkpoint_dir)                      # a compressed-tensors checkpoint's layers

The layer is processed for one device when the module is built (a CUDA device selects among the CUDA
kernels); forward() takes tensors on that device in the layer's input dtype, runs on PyTorch's current CUDA
stream, and returns a new tensor in the layer's out dtype. The module holds no torch parameters: its weights
are qlinear's (quantized, in the kernel's layout), so it is for inference, not training.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Tuple, Union

import torch
from torch import nn

from . import Error, Layer, Platform, apply, quantize_layer, static_activation_scales
from .calibration import Calibration, calibrate

_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
_QL_DTYPES = {v: k for k, v in _TORCH_DTYPES.items()}


def _platform_for(device: torch.device) -> Platform:
    if device.type == "cpu":
        return Platform.host_cpu()
    if device.type == "cuda":
        return Platform.cuda(device.index if device.index is not None else torch.cuda.current_device())
    raise Error(f"QuantLinear: device {device} is not supported; expected cpu or cuda")


class QuantLinear(nn.Module):
    """y = x W^T + b with W quantized, computed by the qlinear kernel chosen for `device`."""

    def __init__(self, layer: Layer, *, device: Union[str, torch.device, None] = None, kernel: Optional[str] = None,
                 disabled=(), force: str = "", count_saturated: bool = False):
        super().__init__()
        self.layer = layer
        self.in_features = layer.in_features
        self.out_features = layer.out_features
        self.device = torch.device(device if device is not None else "cpu")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        platform = _platform_for(self.device)
        if layer.kernel is None:
            layer.process(kernel=kernel, platform=platform, disabled=list(disabled), force=force)
        if torch.device(layer.device) != self.device:
            # e.g. a CUDA platform whose only kernel for the family is the (host) reference kernel
            raise Error(f"QuantLinear: layer {layer.name} is processed by {layer.kernel.name}, which runs on "
                        f"{layer.device}, not on {self.device}; the candidates for {platform}:\n"
                        + layer.explain(platform).explain())
        self.input_dtype = _TORCH_DTYPES[layer.config.input_dtype]
        self.out_dtype = _TORCH_DTYPES[layer.config.out_dtype]
        # Off by default (it reads every input once more): inputs outside the range the static scales
        # represent, which saturate.
        self.saturated_inputs = 0
        self.observed_inputs = 0
        self._static_range = static_input_range(layer) if count_saturated else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: str, *, device: Union[str, torch.device, None] = None,
                    dtype: Optional[torch.dtype] = None, name: str = "",
                    input_range: Optional[Tuple[float, float]] = None, count_saturated: bool = False,
                    **process_options) -> "QuantLinear":
        """Quantizes `linear`'s weight into `scheme`. dtype: the activations' dtype (default: the weight's);
        device: where it runs (default: the weight's).

        input_range: (min, max) of the activations this layer will see, from calibration (see calibrate).
        Schemes with static activation scales (w8a8-fp8-tensor, w8a8-int8-static[-asym]) are refused without
        it; w4a4-nvfp4 without it computes its input global scale per call (dynamic), with it stores a static
        one. count_saturated: count the inputs beyond the static range (saturated_inputs)."""
        dtype = dtype or linear.weight.dtype
        if dtype not in _QL_DTYPES:
            raise Error(f"QuantLinear.from_linear: dtype {dtype} is not supported; expected float32, bfloat16 or "
                        "float16")
        weight = linear.weight.detach().to(device="cpu", dtype=torch.float32).contiguous()
        bias = None
        if linear.bias is not None:
            bias = linear.bias.detach().to(device="cpu", dtype=torch.float32).contiguous()
        lo, hi = input_range if input_range is not None else (None, None)
        layer = quantize_layer(name or "linear", scheme, weight, bias=bias, input_min=lo, input_max=hi,
                               input_dtype=_QL_DTYPES[dtype], out_dtype=_QL_DTYPES[dtype])
        return cls(layer, device=device if device is not None else linear.weight.device,
                   count_saturated=count_saturated, **process_options)

    @property
    def input_scales(self) -> str:
        """"static" (the layer stores activation scales made from a range), "dynamic" (every call computes
        them) or "none" (weight-only)."""
        return _input_scales(self.layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._static_range is not None:
            lo, hi = self._static_range
            self.saturated_inputs += int(((x < lo) | (x > hi)).sum())
            self.observed_inputs += x.numel()
        if x.device != self.device:
            raise Error(f"QuantLinear({self.layer.name}): input on {x.device}, the layer runs on {self.device} "
                        f"(kernel {self.layer.kernel.name})")
        if x.dtype != self.input_dtype:
            raise Error(f"QuantLinear({self.layer.name}): input dtype {x.dtype}, the layer takes {self.input_dtype}")
        return apply(self.layer, x)

    def extra_repr(self) -> str:
        scheme = self.layer.scheme.name if self.layer.scheme is not None else "?"
        return (f"in_features={self.in_features}, out_features={self.out_features}, scheme={scheme}, "
                f"input_scales={self.input_scales}, kernel={self.layer.kernel.name}, device={self.device}")


def quantize_linears(module: nn.Module, scheme: str, *,
                     include: Callable[[str, nn.Linear], bool] = lambda name, linear: True,
                     calibration: Union[Calibration, Iterable[Any], None] = None, **options) -> nn.Module:
    """Replaces every nn.Linear of `module` (for which include(name, linear) is true) by a QuantLinear of
    `scheme`, in place; returns `module`. options go to QuantLinear.from_linear.

    calibration: a Calibration (see calibrate) or sample inputs to make one from (run through `module` before
    any layer is replaced). Each layer's static activation scales come from its own observed input range.
    Schemes with static activation scales are refused without it; w4a4-nvfp4 without it computes its input
    global scale per call."""
    if calibration is not None and not isinstance(calibration, Calibration):
        calibration = calibrate(module, calibration, include=lambda name, m: isinstance(m, nn.Linear))
    stored = static_activation_scales(scheme)
    if stored and stored != "input_global_scale" and calibration is None and "input_range" not in options:
        raise Error(f"quantize_linears: scheme {scheme} has static activation scales ({stored}), made from each "
                    "layer's observed input range: pass calibration= (sample inputs, or a Calibration from "
                    "qlinear.torch.calibrate), or use a dynamic scheme (w8a8-fp8-channel, w8a8-int8-dynamic)")
    targets = []
    for parent_name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, nn.Linear) and include(full, child):
                targets.append((parent, child_name, full, child))
    for parent, child_name, full, child in targets:
        layer_options = dict(options)
        if calibration is not None and stored:
            layer_options["input_range"] = calibration.range_of(full)
        setattr(parent, child_name, QuantLinear.from_linear(child, scheme, name=full, **layer_options))
    return module


def _input_scales(layer: Layer) -> str:
    key = layer.config.activation_key
    if key is None:
        return "none"
    if layer.config.family == "nvfp4":
        return "static" if "input_global_scale" in layer.param_names() else "dynamic"
    return "static" if key.is_static else "dynamic"


def static_input_range(layer: Layer) -> Optional[Tuple[float, float]]:
    """The (min, max) of inputs a layer's static activation scales represent without saturating, or None
    when its activation scales are dynamic (or it is weight-only). Fused shards use the largest scale."""
    if _input_scales(layer) != "static":
        return None
    import numpy as np
    key = layer.config.activation_key
    if layer.config.family == "nvfp4":
        amax = 448.0 * 6.0 / float(np.max(layer.param("input_global_scale")))
        return -amax, amax
    s = float(np.max(layer.param("input_scale")))
    if key.dtype == "i8":
        if key.symmetric:
            return -127.0 * s, 127.0 * s
        zp = float(np.asarray(layer.param("input_zero_point")).reshape(-1)[0])
        return (-128.0 - zp) * s, (127.0 - zp) * s
    return -448.0 * s, 448.0 * s


from .model_loading import FusedShardLinear, LoadReport, load_quantized_linears  # noqa: E402  (uses QuantLinear)

__all__ = ["Calibration", "FusedShardLinear", "LoadReport", "QuantLinear", "calibrate", "load_quantized_linears",
           "quantize_linears", "static_input_range"]
