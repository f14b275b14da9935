"""Times one captured CUDA graph (QuantLinear, and torch.mm on the same shape) three ways in one process:
triton's do_bench on PyTorch's default stream and on a side stream, and CUDA events around a single replay
after a 256 MiB fill (the method of `qlinear bench --graph`, written with torch events), next to the
figures of a `qlinear bench --graph --json` run. docs/PERF.md ("What the cross-check ... shows") has its
table and the conclusion: do_bench reads ~1 us more than events around one replay, for torch.mm as for ours.

    qlinear bench --backend cuda --graph --scheme w8a8-fp8-tensor,w4a16-mxfp4,w8a16-fp8 --n 6144 --k 4096 \
        --m 1,16 --json > bench.json        # (and the other shapes of `cases` below, rows concatenated)
    PYTHONPATH=build/python python3 tools/graph_timer_probe.py bench.json probe.json"""
import json, statistics, sys
import torch, torch.nn as nn
from qlinear.torch import QuantLinear

from bench_crosscheck import do_bench_ms, graph_of  # the cross-check's do_bench call and graph capture

bench = json.load(open(sys.argv[1]))
ours = {(r["scheme"], r["n"], r["k"], r["m"]): r["median_ms"] * 1e3 for r in bench["rows"]}
dev = torch.device("cuda")
side = torch.cuda.Stream(dev)
flush = torch.empty(256 << 20, dtype=torch.int8, device=dev)


def ev_single(fn, reps=60):
    st = torch.cuda.current_stream()
    ts = []
    for i in range(reps + 10):
        flush.fill_(i & 0xFF)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(st)
        fn()
        b.record(st)
        b.synchronize()
        if i >= 10:
            ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


out = []
cases = [("w8a8-fp8-tensor", 6144, 4096), ("w4a16-mxfp4", 6144, 4096), ("w8a16-fp8", 4096, 4096),
         ("w8a8-fp8-tensor", 4096, 4096), ("w8a16-fp8", 28672, 4096)]
for scheme, n, k in cases:
    lin = nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.normal_(0, 0.02)
    ql = QuantLinear.from_linear(lin, scheme, device=dev, input_range=(-4.0, 4.0))
    w = lin.weight.detach().to(dev)
    for m in (1, 16):
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        rec = {"scheme": scheme, "n": n, "k": k, "m": m, "bench_graph_us": ours.get((scheme, n, k, m))}
        g = graph_of(lambda: ql(x))
        gm = graph_of(lambda: torch.mm(x, w.t()))
        rec["ql_db_default"] = 1e3 * do_bench_ms(g.replay)
        rec["mm_db_default"] = 1e3 * do_bench_ms(gm.replay)
        with torch.cuda.stream(side):
            rec["ql_db_side"] = 1e3 * do_bench_ms(g.replay)
            rec["mm_db_side"] = 1e3 * do_bench_ms(gm.replay)
            rec["ql_ev_side"] = ev_single(g.replay)
        rec["ql_ev_default"] = ev_single(g.replay)
        rec["ql_eager_ev_default"] = ev_single(lambda: ql(x))
        rec["mm_ev_default"] = ev_single(gm.replay)
        rec["empty_db"] = 1e3 * do_bench_ms(lambda: None)
        out.append(rec)
        print("PROBE %-16s %5dx%-5d M%-3d bench %s | ql db def %.1f side %.1f ev def %.1f side %.1f eager %.1f | mm db "
              "def %.1f side %.1f ev %.1f " % (scheme, n, k, m, "%.1f" % rec["bench_graph_us"] if rec["bench_graph_us"]
              else "-", rec["ql_db_default"], rec["ql_db_side"], rec["ql_ev_default"], rec["ql_ev_side"],
              rec["ql_eager_ev_default"], rec["mm_db_default"], rec["mm_db_side"], rec["mm_ev_default"]), flush=True)
    del ql, lin, w
    torch.cuda.empty_cache()
json.dump(out, open(sys.argv[2], "w"), indent=1)
