#!/usr/bin/env python3
"""Interleaved rounds on a quiet machine, cold weights: `qlinear bench --json` (every scheme of the run in one
process per shape), torch (torch_bench.py here: BF16 F.linear and the dynamic INT8 linear on the onednn and fbgemm
engines) and, with --ggml-bench, ggml_mul_mat on llama.cpp's AMX buffer (q8_0, q4_0: the anchors' ggml_mm_bench),
the same shapes and token counts, THREADS threads each. One JSON line per measurement; goal_table.py turns them into
the x86 goal table (docs/PERF.md).

Cold weights: qlinear bench rotates processed copies over twice the last-level cache or more; torch_bench.py and
ggml_mm_bench rotate identical copies over --cold-mib MiB (256 by default).
Quiet: before each block the run waits (up to --max-wait-s) until the 1-minute load average is below
--quiet-load and, over a 2 s sample, other processes keep less than --quiet-busy of a core busy; each record
carries the CPU time others used during its block, so a noisy block shows.

usage: goal_run.py --out OUT.jsonl --qlinear build/qlinear --torch-python PY [--ggml-bench PATH]
                   [--shapes 4096x4096,...] [--m 1,16,128] [--rounds 2] [--schemes a,b,...] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMES = ("w8a8-int8-dynamic,w8a16-fp8,w8a16-mxfp8,w6a16-mxfp6-e2m3,w4a16-mxfp4,w4a4-nvfp4,w4a4-mxfp4,"
           "w6a6-mxfp6-e2m3")
TICK = os.sysconf("SC_CLK_TCK")


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq


def own_cpu():
    r = os.times()
    return r.children_user + r.children_system


def wait_quiet(a):
    t0 = time.time()
    while True:
        load1 = float(open("/proc/loadavg").read().split()[0])
        b0 = busy_jiffies()
        time.sleep(2.0)
        busy = (busy_jiffies() - b0) / TICK / 2.0
        if (load1 < a.quiet_load and busy < a.quiet_busy) or time.time() - t0 > a.max_wait_s:
            return {"load1": load1, "busy_before": round(busy, 3), "waited_s": round(time.time() - t0, 1)}


def run_block(cmd, env):
    b0, c0, w0 = busy_jiffies(), own_cpu(), time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - w0
    others = max(0.0, ((busy_jiffies() - b0) / TICK - (own_cpu() - c0)) / wall)
    if p.returncode != 0:
        print(f"{' '.join(cmd[:4])}: rc {p.returncode}: {p.stderr[-300:]}", file=sys.stderr)
    return p.stdout, {"block_s": round(wall, 1), "others_busy": round(others, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--qlinear", required=True)
    ap.add_argument("--torch-python", required=True)
    ap.add_argument("--ggml-bench")
    ap.add_argument("--shapes", default="4096x4096,6144x4096,28672x4096,4096x14336", help="NxK,...")
    ap.add_argument("--m", default="1,16,128")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemes", default=SCHEMES)
    ap.add_argument("--cold-mib", type=float, default=256)
    ap.add_argument("--quiet-load", type=float, default=1.6)
    ap.add_argument("--quiet-busy", type=float, default=0.15)
    ap.add_argument("--max-wait-s", type=float, default=180)
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), QLINEAR_NUM_THREADS=str(a.threads),
               QL_TORCH_INT8_ENGINE="both")
    tools = ["qlinear", "torch"] + (["ggml"] if a.ggml_bench else [])
    with open(a.out, "a") as out:
        for rnd in range(1, a.rounds + 1):
            cond = wait_quiet(a)
            text, c = run_block([a.qlinear, "bench", "--roofline", "--json"], env)
            roof = json.loads(text).get("roofline", {}) if text.startswith("{") else {}
            out.write(json.dumps({"tool": "roofline", "round": rnd, **roof, **cond, **c}) + "\n")
            for si, shape in enumerate(a.shapes.split(",")):
                n, k = shape.split("x")
                turn = (rnd + si) % len(tools)
                for tool in tools[turn:] + tools[:turn]:  # no tool always first
                    if tool == "qlinear":
                        cmd = [a.qlinear, "bench", "--scheme", a.schemes, "--n", n, "--k", k, "--m", a.m,
                               "--reps", str(a.reps), "--json"]
                    elif tool == "torch":
                        cmd = [a.torch_python, "-W", "ignore", os.path.join(HERE, "torch_bench.py"), n, k, a.m,
                               str(a.reps), str(a.threads), str(a.cold_mib)]
                    else:
                        cmd = [a.ggml_bench, "--types", "q8_0,q4_0", "--shapes", shape, "--m", a.m, "--reps",
                               str(a.reps), "--threads", str(a.threads), "--repack", "auto", "--cold-mib",
                               str(a.cold_mib), "--round", str(rnd)]
                    cond = wait_quiet(a)
                    text, c = run_block(cmd, env)
                    if tool == "qlinear" and text.startswith("{"):
                        doc = json.loads(text)
                        recs = [dict(r, tool="qlinear", cpu=doc["machine"]["cpu"]) for r in doc["rows"]]
                    else:
                        recs = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
                    for r in recs:
                        r.update(round=rnd, **cond, **c)
                        out.write(json.dumps(r) + "\n")
                    out.flush()
                    print(f"round {rnd} {shape} {tool}: {len(recs)} records, others busy {c['others_busy']}",
                          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
