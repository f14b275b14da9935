# Times torch's BF16 F.linear and the dynamic INT8 linear (engine onednn, or QL_TORCH_INT8_ENGINE=fbgemm):
# median wall and process-CPU ms.
# usage: [QL_TORCH_INT8_ENGINE=onednn|fbgemm] torch_bench.py N K M[,M..] REPS THREADS
import json, os, sys, time
import torch
import torch.nn.functional as F
n, k = int(sys.argv[1]), int(sys.argv[2])
ms = [int(v) for v in sys.argv[3].split(",")]
reps, threads = int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(1)
w = torch.randn(n, k, generator=g) * 0.05
wb = w.to(torch.bfloat16)
engine = os.environ.get("QL_TORCH_INT8_ENGINE", "onednn")
torch.backends.quantized.engine = engine
scales = (w.abs().amax(dim=1) / 127.0).double()
qw = torch.quantize_per_channel(w, scales, torch.zeros(n, dtype=torch.int64), 0, torch.qint8)
mod = torch.ao.nn.quantized.dynamic.Linear(k, n, bias_=False, dtype=torch.qint8)
mod.set_weight_bias(qw, None)
def timeit(fn):
    with torch.inference_mode():
        for _ in range(3): fn()
        wl, cl = [], []
        for _ in range(reps):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wl.append((time.perf_counter() - w0) * 1e3); cl.append((time.process_time() - c0) * 1e3)
    wl.sort(); cl.sort()
    return wl[reps // 2], wl[0], cl[reps // 2], cl[0]
for m in ms:
    xb = torch.randn(m, k, generator=g).to(torch.bfloat16)
    xf = xb.float()
    for name, fn in (("torch_bf16", lambda: F.linear(xb, wb)), (f"torch_{engine}_int8_dyn", lambda: mod(xf))):
        wm, wmin, cm, cmin = timeit(fn)
        print(json.dumps({"tool": name, "n": n, "k": k, "m": m, "wall_med": round(wm, 4), "wall_min": round(wmin, 4),
                          "cpu_med": round(cm, 4), "cpu_min": round(cmin, 4)}), flush=True)
