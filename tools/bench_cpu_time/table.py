# Medians over rounds of the per-round CPU-time medians; ratio = anchor / qlinear (> 1: qlinear faster),
# same-round ratio range in brackets.
import json, sys, statistics, collections
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f)]
cells = collections.defaultdict(dict)
for r in rows:
    name = r.get("scheme", r["tool"])
    cells[(r["n"], r["k"], r["m"])].setdefault(name, {})[r["round"]] = r
# The INT8 anchor: the dynamic INT8 linear on whichever engine the run used (QL_TORCH_INT8_ENGINE).
int8_anchor = next((r["tool"] for r in rows if r["tool"].endswith("_int8_dyn")), "torch_onednn_int8_dyn")
engine = int8_anchor[len("torch_"):-len("_int8_dyn")]
pairs = [("w8a8-int8-dynamic", int8_anchor)] + [(s, "torch_bf16") for s in
         ("w8a16-fp8", "w8a16-mxfp8", "w4a16-mxfp4", "w4a4-nvfp4", "w6a16-mxfp6-e2m3", "w8a8-fp8-channel", "w8a8-mxfp8")]
pairs = [p for p in pairs if any(r.get("scheme") == p[0] for r in rows)]
print(f"| shape (N x K) | M | anchor ms: torch bf16 / {engine} int8 | " + " | ".join(p[0] for p in pairs) + " |")
print("|---|---|---|" + "---|" * len(pairs))
for key in sorted(cells):
    c = cells[key]
    def med(name):
        return statistics.median(v["cpu_med"] for v in c[name].values()) if name in c else None
    out = []
    for q, a in pairs:
        if q not in c or a not in c:
            out.append("–"); continue
        rr = [c[a][r]["cpu_med"] / c[q][r]["cpu_med"] for r in c[q] if r in c[a]]
        kern = next(iter(c[q].values()))["kernel"]
        out.append(f"{med(q):.2f} ms, {med(a) / med(q):.2f}× ({min(rr):.2f}–{max(rr):.2f})")
    anchors = " / ".join(f"{v:.2f}" if v is not None else "–" for v in (med("torch_bf16"), med(int8_anchor)))
    print(f"| {key[0]}x{key[1]} | {key[2]} | {anchors} | " + " | ".join(out) + " |")
loads = [r["load1"] for r in rows]
print(f"\nrounds: {len(set(r['round'] for r in rows))}; load1 during blocks {min(loads):.1f}–{max(loads):.1f}")
