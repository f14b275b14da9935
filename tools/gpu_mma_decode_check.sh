#!/usr/bin/env bash
# On a GPU host: builds test_cuda, runs the tensor-core decode tests (and compute-sanitizer memcheck and
# racecheck on a small subset), times the kernels against cuBLASLt BF16 (C++) and torch BF16 mm (Python),
# and prints the joined table last. Logs go to $OUT (default ./mma_decode_out).
#   tools/gpu_mma_decode_check.sh [BUILD_DIR]
set -u
build=${1:-build-gpu}
out=${OUT:-mma_decode_out}
mkdir -p "$out"
gen="Unix Makefiles"
command -v ninja >/dev/null && gen=Ninja
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G "$gen" -DQLINEAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; exit 1; }
fi
start=$SECONDS
cmake --build "$build" -j16 --target test_cuda >"$out/build.log" 2>&1 || { grep -B2 -A8 -m5 error "$out/build.log"; tail -20 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - start)) s"
prog="$build/tests/test_cuda"
timeout 300 "$prog" --gtest_filter='MmaLayout*:CudaMmaDecode*' >"$out/test.log" 2>&1
echo "tests rc=$? ($(grep -c '^\[ check \]' "$out/test.log") checks)"
grep -E '^\[  (FAILED|PASSED) |Failure|rror' "$out/test.log" | head -40
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$prog" \
    --gtest_filter='CudaMmaDecode.ProcessedWeightsRoundTrip' >"$out/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -1)"
done
QL_MMA_BENCH_CSV="$out/bench.csv" timeout 300 "$prog" --gtest_also_run_disabled_tests \
  --gtest_filter='*MmaDecodeBench*' >"$out/bench.log" 2>&1
echo "bench rc=$?"
grep -E 'Failure|rror' "$out/bench.log" | head -5
python3 tools/torch_bf16_anchor.py "$out/bench.csv" "$out/joined.csv" >"$out/table.txt" 2>&1
cat "$out/table.txt"
