#!/usr/bin/env bash
# On a GPU host: builds test_cuda, runs the tensor-core decode tests (and compute-sanitizer memcheck and
# racecheck on a small subset), times the kernels against torch BF16 mm, and prints a short performance
# table, then the test summary last. Everything goes to $OUT (default ./mma_decode_out): run.log (all
# output), bench.csv, joined.csv, table.txt.
#   tools/gpu_mma_decode_check.sh [BUILD_DIR]
set -u
build=${1:-build-gpu}
out=${OUT:-mma_decode_out}
mkdir -p "$out"
log="$out/run.log"
: >"$log"
gen="Unix Makefiles"
command -v ninja >/dev/null && gen=Ninja
start=$SECONDS
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G "$gen" -DQLINEAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1
fi
if ! cmake --build "$build" -j16 --target test_cuda >>"$log" 2>&1; then
  grep -E -B2 -A6 'error' "$log" | head -60
  exit 1
fi
echo "build: $((SECONDS - start)) s"
prog="$build/tests/test_cuda"
echo "===== tests" >>"$log"
timeout 240 "$prog" --gtest_filter='MmaLayout*:CudaMmaDecode*' >"$out/test.txt" 2>&1
test_rc=$?
cat "$out/test.txt" >>"$log"
sanit=""
for tool in memcheck racecheck; do
  echo "===== $tool" >>"$log"
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 "$prog" \
    --gtest_filter='CudaMmaDecode.ProcessedWeightsRoundTrip' >"$out/san.txt" 2>&1
  rc=$?
  cat "$out/san.txt" >>"$log"
  sanit="$sanit $tool rc=$rc ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san.txt" | tail -n 1))"
done
rm -f "$out/san.txt"
echo "===== bench" >>"$log"
QL_MMA_BENCH_CSV="$out/bench.csv" timeout 220 "$prog" --gtest_also_run_disabled_tests \
  --gtest_filter='*MmaDecodeBench*' >>"$log" 2>&1
bench_rc=$?
python3 tools/torch_bf16_anchor.py "$out/bench.csv" "$out/joined.csv" >"$out/table.txt" 2>&1
cat "$out/table.txt"
echo "bench rc=$bench_rc; $(grep -E 'Failure' -A3 "$log" | grep -v '^--' | grep -A3 -m1 'bench_mma' | head -n 4)"
echo "=================== TESTS (MmaLayout*, CudaMmaDecode*) rc=$test_rc, $(grep -c '^\[ check \]' "$out/test.txt") checks"
echo "sanitizers:$sanit"
grep -E '^\[  (PASSED|FAILED) |^\[  SKIPPED \]' "$out/test.txt" | head -n 20
grep -E -A4 'Failure$|: Failure' "$out/test.txt" | grep -v '^--$' | head -n 60
rm -f "$out/test.txt"
