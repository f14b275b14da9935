#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/CMakeLists.txt, clang, ASan+UBSan) in build-fuzz/ and runs them.
#
#   fuzz/run.sh build                         build only
#   fuzz/run.sh smoke [SECONDS]               each target for SECONDS (default 20) from the committed seeds
#   fuzz/run.sh campaign SECONDS [TARGET...]  the long run: each target (default all) for SECONDS, one after
#                                             the other; the corpus grows in build-fuzz/corpus/<target>
#
# Environment: FUZZ_BUILD (default build-fuzz), FUZZ_JOBS (build parallelism, default 1), FUZZ_NICE (nice
# level of the runs, default 0). Logs: $FUZZ_BUILD/logs/<target>.log; crashes: $FUZZ_BUILD/artifacts/<target>/.
# Exit status: non-zero when a build fails or a target reports a finding (crash, leak, sanitizer report,
# timeout, out-of-memory), and the reproducer's path is printed.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-1}
NICE=${FUZZ_NICE:-0}
TARGETS=(fuzz_safetensors fuzz_quant_config fuzz_cli_args fuzz_checkpoint_dir)

build() {
  if ! command -v clang++ >/dev/null; then
    echo "fuzz: clang++ not found (tools/setup.sh installs clang and libclang-rt-14-dev)" >&2
    exit 1
  fi
  cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  cmake --build "$BUILD" -j "$JOBS"
}

# Per-target options: input size cap and dictionary.
options_for() {
  case "$1" in
    fuzz_safetensors) echo "-max_len=8192 -dict=fuzz/json.dict" ;;
    fuzz_quant_config) echo "-max_len=8192 -dict=fuzz/json.dict" ;;
    fuzz_cli_args) echo "-max_len=512" ;;
    fuzz_checkpoint_dir) echo "-max_len=32768 -dict=fuzz/json.dict" ;;
  esac
}

run_target() {
  local target=$1 seconds=$2 corpus_name=${1#fuzz_}
  local work="$BUILD/corpus/$corpus_name" artifacts="$BUILD/artifacts/$corpus_name/" log="$BUILD/logs/$target.log"
  mkdir -p "$work" "$artifacts" "$BUILD/logs"
  local start=$SECONDS
  # New inputs go to the first directory (build-fuzz/), never into the committed seeds.
  # shellcheck disable=SC2046
  if nice -n "$NICE" "$BUILD/$target" $(options_for "$target") -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" \
      "$work" "fuzz/corpus/$corpus_name" >"$log" 2>&1; then
    local runs cov
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
    printf 'fuzz: %-18s ok  %8s runs  cov %5s  %4ds  corpus %s files\n' "$target" "$runs" "$cov" \
      $((SECONDS - start)) "$(ls "$work" | wc -l)"
  else
    echo "fuzz: $target FOUND A PROBLEM (log: $log)" >&2
    grep -E 'ERROR|broken promise|SUMMARY|Test unit written' "$log" | head -20 >&2 || tail -30 "$log" >&2
    return 1
  fi
}

cmd=${1:-smoke}
case "$cmd" in
  build) build ;;
  smoke)
    build
    status=0
    for t in "${TARGETS[@]}"; do run_target "$t" "${2:-20}" || status=1; done
    exit $status
    ;;
  campaign)
    seconds=${2:?usage: fuzz/run.sh campaign SECONDS [TARGET...]}
    shift 2
    [ $# -gt 0 ] && TARGETS=("$@")
    build
    status=0
    for t in "${TARGETS[@]}"; do run_target "$t" "$seconds" || status=1; done
    exit $status
    ;;
  *) echo "usage: fuzz/run.sh build | smoke [SECONDS] | campaign SECONDS [TARGET...]" >&2; exit 2 ;;
esac
