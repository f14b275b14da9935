"""A checkpoint's quantized layers split across processes, one per device, the way engines run tensor
parallelism; each rank compares its result with the whole layer run in one process.

    torchrun --nproc-per-node 2 examples/tensor_parallel.py CHECKPOINT_DIR            # GPUs: NCCL
    torchrun --nproc-per-node 2 examples/tensor_parallel.py CHECKPOINT_DIR --cpu      # CPU processes: gloo

(PYTHONPATH=build/python when qlinear is not installed.) Rank 0 prints one line per layer: its kind of split,
the kernel, and the relative difference from the one-process layer.
"""
import argparse
import os

import numpy as np
import torch
import torch.distributed as dist

import qlinear
from qlinear.distributed import load_parallel_linears
from qlinear.torch import QuantLinear


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a compressed-tensors or Quark checkpoint directory")
    parser.add_argument("--cpu", action="store_true", help="CPU processes over gloo instead of GPUs over NCCL")
    parser.add_argument("--m", type=int, default=16, help="tokens per call (default 16)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu") if args.cpu else torch.device("cuda", local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank = dist.get_rank()
    try:
        layers = load_parallel_linears(args.checkpoint, device=device)
        whole = qlinear.load_checkpoint(args.checkpoint)
        for i, (name, module) in enumerate(sorted(layers.items())):
            g = torch.Generator().manual_seed(i)  # the same input on every rank
            x = torch.randn(args.m, module.in_features, generator=g).to(torch.bfloat16).to(device)
            y = module(x).float().cpu().numpy()
            if rank == 0:
                one = QuantLinear(whole.layer(name), device=device)
                want = one(x).float().cpu().numpy()
                diff = float(np.linalg.norm(y - want) / max(np.linalg.norm(want), 1e-30))
                print(f"{name:50s} {module.parallelism:6s} {module.local.layer.kernel.name:32s} "
                      f"rel. difference {diff:.2e}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
