# Medians over rounds of the per-round CPU-time medians; ratio = anchor / qlinear (> 1: qlinear faster),
# same-round ratio range in brackets. INT8 W8A8 against torch's dynamic INT8 linear (the engine of the run, QL_TORCH_INT8_ENGINE), every other
# scheme against torch's BF16 F.linear on the unquantized weights. One row per scheme and M, one column per shape.
# A round is one (file, round) pair, so that files of separate run.sh calls are separate rounds.
# usage: python3 table.py [--wall] OUT.jsonl [OUT2.jsonl ...]   (--wall: wall-clock medians instead of CPU time)
# With ggml rows (run.sh with GGML_BENCH): a second table, ggml q8_0 / q4_0 (AMX buffer) wall time against
# qlinear's 8-bit / 4-bit schemes, as wall / wall and wall / (qlinear CPU time / threads).
import collections
import json
import statistics
import sys

args = sys.argv[1:]
key = "cpu_med"
if args and args[0] == "--wall":
    key = "wall_med"
    args = args[1:]
rows = []
for i, f in enumerate(args):
    for line in open(f):
        r = json.loads(line)
        if r["tool"] == "ggml":  # wall time only (median_ms); named by type and layout
            r["tool"], r["wall_med"] = r["variant"], r["median_ms"]
        r["round"] = (i, r["round"])
        rows.append(r)
cells = collections.defaultdict(dict)  # (n, k, m) -> name -> round -> record
for r in rows:
    cells[(r["n"], r["k"], r["m"])].setdefault(r.get("scheme", r["tool"]), {})[r["round"]] = r
shapes = sorted({(n, k) for n, k, _ in cells}, key=lambda s: (s != (4096, 4096), s))
ms = sorted({m for _, _, m in cells})
schemes = list(dict.fromkeys(r["scheme"] for r in rows if r["tool"] == "qlinear"))
# The INT8 anchor: the dynamic INT8 linear on whichever engine the run used (QL_TORCH_INT8_ENGINE).
int8_anchor = next((r["tool"] for r in rows if r["tool"].endswith("_int8_dyn")), "torch_onednn_int8_dyn")


def med(c, name):
    return statistics.median(v[key] for v in c[name].values())


print("| scheme | kernel | M | " + " | ".join(f"{n}x{k}" for n, k in shapes) + " |")
print("|---|---|---|" + "---|" * len(shapes))
for anchor_row in ("torch_bf16", int8_anchor):
    for m in ms:
        out = [f"{med(cells[(n, k, m)], anchor_row):.2f} ms" if anchor_row in cells[(n, k, m)] else "–" for n, k in shapes]
        if any(o != "–" for o in out):
            print(f"| {anchor_row} (anchor) | | {m} | " + " | ".join(out) + " |")
for s in schemes:
    anchor = int8_anchor if s.startswith("w8a8-int8") else "torch_bf16"
    for m in ms:
        out, kern = [], ""
        for n, k in shapes:
            c = cells[(n, k, m)]
            if s not in c or anchor not in c:
                out.append("–")
                continue
            kern = next(iter(c[s].values()))["kernel"]
            rr = [c[anchor][r][key] / c[s][r][key] for r in c[s] if r in c[anchor]]
            out.append(f"{med(c, s):.2f} ms, **{med(c, anchor) / med(c, s):.2f}×** ({min(rr):.2f}–{max(rr):.2f})")
        print(f"| {s} | `{kern}` | {m} | " + " | ".join(out) + " |")
ggml = [g for g in ("q8_0_amx", "q4_0_amx") if any(r["tool"] == g for r in rows)]
if ggml:
    def wall(c, name):
        return statistics.median(v["wall_med"] for v in c[name].values())
    print("\nggml (wall ms, median over rounds) and qlinear against it: ggml wall / qlinear wall, and in brackets "
          "ggml wall / (qlinear CPU ms / threads)\n")
    print("| scheme | M | " + " | ".join(f"{n}x{k}" for n, k in shapes) + " |")
    print("|---|---|" + "---|" * len(shapes))
    for g in ggml:
        for m in ms:
            out = [f"{wall(cells[(n, k, m)], g):.2f} ms" if g in cells[(n, k, m)] else "–" for n, k in shapes]
            print(f"| ggml {g} (anchor) | {m} | " + " | ".join(out) + " |")
    threads = next(r["threads"] for r in rows if "threads" in r)
    for s in schemes:
        g = "q4_0_amx" if s.startswith("w4") else "q8_0_amx"
        if g not in ggml:
            continue
        for m in ms:
            out = []
            for n, k in shapes:
                c = cells[(n, k, m)]
                if s not in c or g not in c:
                    out.append("–")
                    continue
                cpu = statistics.median(v["cpu_med"] for v in c[s].values())
                out.append(f"**{wall(c, g) / wall(c, s):.2f}×** ({wall(c, g) / (cpu / threads):.2f}×)")
            print(f"| {s} vs {g} | {m} | " + " | ".join(out) + " |")
loads = [r["load1"] for r in rows]
print(f"\nrounds: {len({r['round'] for r in rows})} (file, round) pairs; load1 during blocks {min(loads):.1f}–{max(loads):.1f}")
