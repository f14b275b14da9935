#!/usr/bin/env python3
"""The x86 goal table from goal_run.py's records (docs/PERF.md, "x86 against what users run"): medians over rounds
of each cell's median ms (wall clock, cold weights), then per token count:

  M = 1    weight GB/s of each scheme as a share of w8a8-int8-dynamic's on the same shape (goal 90%); the 4-bit
           schemes against ggml q4_0 (goal 1.2x); INT8 against torch's FBGEMM dynamic INT8 linear (goal 1.3x)
  M = 16   against torch BF16 F.linear on the unquantized weights (goal 1.5x) and ggml q8_0 / q4_0 (goal 1.2x);
           INT8 against torch's onednn dynamic INT8 linear (goal 1.3x)
  M = 128  against torch BF16 (goal 1.0x) and ggml (goal 1.5x); INT8 against onednn (goal 1.1x)

ratio = anchor ms / qlinear ms (> 1: qlinear faster). A cell misses its goal when any of its ratios does: marked
with "miss". Also reads records of the anchors' own harness (run_anchors.py), whose names differ.
--best: the fastest round of each cell instead of the median, for every tool alike (a virtual machine whose
host is busy at times slows whole blocks by up to 2x; the fastest round is the machine's own speed).
usage: goal_table.py [--best] RUN.jsonl [RUN2.jsonl ...]
"""
import collections
import json
import statistics
import sys

TORCH_NAMES = {"bf16": "torch_bf16", "onednn_dyn": "torch_onednn_int8_dyn", "fbgemm_dyn": "torch_fbgemm_int8_dyn"}
GOALS = {  # m -> (vs bf16, vs ggml, int8 anchor, int8 goal)
    16: (1.5, 1.2, "torch_onednn_int8_dyn", 1.3),
    128: (1.0, 1.5, "torch_onednn_int8_dyn", 1.1),
}
INT8 = "w8a8-int8-dynamic"


def bits_of(scheme):
    w = scheme.split("-")[0]  # w4a4, w6a16, ...
    return int(w[1:w.index("a")])


def load(paths):
    cells = collections.defaultdict(lambda: collections.defaultdict(list))  # (n, k, m) -> name -> [ms]
    gbps = collections.defaultdict(lambda: collections.defaultdict(list))
    kernels, meta = {}, {"dram": [], "cpu": set(), "torch": set()}
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            tool = r.get("tool")
            if tool == "roofline":
                if "dram_gbps" in r:
                    meta["dram"].append(r["dram_gbps"])
                continue
            if "median_ms" not in r and "wall_med" not in r:
                continue
            key = (r["n"], r["k"], r["m"])
            if tool == "qlinear":
                name = r["scheme"]
                kernels[(name, r["m"])] = r.get("kernel", "")
                if "cpu" in r:
                    meta["cpu"].add(r["cpu"])
                gbps[key][name].append(r["weight_gbps"])
            elif tool == "torch":  # the anchors' harness
                name = TORCH_NAMES.get(r.get("variant"), "torch_" + str(r.get("variant")))
            elif tool == "ggml":
                if not r.get("variant", "").endswith("_amx"):
                    continue
                name = "ggml_" + r["type"]
            else:
                name = tool
                if "torch" in r:
                    meta["torch"].add(r["torch"])
            cells[key][name].append(r.get("median_ms", r.get("wall_med")))
    return cells, gbps, kernels, meta


def main():
    args = sys.argv[1:]
    best = bool(args) and args[0] == "--best"
    cells, gbps, kernels, meta = load(args[1:] if best else args)
    med = min if best else statistics.median  # ms per call
    rate = max if best else statistics.median  # GB/s
    shapes = sorted({(n, k) for n, k, _ in cells}, key=lambda s: (s != (4096, 4096), s))
    ms = sorted({m for _, _, m in cells})
    schemes = list(dict.fromkeys(s for c in cells.values() for s in c if s.startswith("w")))
    if meta["cpu"]:
        print("- cpu: " + "; ".join(sorted(meta["cpu"])))
    if meta["torch"]:
        print("- torch: " + ", ".join(sorted(meta["torch"])))
    if meta["dram"]:
        print(f"- `qlinear bench --roofline` DRAM read: median {statistics.median(meta['dram']):.1f} GB/s over "
              f"{len(meta['dram'])} runs")
    print("- cells: " + ("the fastest round" if best else "the median over rounds") + " of each median ms")
    misses, total = [], 0
    for m in ms:
        print(f"\n#### M = {m}\n")
        print("| scheme | kernel | " + " | ".join(f"{n}x{k}" for n, k in shapes) + " |")
        print("|---|---|" + "---|" * len(shapes))
        anchor_rows = ["torch_bf16", "torch_onednn_int8_dyn", "torch_fbgemm_int8_dyn", "ggml_q8_0", "ggml_q4_0"]
        for a in anchor_rows:
            out = [f"{med(cells[(n, k, m)][a]):.3f} ms" if a in cells[(n, k, m)] else "–" for n, k in shapes]
            if any(o != "–" for o in out):
                print(f"| {a} (anchor) | | " + " | ".join(out) + " |")
        for s in schemes:
            row = []
            for n, k in shapes:
                c = cells[(n, k, m)]
                if s not in c:
                    row.append("–")
                    continue
                ours = med(c[s])
                parts, ok = [f"{ours:.3f} ms"], True

                def vs(anchor, goal, label):
                    nonlocal ok
                    if anchor not in c:
                        return
                    r = med(c[anchor]) / ours
                    parts.append(f"{r:.2f}x {label}")
                    ok = ok and r >= goal

                if m == 1:
                    if s == INT8:
                        vs("torch_fbgemm_int8_dyn", 1.3, "fbgemm")
                    else:
                        g = gbps[(n, k, m)]
                        if INT8 in g and s in g:
                            share = rate(g[s]) / rate(g[INT8])
                            parts.append(f"{100 * share:.0f}% of int8 GB/s")
                            ok = ok and share >= 0.9
                        if bits_of(s) == 4:
                            vs("ggml_q4_0", 1.2, "q4_0")
                elif m in GOALS:
                    g_bf16, g_ggml, int8_anchor, g_int8 = GOALS[m]
                    if s == INT8:
                        vs(int8_anchor, g_int8, "onednn int8")
                    else:
                        vs("torch_bf16", g_bf16, "bf16")
                        vs("ggml_q4_0" if bits_of(s) == 4 else "ggml_q8_0", g_ggml,
                           "q4_0" if bits_of(s) == 4 else "q8_0")
                total += 1
                if not ok:
                    misses.append(f"{s} {n}x{k} M = {m}")
                row.append(", ".join(parts) + ("" if ok else " **miss**"))
            print(f"| {s} | `{kernels.get((s, m), '')}` | " + " | ".join(row) + " |")
    print(f"\nGoals met in {total - len(misses)} of {total} cells" + (": missed in " + "; ".join(misses) if misses else ""))


if __name__ == "__main__":
    main()
