#!/usr/bin/env python3
"""Checks `qlinear bench --backend cuda` against an independent timer: triton.testing.do_bench.

For every row of a `qlinear bench --json` file (run on this GPU just before), times on the same (N, K, M):
  - torch.mm on BF16 operands (what the `bf16` anchor, cuBLAS BF16, measures), and
  - qlinear.torch.QuantLinear of the row's scheme (what `qlinear bench` measures), when the Python package
    is importable (PYTHONPATH=<build>/python): called directly (do_bench then also counts Python's and the
    launches' host time whenever the GPU waits for it: small M), and replayed from a CUDA graph (device time
    alone, comparable with qlinear bench's events),
with do_bench's median (it flushes the L2 by writing 256 MB before each repetition). --other adds the same
run made with another L2 flush (QLINEAR_BENCH_L2_FLUSH=clean) beside it. Prints one line per row and writes
the pairs as JSON (--out, read by tools/gen_perf.py as RUN.crosscheck.json); a pair more than --tolerance
apart is flagged. Agreement is taken above each timer's floor (what its events read around an empty call:
~1.3 us for do_bench's, measured at the start; the bench records its own as machine["timer floor us"]).

do_bench warms up for 25 ms and repeats for 200 ms of back-to-back calls, which holds an H200 at its
power-limited clock; run the bench the same way (`--sustain-ms 200`) so that both sides see that clock:

    qlinear bench --backend cuda --sustain-ms 200 --compare bf16 --shapes llama3-8b --m 1,16,256,1024,4096 \
        --scheme w8a16-fp8,w4a16-mxfp4 --json > h200.json
    python3 tools/bench_crosscheck.py --bench h200.json [--other h200-clean.json] --out h200.crosscheck.json

A run made with `qlinear bench --graph` (every call replayed from a CUDA graph) is compared with graphs on
torch's side too: torch.mm and QuantLinear each captured in a CUDA graph and replayed under do_bench.
"""
import argparse
import json
import sys
import time

import torch
import triton.testing


def do_bench_ms(fn):
    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def graph_of(fn):
    """fn captured in a CUDA graph (after warm-up on a side stream), or an exception."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def method_of(run):
    return run.get("machine", {}).get("method", "qlinear bench's default")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="qlinear bench --json output (CUDA)")
    ap.add_argument("--other", help="the same run with another L2 flush (QLINEAR_BENCH_L2_FLUSH)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--schemes", help="comma-separated: time QuantLinear only for these (quantizing a model's "
                    "weights in Python takes seconds per scheme)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop timing QuantLinear after this many seconds")
    args = ap.parse_args()
    run = json.load(open(args.bench))
    if "back-to-back" not in method_of(run):
        print("note: the bench ran without --sustain-ms: its large-M figures are at a burst clock that do_bench's "
              "200 ms of repetitions does not hold", flush=True)
    other_rows, other_bf16, other_method = {}, {}, None
    if args.other:
        other = json.load(open(args.other))
        other_method = method_of(other)
        for r in other["rows"]:
            other_rows[(r["scheme"], r["shape"], r["m"])] = r
            if "median_ms" in r.get("compare", {}).get("bf16", {}):
                other_bf16[(r["shape"], r["m"])] = r["compare"]["bf16"]["median_ms"]
    only = set(args.schemes.split(",")) if args.schemes else None
    graph_run = "CUDA graph" in method_of(run)
    if graph_run:
        print("the bench replayed CUDA graphs: torch.mm is timed replayed from a graph as well", flush=True)
    started = time.monotonic()
    try:
        import torch.nn as nn
        from qlinear.torch import QuantLinear
    except Exception as e:  # the Python package was not built on this machine
        QuantLinear = None
        print(f"QuantLinear: not importable ({e}); only the bf16 anchor is cross-checked")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    # Each timer's floor: what its events read around a call that does nothing (do_bench's pair of events
    # on PyTorch's stream reads ~1.3 us on an H200; the bench records its own in machine["timer floor us"]).
    # Agreement is computed on times above the floors, so that a fixed event cost does not count as a
    # difference of the GEMMs at small M.
    db_floor = do_bench_ms(lambda: None)
    our_floor = float(run.get("machine", {}).get("timer floor us", 0)) / 1e3
    print(f"timer floors: do_bench {db_floor * 1e3:.2f} us, qlinear bench {our_floor * 1e3:.2f} us", flush=True)
    agree = lambda ours, theirs: (ours - our_floor) / (theirs - db_floor)
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
                mm = lambda: torch.mm(x, w.t())
                mm_ms[(n, k, m)] = do_bench_ms(graph_of(mm).replay if graph_run else mm)
                del w, x
            rec["cublas_bf16_ms"] = bf16["median_ms"]
            rec["torch_mm_do_bench_ms"] = mm_ms[(n, k, m)]
            rec["bf16_agreement"] = agree(bf16["median_ms"], mm_ms[(n, k, m)])
            if (r["shape"], m) in other_bf16:
                rec["cublas_bf16_other_ms"] = other_bf16[(r["shape"], m)]
                rec["bf16_other_agreement"] = agree(rec["cublas_bf16_other_ms"], mm_ms[(n, k, m)])
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
                    # the static activation range `qlinear bench` gives its synthetic layers (MakeLayerOptions)
                    modules[key] = QuantLinear.from_linear(lin, r["scheme"], device=dev, input_range=(-4.0, 4.0))
                ql = modules[key]
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                rec["quantlinear_do_bench_ms"] = do_bench_ms(lambda: ql(x))
                rec["ours_agreement"] = agree(r["median_ms"], rec["quantlinear_do_bench_ms"])
                try:
                    g = graph_of(lambda: ql(x))
                    rec["quantlinear_graph_do_bench_ms"] = do_bench_ms(g.replay)
                    rec["ours_graph_agreement"] = agree(r["median_ms"], rec["quantlinear_graph_do_bench_ms"])
                except Exception as e:
                    rec["graph_error"] = str(e)[:200]
                orow = other_rows.get((r["scheme"], r["shape"], m))
                if orow:
                    rec["qlinear_other_ms"] = orow["median_ms"]
                    rec["ours_other_agreement"] = agree(orow["median_ms"], rec["quantlinear_do_bench_ms"])
            except Exception as e:
                rec["quantlinear_error"] = str(e)[:200]
        flags = [name for name in ("bf16_agreement", "bf16_other_agreement", "ours_graph_agreement")
                 if name in rec and abs(rec[name] - 1) > args.tolerance]
        rec["outside_tolerance"] = flags
        out.append(rec)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()), flush=True)
    json.dump({"tolerance": args.tolerance, "torch": torch.__version__, "triton": triton.__version__,
               "do_bench_floor_ms": db_floor, "bench_floor_ms": our_floor,
               "method": method_of(run), "graph_run": graph_run, "other_method": other_method, "rows": out}, open(args.out, "w"), indent=1)
    bad = sum(1 for r in out if r["outside_tolerance"])
    print(f"{len(out)} rows, {bad} with a pair more than {args.tolerance:.0%} apart "
          "(checked: the bf16 anchor against torch.mm, and ours against QuantLinear replayed from a CUDA graph)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
