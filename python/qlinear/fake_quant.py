"""A plain-PyTorch fake-quant reference of every scheme: the same rounding as qlinear's quantizers (weights
and activations quantized and dequantized in float64, then one float64 matmul), written independently of
the library from the formats' definitions. The tests and tools/real_model_table.py put it beside the
kernels: a kernel adds nothing beyond its format's error when the two agree. Each layer's output is rounded
once to its input's dtype, as any Linear of the model returns it.

    from qlinear.fake_quant import fake_quantize_linears
    fake_quantize_linears(model, "w8a8-int8-static", calibration=ranges)   # same arguments as quantize_linears

The rules (each operand's scale in float64, rounded once to float32 where the format stores float32):
  FP8 E4M3   s = f32(amax / 448) per tensor / channel / 128x128 block; activations per token
             max(s, 1/(448*512)), per 1x128 group f32(max(amax, 1e-10) / 448), static f32(amax_range) / 448;
             the last block or group of a dimension that is not a multiple of 128 takes what is left
  INT8       s = f32(amax / 127) (1 for zeros); asymmetric static s = (max-min)/255, zp = rne(-128 - min/s)
  MX         e = ceil(log2(amax / elem_max)) per 1x32 (clamped to [-127, 127]), value = rne_grid(x / 2^e) 2^e;
             dynamic FP6/FP4 activations take Quark's "even" rule: the f32 amax's bit pattern plus 2^(22 - m)
             (m: the element's mantissa bits), e = its exponent field - 127 - emax(elem) (-127 for field 0)
  NVFP4      g = f32(448*6 / amax) per tensor (per call when dynamic), block scale sf = E4M3(amax16 / 6 * g),
             value = E2M1(x * g / sf) * sf / g
Element rounding is to nearest, ties to even, saturating at the format's largest finite value.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Optional, Tuple, Union

import numpy as np
import torch
from torch import nn

from . import Error, find_scheme, static_activation_scales, check_range
from .calibration import Calibration, calibrate

# (emin, mantissa bits, largest finite) of each element grid
_GRIDS = {"e4m3": (-6, 3, 448.0), "e3m2": (-2, 2, 28.0), "e2m3": (0, 3, 7.5), "e2m1": (0, 1, 6.0)}
_ELEM = {"f8e4m3fn": "e4m3", "f6e3m2fn": "e3m2", "f6e2m3fn": "e2m3", "f4e2m1fn": "e2m1"}


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32).to(torch.float64)


def grid_round(t: torch.Tensor, grid: str) -> torch.Tensor:
    """float64 t rounded to the element grid (nearest, ties to even, saturating)."""
    emin, mbits, top = _GRIDS[grid]
    a = t.abs()
    e = torch.floor(torch.log2(torch.where(a > 0, a, torch.ones_like(a))))
    # log2 may be off by one ulp near powers of two: fix e so that 2^e <= a < 2^(e+1)
    e = torch.where(torch.exp2(e) > a, e - 1, e)
    e = torch.where(torch.exp2(e + 1) <= a, e + 1, e)
    e = torch.clamp(e, min=emin)
    step = torch.exp2(e - mbits)
    r = torch.round(a / step) * step
    r = torch.clamp(r, max=top)
    return torch.where(a > 0, torch.copysign(r, t), t)


def _fp8(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return grid_round(x / s, "e4m3") * s


def _int8(x: torch.Tensor, s: torch.Tensor, zp: float = 0.0) -> torch.Tensor:
    return (torch.clamp(torch.round(x / s) + zp, -128, 127) - zp) * s


def _rows_amax(x: torch.Tensor) -> torch.Tensor:
    return x.abs().amax(dim=-1, keepdim=True)


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    """[..., K] -> [..., K/size, size] (K a multiple of size)."""
    return x.reshape(*x.shape[:-1], x.shape[-1] // size, size)


def _mx(x: torch.Tensor, grid: str) -> torch.Tensor:
    top = _GRIDS[grid][2]
    b = _blocks(x, 32)
    amax = b.abs().amax(dim=-1, keepdim=True)
    e = torch.ceil(torch.log2(torch.where(amax > 0, amax / top, torch.ones_like(amax))))
    e = torch.where(amax / torch.exp2(e) > top, e + 1, e)
    e = torch.where((amax > 0) & (amax / torch.exp2(e - 1) <= top), e - 1, e)
    e = torch.where(amax > 0, torch.clamp(e, -127, 127), torch.full_like(e, -127.0))
    return (grid_round(b / torch.exp2(e), grid) * torch.exp2(e)).reshape(x.shape)


# (mantissa bits, emax) of the FP6/FP4 elements, for Quark's "even" shared-exponent rule
_EVEN = {"e2m1": (1, 2), "e2m3": (3, 2), "e3m2": (2, 4)}


def _mx_even(x: torch.Tensor, grid: str) -> torch.Tensor:
    m, emax = _EVEN[grid]
    b = _blocks(x, 32)
    amax = b.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    bits = amax.view(torch.int32).to(torch.int64) + (1 << (22 - m))
    field = (bits >> 23) & 0xFF
    e = torch.where(field == 0, torch.full_like(field, -127), torch.clamp(field - 127 - emax, -127, 127))
    e = e.to(torch.float64)
    return (grid_round(b / torch.exp2(e), grid) * torch.exp2(e)).reshape(x.shape)


def _nvfp4_global(amax: float) -> float:
    if amax == 0:
        return 1.0
    return float(np.float32(448.0 * 6.0 / amax))


def _nvfp4(x: torch.Tensor, g: float) -> torch.Tensor:
    b = _blocks(x, 16)
    amax = b.abs().amax(dim=-1, keepdim=True)
    sf = grid_round(amax / 6.0 * g, "e4m3")
    q = torch.where(sf > 0, grid_round(b * g / torch.where(sf > 0, sf, torch.ones_like(sf)), "e2m1"),
                    torch.zeros_like(b))
    return (q * sf / g).reshape(x.shape)


def fake_quant_weight(w: torch.Tensor, scheme: str) -> torch.Tensor:
    """The dequantized float64 weight [N, K] of `scheme` (one tensor: unfused)."""
    w = w.detach().to(torch.float64).cpu()
    key = find_scheme(scheme).weight_key
    if key.dtype == "f8e4m3fn" and key.scale_dtype == "f32":
        if key.group == "per_tensor":
            return _fp8(w, _f32(w.abs().max() / 448.0))
        if key.group == "per_channel":
            return _fp8(w, _f32(_rows_amax(w) / 448.0))
        n, k = w.shape
        out = torch.empty_like(w)
        for r in range(0, n, 128):
            for c in range(0, k, 128):
                blk = w[r:r + 128, c:c + 128]
                out[r:r + 128, c:c + 128] = _fp8(blk, _f32(blk.abs().max() / 448.0))
        return out
    if key.dtype == "i8":
        s = _f32(_rows_amax(w) / 127.0) if key.group == "per_channel" else _f32(w.abs().max() / 127.0)
        return _int8(w, torch.where(s > 0, s, torch.ones_like(s)))
    if key.scale_dtype.startswith("e8m0"):
        return _mx(w, _ELEM[key.dtype])
    if key.dtype == "f4e2m1fn":
        return _nvfp4(w, _nvfp4_global(float(w.abs().max())))
    raise Error(f"fake_quant_weight: no reference for weight key {key.name}")


def static_params(scheme: str, input_range: Optional[Tuple[float, float]]):
    """The static activation parameters the library stores for `scheme` and a range: (scale, zero point) or
    the NVFP4 global scale; None for dynamic activations (and NVFP4 without a range)."""
    stored = static_activation_scales(scheme)
    if not stored or input_range is None:
        if stored and stored != "input_global_scale":
            raise Error(f"{scheme} has static activation scales ({stored}): give input_range / calibration")
        return None
    lo, hi = check_range(scheme, *input_range)
    amax = np.float32(max(abs(lo), abs(hi)))
    if stored == "input_global_scale":
        return float(np.float32(448.0) * np.float32(6.0) / amax)
    key = find_scheme(scheme).activation_key
    if key.dtype == "i8" and not key.symmetric:
        s = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255.0))
        return float(s), float(np.rint(np.float32(-128.0) - np.float32(lo) / s))
    qmax = np.float32(127.0 if key.dtype == "i8" else 448.0)
    return float(amax / qmax), 0.0


def fake_quant_activation(x: torch.Tensor, scheme: str, static=None) -> torch.Tensor:
    """x [..., K] quantized and dequantized (float64) as `scheme`'s activations; static: static_params()."""
    x = x.detach().to(torch.float64)
    s = find_scheme(scheme)
    key = s.activation_key
    if key is None:
        return x
    if s.family == "nvfp4":
        g = static if static is not None else _nvfp4_global(float(x.abs().max()) if x.numel() else 0.0)
        return _nvfp4(x, g)
    if key.scale_dtype.startswith("e8m0"):
        grid = _ELEM[key.dtype]
        return _mx_even(x, grid) if grid in _EVEN and not key.is_static else _mx(x, grid)
    if key.is_static:
        scale, zp = static
        return _fp8(x, torch.tensor(scale, dtype=torch.float64)) if key.dtype == "f8e4m3fn" else \
            _int8(x, torch.tensor(scale, dtype=torch.float64), zp)
    if key.dtype == "i8":
        sc = _f32(_rows_amax(x) / 127.0)
        return _int8(x, torch.where(sc > 0, sc, torch.ones_like(sc)))
    if key.group == "per_token":
        return _fp8(x, torch.clamp(_f32(_rows_amax(x) / 448.0), min=float(np.float32(1.0 / (448.0 * 512.0)))))
    if key.group == "1x128":
        # the last group of a row takes the K % 128 elements left (zeros pad it: they change no maximum)
        k = x.shape[-1]
        xp = torch.nn.functional.pad(x, (0, -k % 128))
        b = _blocks(xp, 128)
        sc = _f32(torch.clamp(b.abs().amax(dim=-1, keepdim=True), min=float(np.float32(1e-10))) / 448.0)
        return _fp8(b, sc).reshape(xp.shape)[..., :k]
    raise Error(f"fake_quant_activation: no reference for activation key {key.name}")


class FakeQuantLinear(nn.Module):
    """nn.Linear with `scheme`'s weight and activation rounding done in float64 PyTorch (the reference).

    forward(x): x as it arrives (in a BF16 model: the BF16 values every kernel also sees) quantized and
    dequantized in float64 by the scheme's activation rule, one float64 matmul with the dequantized weight,
    the bias added in float64, then one rounding to x's dtype: the module hands the model what an exact
    kernel of the scheme would. matmul_dtype=torch.float32 rounds both dequantized operands to float32 and
    accumulates in float32 instead (a perturbation of the size of a kernel's summation error, to measure how
    far a model's metrics move from it alone)."""

    def __init__(self, linear: nn.Linear, scheme: str, input_range: Optional[Tuple[float, float]] = None,
                 matmul_dtype: torch.dtype = torch.float64):
        super().__init__()
        self.scheme = scheme
        self.matmul_dtype = matmul_dtype
        device = linear.weight.device
        self.register_buffer("weight", fake_quant_weight(linear.weight, scheme).to(device))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(torch.float64))
        self.static = static_params(scheme, input_range)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_quantized(self.quantize_input(x), x)

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., K] -> the float64 [rows, K] values the scheme's activation quantization gives."""
        return fake_quant_activation(x.reshape(-1, x.shape[-1]), self.scheme, self.static)

    def forward_quantized(self, xq: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """forward(x) from quantize_input(x)."""
        xq = xq.to(self.weight.device)
        if self.matmul_dtype == torch.float64:
            y = xq @ self.weight.T
        else:
            y = (xq.to(self.matmul_dtype) @ self.weight.to(self.matmul_dtype).T).to(torch.float64)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, scheme={self.scheme} (reference)"


def fake_quantize_linears(module: nn.Module, scheme: str, *,
                          include: Callable[[str, nn.Linear], bool] = lambda name, linear: True,
                          calibration: Union[Calibration, Iterable[Any], None] = None,
                          matmul_dtype: torch.dtype = torch.float64) -> nn.Module:
    """quantize_linears' reference: every nn.Linear (include(name, linear) true) becomes a FakeQuantLinear
    (matmul_dtype: see FakeQuantLinear)."""
    if calibration is not None and not isinstance(calibration, Calibration):
        calibration = calibrate(module, calibration)
    targets = []
    for parent_name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, nn.Linear) and include(full, child):
                targets.append((parent, child_name, full, child))
    stored = static_activation_scales(scheme)
    for parent, child_name, full, child in targets:
        rng = calibration.range_of(full) if calibration is not None and stored else None
        setattr(parent, child_name, FakeQuantLinear(child, scheme, rng, matmul_dtype=matmul_dtype))
    return module
