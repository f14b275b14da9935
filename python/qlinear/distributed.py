"""qlinear.distributed: column- and row-parallel QuantLinear over a torch.distributed process group, one
process per device, the way engines run tensor parallelism (torchrun --nproc-per-node N).

    import torch.distributed as dist
    from qlinear.distributed import load_parallel_linears
    dist.init_process_group("nccl")                      # or "gloo" for CPU processes
    layers = load_parallel_linears(checkpoint_dir, device=f"cuda:{local_rank}")
    y = layers["model.layers.0.mlp.down_proj"](x)       # the one-device result, within the stated bound

Each rank loads only its slice, with load_checkpoint(tp_rank=rank, tp_size=size): the loader's slicing, the
same as the C++ tp::ParallelLinear's (docs/TENSOR_PARALLEL.md). Then:
  - column-parallel (q/k/v, gate/up, ...): y_r = x W_r^T; with gather_output the ranks' columns are
    all-gathered and put back in the one-device order of fused shards;
  - row-parallel (o_proj, down_proj, ...): p_r = x_r W_r^T in f32 (rank 0's slice carries the bias), summed
    by an all-reduce, rounded once to the output dtype. The result differs from one device only by the
    order of the f32 additions. reduce_dtype="bf16" sends BF16 partial sums instead (half the bytes, what
    vLLM does): each partial is rounded to BF16 before the sum and the sum again, so the error grows to
    about one BF16 rounding per rank.
Dynamic per-token FP8 / INT8 activation scales span the whole input row: a row slice all-reduces its rows'
|x| maxima (max) first and quantizes its part with them (apply(row_amax=...)), as the C++
tp::ParallelLinear does, so its codes are the one-device codes. That needs a kernel that takes pre-quantized
activations (its input_quant_key); a slice whose kernel does not is refused, naming it. NVFP4 with a
per-call global scale is refused too: the slices would compute different global scales.
"""
from __future__ import annotations

import re
from typing import Dict, Union

import torch
import torch.distributed as dist
from torch import nn

from . import Error, Layer, apply, load_checkpoint
from .torch import QuantLinear, _TORCH_DTYPES


def _per_token_dynamic(layer: Layer) -> bool:
    key = layer.config.activation_key
    return key is not None and not key.is_static and key.group == "per_token"


def _row_parallel_refusal(layer: Layer) -> str:
    """Why a row slice of `layer` (processed) cannot equal the one-device layer ("" when it can)."""
    key = layer.config.activation_key
    if key is None or key.is_static:
        return ""
    takes = layer.kernel.input_quant_key(layer.config)
    if _per_token_dynamic(layer) and (takes is None or not takes == key):
        return (f"per-token dynamic activation scales, which a slice takes from the whole row's maximum, and its "
                f"kernel {layer.kernel.name} takes no pre-quantized activations (pick one that does with kernel=, "
                "e.g. a CUDA kernel)")
    if key.name == "kNvfp4DynamicGlobal":
        return "an NVFP4 input global scale computed per call from the whole activation"
    return ""


class ParallelQuantLinear(nn.Module):
    """One rank's slice of a column- or row-parallel layer (Layer.parallelism), with the collectives that
    make its output the whole layer's.

    layer: this rank's slice (load_checkpoint(tp_rank=..., tp_size=...)); row slices must be loaded with
    out_dtype equal to reduce_dtype (their partial sums: "f32", or "bf16"). group: the process group
    (default: the world). out_dtype: the output dtype of a row-parallel layer (column layers keep their own).
    gather_output: column-parallel, all-gather the full output (else each rank returns its columns).
    input_is_parallel: row-parallel, x is already this rank's slice of the input features (else the full
    input, sliced here)."""

    def __init__(self, layer: Layer, group=None, *, device: Union[str, torch.device, None] = None,
                 out_dtype: torch.dtype = torch.bfloat16, gather_output: bool = True,
                 input_is_parallel: bool = False, reduce_dtype: str = "f32", **process_options):
        super().__init__()
        if not dist.is_initialized():
            raise Error(f"ParallelQuantLinear({layer.name}): torch.distributed is not initialized "
                        "(dist.init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if (layer.tp_rank, layer.tp_size) != (self.rank, self.size):
            raise Error(f"ParallelQuantLinear({layer.name}): the layer is slice {layer.tp_rank} of {layer.tp_size}, "
                        f"this process is rank {self.rank} of {self.size} in its group; load it with "
                        f"load_checkpoint(tp_rank={self.rank}, tp_size={self.size})")
        if layer.parallelism not in ("column", "row"):
            raise Error(f"ParallelQuantLinear({layer.name}): not a loaded tensor-parallel slice (parallelism "
                        f"'{layer.parallelism}'); expected 'column' or 'row'")
        self.parallelism = layer.parallelism
        self.local = QuantLinear(layer, device=device, **process_options)
        self.row_amax = self.parallelism == "row" and _per_token_dynamic(layer)
        if self.parallelism == "row":
            why = _row_parallel_refusal(layer)
            if why:
                raise Error(f"ParallelQuantLinear({layer.name}): a row-parallel slice of scheme "
                            f"{layer.scheme.name if layer.scheme is not None else '?'} has {why}, which a slice "
                            "cannot compute alone; run it on one device")
            if reduce_dtype not in ("f32", "bf16"):
                raise Error(f"ParallelQuantLinear({layer.name}): reduce_dtype {reduce_dtype!r}; expected \"f32\" "
                            "or \"bf16\"")
            if layer.config.out_dtype != reduce_dtype:
                raise Error(f"ParallelQuantLinear({layer.name}): a row-parallel slice gives its partial sums in the "
                            f"all-reduce's dtype ({reduce_dtype}); it was loaded with out_dtype "
                            f"{layer.config.out_dtype}: load it with out_dtype=\"{reduce_dtype}\"")
            if layer.config.k * self.size != layer.full_k:
                raise Error(f"ParallelQuantLinear({layer.name}): slice of {layer.config.k} input features times "
                            f"{self.size} ranks is not the layer's {layer.full_k}")
        self.out_dtype = out_dtype
        self.gather_output = gather_output
        self.input_is_parallel = input_is_parallel
        self.full_n = layer.full_n
        self.widths = list(layer.config.logical_widths)
        self.in_features = layer.full_k if self.parallelism == "row" and not input_is_parallel else layer.config.k
        self.out_features = layer.full_n if self.parallelism == "row" or gather_output else layer.config.n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.parallelism == "row":
            if not self.input_is_parallel:
                k = self.local.in_features
                if x.shape[-1] != k * self.size:
                    raise Error(f"ParallelQuantLinear({self.local.layer.name}): input has {x.shape[-1]} features, "
                                f"expected the layer's {k * self.size}")
                x = x[..., self.rank * k:(self.rank + 1) * k]
            x = x.contiguous()
            if self.row_amax:  # the whole row's |x| maximum, so that every slice gets the one-device codes
                amax = x.detach().abs().amax(dim=-1).float().contiguous()
                if self.size > 1:
                    dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=self.group)
                partial = apply(self.local.layer, x, row_amax=amax)
            else:
                partial = self.local(x)
            if self.size > 1:
                dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=self.group)
            return partial.to(self.out_dtype)
        y = self.local(x)
        if not self.gather_output or self.size == 1:
            return y
        parts = [torch.empty_like(y) for _ in range(self.size)]
        dist.all_gather(parts, y.contiguous(), group=self.group)
        if not self.widths:
            return torch.cat(parts, dim=-1)
        # Fused shards: each rank holds its slice of every shard, [q_r | k_r | v_r]; the one-device order is
        # [q_0 q_1 .. | k_0 k_1 .. | v_0 v_1 ..].
        if sum(self.widths) * self.size != self.full_n:
            raise Error(f"ParallelQuantLinear({self.local.layer.name}): shards {self.widths} on {self.size} ranks "
                        f"do not add up to the layer's {self.full_n} outputs (replicated KV heads): gather_output "
                        "is not supported for it; use gather_output=False")
        out, off = [], 0
        for w in self.widths:
            out.extend(p[..., off:off + w] for p in parts)
            off += w
        return torch.cat(out, dim=-1)

    def extra_repr(self) -> str:
        return (f"{self.parallelism}-parallel, rank {self.rank} of {self.size}, in_features={self.in_features}, "
                f"out_features={self.out_features}, kernel={self.local.layer.kernel.name}")


def load_parallel_linears(path: str, group=None, *, device: Union[str, torch.device, None] = None,
                          layers: str = "", input_dtype: str = "bf16", out_dtype: str = "bf16",
                          reduce_dtype: str = "f32", **process_options) -> Dict[str, ParallelQuantLinear]:
    """This rank's slices of a checkpoint's quantized layers, by (fused) name, as ParallelQuantLinear modules
    (column-parallel ones gather their output). Column slices give out_dtype; the row slices, read a second
    time by name, give partial sums in reduce_dtype ("f32" or "bf16")."""
    if not dist.is_initialized():
        raise Error("load_parallel_linears: torch.distributed is not initialized (dist.init_process_group first)")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if out_dtype not in _TORCH_DTYPES:
        raise Error(f"load_parallel_linears: out_dtype {out_dtype!r}; expected one of {sorted(_TORCH_DTYPES)}")
    column = load_checkpoint(path, tp_rank=rank, tp_size=size, layers=layers, input_dtype=input_dtype,
                             out_dtype=out_dtype)
    if reduce_dtype not in ("f32", "bf16"):
        raise Error(f"load_parallel_linears: reduce_dtype {reduce_dtype!r}; expected \"f32\" or \"bf16\"")
    out: Dict[str, ParallelQuantLinear] = {}
    for layer in column.layers:
        if layer.parallelism == "column":
            out[layer.name] = ParallelQuantLinear(layer, group, device=device, **process_options)
    row_names = [layer.name for layer in column.layers if layer.parallelism == "row"]
    if not row_names:
        return out
    # Layer configs are fixed at load: the row slices are loaded again, only they, for their f32 / bf16 sums.
    row = load_checkpoint(path, tp_rank=rank, tp_size=size, layers="^(" + "|".join(map(re.escape, row_names)) + ")$",
                          input_dtype=input_dtype, out_dtype=reduce_dtype)
    for layer in row.layers:
        if layer.parallelism == "row":
            out[layer.name] = ParallelQuantLinear(layer, group, device=device, out_dtype=_TORCH_DTYPES[out_dtype],
                                                  reduce_dtype=reduce_dtype, **process_options)
    return out
