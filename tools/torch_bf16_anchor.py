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
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if int(r["m"]) > 0]  # m = 0: the plain-read rows
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
        out.write("layer,m,scheme,us,torch_bf16_us,ratio,bf16_us,splits,tbps\n")
    # Variant rows ("scheme/variant") become extra columns of their base row.
    variants = {}
    for r in rows:
        if "/" in r["scheme"]:
            base, var = r["scheme"].split("/", 1)
            variants[(r["layer"], r["m"], base, var)] = float(r["us"])
    names = sorted({k[3] for k in variants})
    print(f"{'layer':11} {'M':>4} {'scheme':16} {'us':>7} {'torch':>7} {'ratio':>5} {'TB/s':>5} {'split':>5}"
          + "".join(f" {n:>7}" for n in names))
    for r in rows:
        t = torch_us[(int(r["n"]), int(r["k"]), int(r["m"]))]
        us = float(r["us"])
        if out:
            out.write(f"{r['layer']},{r['m']},{r['scheme']},{us},{t:.2f},{t / us:.3f},{r['bf16_us']},"
                      f"{r['splits']},{r['tbps']}\n")
        if "/" in r["scheme"]:
            continue
        extra = "".join(f" {variants[(r['layer'], r['m'], r['scheme'], n)]:7.1f}"
                        if (r["layer"], r["m"], r["scheme"], n) in variants else f" {'':7}" for n in names)
        print(f"{r['layer']:11} {r['m']:>4} {r['scheme'][:16]:16} {us:7.1f} {t:7.1f} {t / us:5.2f} "
              f"{float(r['tbps']):5.2f} {r['splits']:>5}{extra}")


if __name__ == "__main__":
    main()
