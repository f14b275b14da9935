"""Activation ranges observed on sample inputs, for schemes with static activation scales.

    from qlinear.torch import calibrate, quantize_linears
    with calibrate(model) as ranges:           # forward pre-hooks on every nn.Linear
        for batch in samples:
            model(batch)
    quantize_linears(model, "w8a8-int8-static", calibration=ranges)
    # or in one call: quantize_linears(model, "w8a8-fp8-tensor", calibration=samples)

The observer is compressed-tensors' min-max observer without a moving average (llm-compressor's
"static_minmax"): for each module, the running minimum and maximum of every element of its input over all
calibration batches, the range then widened to include 0 (as compressed-tensors' calculate_qparams does).
The static scales are made from that range as `qlinear quantize --input-range` makes them: symmetric FP8
amax/448, symmetric INT8 amax/127, asymmetric INT8 (max-min)/255 with zero point -128 - round(min/scale),
NVFP4's input global scale 448*6/amax. Inputs outside the observed range later saturate; QuantLinear's
count_saturated=True counts them.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch
from torch import nn

from . import Error

Range = Tuple[float, float]


class Calibration:
    """{module name: (min, max)} of each observed nn.Linear's input; a context manager while observing."""

    def __init__(self, model: nn.Module, include: Callable[[str, nn.Module], bool] = lambda name, m: True):
        self.model = model
        self.include = include
        self.ranges: Dict[str, Range] = {}
        self.batches = 0
        self._hooks = []

    def _observe(self, name: str):
        def hook(module, args):
            if not args or not torch.is_tensor(args[0]):
                return
            x = args[0].detach()
            if x.numel() == 0:
                return
            if not torch.isfinite(x).all():
                raise Error(f"calibrate: the input of {name} holds Inf or NaN; static scales need finite inputs")
            lo, hi = torch.aminmax(x.float())
            lo, hi = float(lo), float(hi)
            if name in self.ranges:
                old_lo, old_hi = self.ranges[name]
                lo, hi = min(lo, old_lo), max(hi, old_hi)
            self.ranges[name] = (lo, hi)
        return hook

    def __enter__(self) -> "Calibration":
        for name, module in self.model.named_modules():
            if isinstance(module, nn.Linear) and self.include(name, module):
                self._hooks.append(module.register_forward_pre_hook(self._observe(name)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def run(self, samples: Iterable[Any]) -> "Calibration":
        """Runs every sample through the model (no grad): a tensor as model(x), a tuple as model(*x), a dict
        as model(**x)."""
        with self, torch.no_grad():
            for s in samples:
                if isinstance(s, dict):
                    self.model(**s)
                elif isinstance(s, (tuple, list)):
                    self.model(*s)
                else:
                    self.model(s)
                self.batches += 1
        return self

    def range_of(self, name: str) -> Range:
        """The observed (min, max) of module `name`'s input, widened to include 0."""
        if name not in self.ranges:
            raise Error(f"calibration has no range for {name}: it was not called while the samples ran "
                        f"({len(self.ranges)} modules observed); run inputs that reach it, or give its range")
        lo, hi = self.ranges[name]
        return min(lo, 0.0), max(hi, 0.0)

    def __repr__(self) -> str:
        return f"<Calibration {len(self.ranges)} modules>"


def calibrate(model: nn.Module, samples: Optional[Iterable[Any]] = None, *,
              include: Callable[[str, nn.Module], bool] = lambda name, m: True) -> Calibration:
    """Observes the input range of every nn.Linear of `model` (for which include(name, module) is true).

    With samples: runs them (model(x), model(*x) or model(**x), under no_grad) and returns the Calibration.
    Without: returns a Calibration to use as a context manager around your own forward passes."""
    cal = Calibration(model, include)
    return cal.run(samples) if samples is not None else cal
