#!/usr/bin/env python3
"""Times torch BF16 mm (x @ W^T) on the shapes of a qlinear benchmark CSV and prints the CSV's kernels next to it.

Same method as the C++ side: CUDA events around each call, L2 flushed by a 512 MiB read before every call,
median of 30. Usage: torch_bf16_anchor.py bench.csv [joined.csv]
"""
import csv
import statistics
import sys

import torch


def median_us(fn, flush, reps=30):
    fn()
    times = []
    for _ in range(reps):
        flush.sum()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda").view(torch.float32)
    flush.zero_()
    torch_us = {}
    for n, k, m in sorted({(int(r["n"]), int(r["k"]), int(r["m"])) for r in rows}):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        torch_us[(n, k, m)] = median_us(lambda: torch.mm(x, w.t()), flush)
        del w
    out = open(sys.argv[2], "w") if len(sys.argv) > 2 else None
    if out:
        out.write("layer,m,scheme,us,torch_bf16_us,ratio,bf16_lt_us,splits,weight_gbps\n")
    print(f"{'layer':12} {'M':>5} {'scheme':18} {'ours us':>9} {'torch us':>9} {'ratio':>6} {'lt us':>8} {'GB/s':>6}")
    for r in rows:
        t = torch_us[(int(r["n"]), int(r["k"]), int(r["m"]))]
        us = float(r["us"])
        print(f"{r['layer']:12} {r['m']:>5} {r['scheme']:18} {us:9.1f} {t:9.1f} {t / us:6.2f} "
              f"{float(r['bf16_lt_us']):8.1f} {r['weight_gbps']:>6}")
        if out:
            out.write(f"{r['layer']},{r['m']},{r['scheme']},{us},{t:.2f},{t / us:.3f},{r['bf16_lt_us']},"
                      f"{r['splits']},{r['weight_gbps']}\n")


if __name__ == "__main__":
    main()
