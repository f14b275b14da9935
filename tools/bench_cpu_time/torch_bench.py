# Times torch's BF16 F.linear and the dynamic INT8 linear (engine onednn, or QL_TORCH_INT8_ENGINE=fbgemm; both with
# QL_TORCH_INT8_ENGINE=both): median wall and process-CPU ms.
# usage: [QL_TORCH_INT8_ENGINE=onednn|fbgemm|both] torch_bench.py N K M[,M..] REPS THREADS [COLD_MIB]
# COLD_MIB > 0: the weights are identical copies totalling at least that many MiB, used round-robin, so that each
# call reads its weights from memory, not from the caches (qlinear bench's rule); 0 (default): the same weights
# every call.
import json, math, os, sys, time
import torch
import torch.nn.functional as F
n, k = int(sys.argv[1]), int(sys.argv[2])
ms = [int(v) for v in sys.argv[3].split(",")]
reps, threads = int(sys.argv[4]), int(sys.argv[5])
cold_mib = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(1)
w = torch.randn(n, k, generator=g) * 0.05
wb = w.to(torch.bfloat16)
engine_env = os.environ.get("QL_TORCH_INT8_ENGINE", "onednn")
engines = ["onednn", "fbgemm"] if engine_env == "both" else [engine_env]
scales = (w.abs().amax(dim=1) / 127.0).double()
qw = torch.quantize_per_channel(w, scales, torch.zeros(n, dtype=torch.int64), 0, torch.qint8)


def copies(per_bytes):
    return 1 if cold_mib <= 0 else max(1, min(64, math.ceil(cold_mib * 1048576 / per_bytes)))


def int8_modules(engine):
    # The module packs its weight for the engine that is current when the weight is set.
    torch.backends.quantized.engine = engine
    mods = []
    for _ in range(copies(n * k)):
        mod = torch.ao.nn.quantized.dynamic.Linear(k, n, bias_=False, dtype=torch.qint8)
        mod.set_weight_bias(qw, None)
        mods.append(mod)
    return mods


wbs = [wb.clone() for _ in range(copies(2 * n * k))]
mods = {e: int8_modules(e) for e in engines}


def timeit(fn):
    with torch.inference_mode():
        for i in range(3): fn(i)
        wl, cl = [], []
        for r in range(reps):
            w0, c0 = time.perf_counter(), time.process_time()
            fn(r)
            wl.append((time.perf_counter() - w0) * 1e3); cl.append((time.process_time() - c0) * 1e3)
    wl.sort(); cl.sort()
    return wl[reps // 2], wl[0], cl[reps // 2], cl[0]


for m in ms:
    xb = torch.randn(m, k, generator=g).to(torch.bfloat16)
    xf = xb.float()
    runs = [("torch_bf16", lambda i: F.linear(xb, wbs[i % len(wbs)]))]
    for e in engines:
        def run(i, e=e):
            torch.backends.quantized.engine = e
            return mods[e][i % len(mods[e])](xf)
        runs.append((f"torch_{e}_int8_dyn", run))
    for name, fn in runs:
        wm, wmin, cm, cmin = timeit(fn)
        print(json.dumps({"tool": name, "n": n, "k": k, "m": m, "wall_med": round(wm, 4), "wall_min": round(wmin, 4),
                          "cpu_med": round(cm, 4), "cpu_min": round(cmin, 4), "cold_mib": cold_mib,
                          "torch": torch.__version__}), flush=True)
