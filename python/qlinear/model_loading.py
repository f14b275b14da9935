"""A quantized checkpoint into a PyTorch model: each nn.Linear the checkpoint quantizes becomes a QuantLinear
made from the checkpoint's own tensors (what vLLM does when it loads a model).

    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.bfloat16)   # the dense model
    report = load_quantized_linears(model, "Llama-3-8B-FP8-dynamic")                # compressed-tensors dir
    print(report)                                    # what was replaced, what stays dense

Every checkpoint layer must name an nn.Linear of the model with the same [out, in] shape and the same
presence of a bias; everything that does not match is named in one qlinear.Error before any module is
replaced. Linears the checkpoint does not quantize (its `ignore` list: lm_head, ...) are left as they are.
fuse=True runs q/k/v and gate/up as one fused layer (one kernel call) and hands each projection its slice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from . import Error, Layer, load_checkpoint

_DTYPE_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


@dataclass
class LoadReport:
    """What load_quantized_linears did."""

    path: str
    replaced: Dict[str, str] = field(default_factory=dict)   # module name -> scheme (fused: "scheme, fused as X")
    dense: List[str] = field(default_factory=list)           # the model's nn.Linear left as they are

    def __str__(self) -> str:
        return (f"{self.path}: {len(self.replaced)} Linear modules quantized, {len(self.dense)} left dense"
                + (f" ({', '.join(self.dense[:8])}{', ...' if len(self.dense) > 8 else ''})" if self.dense else ""))


class FusedShardLinear(nn.Module):
    """One projection of a fused layer (q of q/k/v, gate of gate/up): the first shard called with an input
    runs the fused layer once; the others called with the same tensor take their slice of that output."""

    def __init__(self, fused: "_FusedOutputs", index: int):
        super().__init__()
        self._fused = [fused]  # a list: not a registered submodule (it is shared by the shards)
        self.index = index
        self.in_features = fused.module.in_features
        self.out_features = fused.widths[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fused[0].output(x, self.index)

    def extra_repr(self) -> str:
        f = self._fused[0]
        return f"shard {self.index} of {f.module.layer.name} [{f.module.extra_repr()}]"


class _FusedOutputs:
    """The fused layer's output for the most recent input, until every shard has taken its slice."""

    def __init__(self, module, widths: List[int]):
        self.module = module
        self.widths = widths
        self.offsets = [sum(widths[:i]) for i in range(len(widths))]
        self._x: Optional[torch.Tensor] = None
        self._version = -1
        self._y: Optional[torch.Tensor] = None
        self._taken: set = set()

    def output(self, x: torch.Tensor, index: int) -> torch.Tensor:
        fresh = x is not self._x or x._version != self._version or index in self._taken
        if fresh:
            self._x, self._version, self._taken = x, x._version, set()
            self._y = self.module(x)
        y = self._y[..., self.offsets[index]:self.offsets[index] + self.widths[index]].contiguous()
        self._taken.add(index)
        if len(self._taken) == len(self.widths):  # every shard served: drop the references
            self._x = self._y = None
        return y


def _parent(model: nn.Module, name: str) -> Tuple[nn.Module, str]:
    parent_name, _, child = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), child


def load_quantized_linears(model: nn.Module, path: str, *, device: Union[str, torch.device, None] = None,
                           dtype: Optional[torch.dtype] = None, fuse: bool = False,
                           **process_options) -> LoadReport:
    """Replaces, in place, every nn.Linear of `model` that the checkpoint at `path` quantizes by a QuantLinear
    built from the checkpoint's tensors; returns a LoadReport.

    device: where the layers run (default: where the model's first Linear is; "cuda" selects CUDA kernels).
    dtype: the activations' dtype (default: the first Linear's weight dtype; float32, bfloat16 or float16).
    fuse: q/k/v and gate/up as one fused layer each, their outputs split back per projection.
    process_options go to QuantLinear (kernel=, disabled=, force=, count_saturated=).
    The model's own weights of those Linears are not read: the checkpoint's are used."""
    from .torch import QuantLinear

    modules = dict(model.named_modules())
    linears = {n: m for n, m in modules.items() if isinstance(m, nn.Linear)}
    if not linears:
        raise Error(f"load_quantized_linears({path}): the model has no nn.Linear modules")
    first = next(iter(linears.values()))
    dtype = dtype or first.weight.dtype
    if dtype not in _DTYPE_NAMES:
        raise Error(f"load_quantized_linears: dtype {dtype} is not supported; expected float32, bfloat16 or float16")
    device = torch.device(device) if device is not None else first.weight.device
    ckpt = load_checkpoint(path, fuse=fuse, input_dtype=_DTYPE_NAMES[dtype], out_dtype=_DTYPE_NAMES[dtype])

    problems: List[str] = []
    plan: List[Tuple[Layer, List[str]]] = []
    for layer in ckpt.layers:
        shards = list(layer.shards) or [layer.name]
        widths = list(layer.config.logical_widths) if len(shards) > 1 else [layer.out_features]
        has_bias = layer.bias is not None
        ok = True
        for shard, rows in zip(shards, widths):
            m = modules.get(shard)
            if m is None:
                problems.append(f"{shard}: in the checkpoint ({layer.scheme.name if layer.scheme else '?'}), not in "
                                "the model")
            elif not isinstance(m, nn.Linear):
                problems.append(f"{shard}: the model's module is a {type(m).__name__}, not an nn.Linear")
            elif (m.out_features, m.in_features) != (rows, layer.in_features):
                problems.append(f"{shard}: the model's Linear is [out={m.out_features}, in={m.in_features}], the "
                                f"checkpoint's weight is [{rows}, {layer.in_features}]")
            elif (m.bias is not None) != has_bias:
                problems.append(f"{shard}: the model's Linear {'has' if m.bias is not None else 'has no'} bias, the "
                                f"checkpoint {'has' if has_bias else 'has none'}")
            else:
                continue
            ok = False
        if ok:
            plan.append((layer, shards))
    if problems:
        raise Error(f"load_quantized_linears({path}): {len(problems)} checkpoint layer(s) do not match the model:\n  "
                    + "\n  ".join(problems))

    report = LoadReport(path)
    for layer, shards in plan:
        module = QuantLinear(layer, device=device, **process_options)
        scheme = layer.scheme.name if layer.scheme else "?"
        if len(shards) == 1:
            parent, child = _parent(model, shards[0])
            setattr(parent, child, module)
            report.replaced[shards[0]] = scheme
            continue
        fused = _FusedOutputs(module, list(layer.config.logical_widths))
        for i, shard in enumerate(shards):
            parent, child = _parent(model, shard)
            setattr(parent, child, FusedShardLinear(fused, i))
            report.replaced[shard] = f"{scheme}, fused as {layer.name}"
    report.dense = [n for n in linears if n not in report.replaced]
    return report
