#!/usr/bin/env python3
"""Times torch._scaled_mm (FP8, per-tensor and rowwise scales, with and without fast accumulation) and
torch._int_mm on the llama3-8b projection shapes, GEMM only on pre-quantized operands, with the method of
src/bench/timing.hpp: CUDA events around each call, the L2 flushed before every repetition by writing
256 MiB, median of 30 after 3 warm-ups. Also names the kernels torch runs (torch.profiler) at one shape.

Usage: torch_scaled_mm_anchor.py [M,M,...]    prints "TORCH <layer> <M> <variant> <us> <TFLOP/s>" lines
"""
import statistics
import sys

import torch

SHAPES = [("8b.qkv", 6144, 4096), ("8b.o", 4096, 4096), ("8b.gate_up", 28672, 4096), ("8b.down", 4096, 14336)]


def median_us(fn, flush, reps=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        flush.fill_(i & 0xFF)
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def kernel_names(fn):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name[:110] for e in prof.events() if e.device_type.name == "CUDA"]


def main():
    ms = [int(v) for v in sys.argv[1].split(",")] if len(sys.argv) > 1 else [16, 256, 1024, 4096]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    for name, n, k in SHAPES:
        w8 = (torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn)
        wi = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        sb_row = torch.full((1, n), 0.01, device="cuda")
        one = torch.tensor(1.0, device="cuda")
        for m in ms:
            x8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
            xi = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            sa_row = torch.full((m, 1), 0.02, device="cuda")
            variants = {
                "scaled_mm.tensor": lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                             out_dtype=torch.bfloat16),
                "scaled_mm.tensor.fastacc": lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                                     out_dtype=torch.bfloat16, use_fast_accum=True),
                "scaled_mm.rowwise": lambda: torch._scaled_mm(x8, w8.t(), scale_a=sa_row, scale_b=sb_row,
                                                              out_dtype=torch.bfloat16),
                "int_mm": lambda: torch._int_mm(xi, wi.t()),
            }
            for var, fn in variants.items():
                try:
                    us = median_us(fn, flush)
                    print(f"TORCH {name} {m} {var} {us:.2f} {2.0 * m * n * k / us / 1e6:.0f}", flush=True)
                except Exception as e:  # e.g. _int_mm's M > 16 rule
                    print(f"TORCH {name} {m} {var} nan ({str(e).splitlines()[0][:80]})", flush=True)
            if name == "8b.qkv" and m == 4096:
                for var, fn in variants.items():
                    try:
                        print(f"KERNELS {var}: {kernel_names(fn)}", flush=True)
                    except Exception as e:
                        print(f"KERNELS {var}: profiler failed ({e})")


if __name__ == "__main__":
    main()
