#!/bin/bash
# Interleaved rounds: qlinear (kernels chosen at run time) and torch (BF16 F.linear, dynamic INT8 linear on the
# onednn engine), same shapes, THREADS threads, each cell the median of 11 calls' wall and process-CPU time.
# CPU time per call is the figure that survives a machine shared with builds (wall time then measures the
# scheduler). Build ql_bench against a Release libqlinear.a:
#   g++ -O2 -std=c++20 -fopenmp -I include -I src tools/bench_cpu_time/ql_bench.cpp build/libqlinear.a -o ql_bench
# With GGML_BENCH (the anchors' ggml_mm_bench: ggml_mul_mat on llama.cpp's AMX buffer for q8_0 / q4_0, f32
# activations quantized inside the call, the same warm weights every call), ggml runs in the rotation too (wall
# time only: its thread pool spins while it waits).
# usage: QL_BENCH=./ql_bench TORCH_PYTHON=<venv>/bin/python [GGML_BENCH=<ggml_mm_bench>] [SCHEMES="..."] \
#          run.sh THREADS ROUNDS OUT.jsonl SHAPES(NxK,...) MS(,...)      then: python3 table.py OUT.jsonl
T=$1; R=$2; OUT=$3; SHAPES=$4; MS=$5
export OMP_NUM_THREADS=$T
for r in $(seq 1 $R); do
  for sh in ${SHAPES//,/ }; do
    n=${sh%x*}; k=${sh#*x}
    if [ $((r % 2)) -eq 1 ]; then order="ql torch ggml"; else order="ggml torch ql"; fi
    for tool in $order; do
      if [ $tool = ql ]; then
        for s in ${SCHEMES:-w8a8-int8-dynamic w8a16-fp8 w8a16-mxfp8 w4a16-mxfp4}; do
          ${QL_BENCH:?path of the built ql_bench} $s auto $n $k $MS 11 | sed "s/}$/,\"round\":$r,\"threads\":$T,\"load1\":$(cut -d' ' -f1 /proc/loadavg)}/"
        done
      elif [ $tool = ggml ]; then
        [ -n "$GGML_BENCH" ] && $GGML_BENCH --types q8_0,q4_0 --shapes ${n}x${k} --m $MS --reps 11 --threads $T \
          --repack auto --cold-mib 1 --round $r 2>/dev/null | sed "s/}$/, \"load1\": $(cut -d' ' -f1 /proc/loadavg)}/"
      else
        ${TORCH_PYTHON:?python with torch} -W ignore $(dirname "$0")/torch_bench.py $n $k $MS 11 $T | sed "s/}$/, \"round\": $r, \"threads\": $T, \"load1\": $(cut -d' ' -f1 /proc/loadavg)}/"
      fi
    done
  done
done >> $OUT
