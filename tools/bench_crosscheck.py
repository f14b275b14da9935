#!/usr/bin/env python3
"""Checks `qlinear bench --backend cuda` against an independent timer: triton.testing.do_bench.

For every row of a `qlinear bench --json` file (run on this GPU just before), times on the same (N, K, M):
  - torch.mm on BF16 operands (what the `bf16` anchor, cuBLAS BF16, measures), and
  - qlinear.torch.QuantLinear of the row's scheme (what `qlinear bench` measures), when the Python package
    is importable (PYTHONPATH=<build>/python),
with do_bench's median (it flushes the L2 by writing 256 MB before each repetition). Prints one line per
row and writes the pairs as JSON (--out); a pair more than --tolerance apart is flagged.

    python3 tools/bench_crosscheck.py --bench h200.json [--write-flush h200_write.json] --out check.json
"""
import argparse
import json
import sys
import time

import torch
import triton.testing


def do_bench_ms(fn):
    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="qlinear bench --json output (CUDA)")
    ap.add_argument("--write-flush", help="the same run with QLINEAR_BENCH_L2_FLUSH=write (triton's flush)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--schemes", help="comma-separated: time QuantLinear only for these (quantizing a model's "
                    "weights in Python takes seconds per scheme)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop timing QuantLinear after this many seconds")
    args = ap.parse_args()
    run = json.load(open(args.bench))
    write_rows, write_bf16 = {}, {}
    if args.write_flush:
        for r in json.load(open(args.write_flush))["rows"]:
            write_rows[(r["scheme"], r["shape"], r["m"])] = r
            if "median_ms" in r.get("compare", {}).get("bf16", {}):
                write_bf16[(r["shape"], r["m"])] = r["compare"]["bf16"]["median_ms"]
    only = set(args.schemes.split(",")) if args.schemes else None
    started = time.monotonic()
    try:
        import torch.nn as nn
        from qlinear.torch import QuantLinear
    except Exception as e:  # the Python package was not built on this machine
        QuantLinear = None
        print(f"QuantLinear: not importable ({e}); only the bf16 anchor is cross-checked")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    mm_ms = {}
    out = []
    modules = {}
    for r in run["rows"]:
        n, k, m = r["n"], r["k"], r["m"]
        rec = {"scheme": r["scheme"], "shape": r["shape"], "m": m, "qlinear_ms": r["median_ms"]}
        bf16 = r.get("compare", {}).get("bf16", {})
        if "median_ms" in bf16:
            if (n, k, m) not in mm_ms:
                w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                mm_ms[(n, k, m)] = do_bench_ms(lambda: torch.mm(x, w.t()))
                del w, x
            rec["cublas_bf16_ms"] = bf16["median_ms"]
            rec["torch_mm_do_bench_ms"] = mm_ms[(n, k, m)]
            rec["bf16_agreement"] = bf16["median_ms"] / mm_ms[(n, k, m)]
            if (r["shape"], m) in write_bf16:
                rec["cublas_bf16_write_flush_ms"] = write_bf16[(r["shape"], m)]
                rec["bf16_write_flush_agreement"] = rec["cublas_bf16_write_flush_ms"] / mm_ms[(n, k, m)]
        if QuantLinear is not None and (only is None or r["scheme"] in only) and \
                time.monotonic() - started < args.budget_s:
            key = (r["scheme"], n, k)
            try:
                if key not in modules:
                    modules.clear()
                    torch.cuda.empty_cache()
                    lin = nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
                    with torch.no_grad():
                        lin.weight.normal_(0, 0.02)
                    modules[key] = QuantLinear.from_linear(lin, r["scheme"], device=dev)
                ql = modules[key]
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                rec["quantlinear_do_bench_ms"] = do_bench_ms(lambda: ql(x))
                rec["ours_agreement"] = r["median_ms"] / rec["quantlinear_do_bench_ms"]
                wr = write_rows.get((r["scheme"], r["shape"], m))
                if wr:
                    rec["qlinear_write_flush_ms"] = wr["median_ms"]
                    rec["ours_write_flush_agreement"] = wr["median_ms"] / rec["quantlinear_do_bench_ms"]
            except Exception as e:
                rec["quantlinear_error"] = str(e)
        flags = [name for name in ("bf16_agreement", "ours_agreement", "bf16_write_flush_agreement",
                                   "ours_write_flush_agreement")
                 if name in rec and abs(rec[name] - 1) > args.tolerance]
        rec["outside_tolerance"] = flags
        out.append(rec)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()), flush=True)
    json.dump({"tolerance": args.tolerance, "torch": torch.__version__, "triton": triton.__version__,
               "rows": out}, open(args.out, "w"), indent=1)
    bad = sum(1 for r in out if r["outside_tolerance"])
    print(f"{len(out)} rows, {bad} with a pair more than {args.tolerance:.0%} apart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
