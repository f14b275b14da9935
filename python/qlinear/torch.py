"""qlinear.torch: QuantLinear, a drop-in replacement for torch.nn.Linear that runs a qlinear kernel.

    from qlinear.torch import QuantLinear, quantize_linears
    q = QuantLinear.from_linear(model.fc, "w8a8-int8-dynamic")        # quantize an nn.Linear's weight
    q = QuantLinear(qlinear.load_checkpoint(path).layer("...q_proj"))  # or wrap a loaded layer
    quantize_linears(model, "w8a16-fp8")                               # replace every nn.Linear in place

The layer is processed for one device when the module is built (a CUDA device selects among the CUDA
kernels); forward() takes tensors on that device in the layer's input dtype, runs on PyTorch's current CUDA
stream, and returns a new tensor in the layer's out dtype. The module holds no torch parameters: its weights
are qlinear's (quantized, in the kernel's layout), so it is for inference, not training.
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch
from torch import nn

from . import Error, Layer, Platform, apply, quantize_layer

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
                 disabled=(), force: str = ""):
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

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: str, *, device: Union[str, torch.device, None] = None,
                    dtype: Optional[torch.dtype] = None, name: str = "", input_min: float = -4.0,
                    input_max: float = 4.0, **process_options) -> "QuantLinear":
        """Quantizes `linear`'s weight into `scheme`. dtype: the activations' dtype (default: the weight's);
        device: where it runs (default: the weight's). Static activation scales come from
        [input_min, input_max]."""
        dtype = dtype or linear.weight.dtype
        if dtype not in _QL_DTYPES:
            raise Error(f"QuantLinear.from_linear: dtype {dtype} is not supported; expected float32, bfloat16 or "
                        "float16")
        weight = linear.weight.detach().to(device="cpu", dtype=torch.float32).contiguous()
        bias = None
        if linear.bias is not None:
            bias = linear.bias.detach().to(device="cpu", dtype=torch.float32).contiguous()
        layer = quantize_layer(name or "linear", scheme, weight, bias=bias, input_min=input_min,
                               input_max=input_max, input_dtype=_QL_DTYPES[dtype], out_dtype=_QL_DTYPES[dtype])
        return cls(layer, device=device if device is not None else linear.weight.device, **process_options)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device != self.device:
            raise Error(f"QuantLinear({self.layer.name}): input on {x.device}, the layer runs on {self.device} "
                        f"(kernel {self.layer.kernel.name})")
        if x.dtype != self.input_dtype:
            raise Error(f"QuantLinear({self.layer.name}): input dtype {x.dtype}, the layer takes {self.input_dtype}")
        return apply(self.layer, x)

    def extra_repr(self) -> str:
        scheme = self.layer.scheme.name if self.layer.scheme is not None else "?"
        return (f"in_features={self.in_features}, out_features={self.out_features}, scheme={scheme}, "
                f"kernel={self.layer.kernel.name}, device={self.device}")


def quantize_linears(module: nn.Module, scheme: str, *,
                     include: Callable[[str, nn.Linear], bool] = lambda name, linear: True,
                     **options) -> nn.Module:
    """Replaces every nn.Linear of `module` (for which include(name, linear) is true) by a QuantLinear of
    `scheme`, in place; returns `module`. options go to QuantLinear.from_linear."""
    for parent_name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, nn.Linear) and include(full, child):
                setattr(parent, child_name, QuantLinear.from_linear(child, scheme, name=full, **options))
    return module
