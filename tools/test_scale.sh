#!/usr/bin/env bash
# The scale test (`make test-scale`, docs/RELIABILITY.md "Scale test"): a Llama-3.1-8B-shaped BF16 model
# (random weights written as a stream by tools/make_bf16_model.py), quantized to w8a16-fp8 and w4a16-mxfp4
# by `qlinear quantize` under /usr/bin/time -v, then `qlinear inspect` and `qlinear run --m 1,16` of each
# output. Prints one line per step: seconds, GB/s of input, peak RSS.
#
#   tools/test_scale.sh [LAYERS] [WORK_DIR]     LAYERS default 32 (CI: 2); WORK_DIR default build/scale
# Environment: QLINEAR (the binary, default build/qlinear), SCALE_KEEP_INPUT=1 (reuse WORK_DIR/bf16 when it
# holds a model of LAYERS layers), SCALE_RUN_LAYERS (the --layers pattern of the
# run step; default: the first decoder layer's, so that run's time stays bounded at 32 layers), SCALE_VOCAB
# (default 128256, Llama-3.1's; CI uses a smaller one: the embedding and lm_head are only copied).
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERS=${1:-32}
WORK=${2:-build/scale}
QLINEAR=${QLINEAR:-build/qlinear}
RUN_LAYERS=${SCALE_RUN_LAYERS:-'model\.layers\.0\.'}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "scale: /usr/bin/time not found (Debian: apt-get install time)" >&2; exit 1; }
[ -x "$QLINEAR" ] || { echo "scale: $QLINEAR not built" >&2; exit 1; }

if [ "${SCALE_KEEP_INPUT:-0}" = 1 ] && grep -q "\"num_hidden_layers\": $LAYERS\b" "$WORK/bf16/config.json" 2>/dev/null; then
  find "$WORK" -mindepth 1 -maxdepth 1 ! -name bf16 -exec rm -rf {} +
else
  rm -rf "$WORK" && mkdir -p "$WORK"
  python3 tools/make_bf16_model.py "$WORK/bf16" --layers "$LAYERS" --vocab "${SCALE_VOCAB:-128256}"
fi
input_bytes=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metadata']['total_size'])" \
  "$WORK/bf16/model.safetensors.index.json")
cat "$WORK"/bf16/*.safetensors > /dev/null  # into the page cache, as the goal states

measure() {  # name, command...: runs it under time -v, prints seconds, GB/s of the input and peak RSS
  local name=$1
  shift
  "$TIME" -v "$@" > "$WORK/$name.out" 2> "$WORK/$name.time" || { cat "$WORK/$name.out" "$WORK/$name.time" >&2; exit 1; }
  python3 - "$name" "$WORK/$name.time" "$input_bytes" <<'PY'
import re, sys
name, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(path).read()
wall = text.split("Elapsed (wall clock) time (h:mm:ss or m:ss): ")[1].split("\n")[0].split(":")
secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall)))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
cpu = re.search(r"Percent of CPU this job got: (\d+)%", text).group(1)
cpu_s = sum(float(re.search(rf"{k} time \(seconds\): ([0-9.]+)", text).group(1)) for k in ("User", "System"))
print(f"scale: {name:<22} {secs:8.1f} s  {size / 1e9 / secs:6.2f} GB/s of input  peak RSS {rss / 1024 / 1024:6.2f} GiB"
      f"  CPU {cpu}% ({cpu_s:.1f} CPU s)")
PY
}

for scheme in w8a16-fp8 w4a16-mxfp4; do
  measure "quantize-$scheme" "$QLINEAR" quantize "$WORK/bf16" "$WORK/$scheme" --scheme "$scheme"
  measure "inspect-$scheme" "$QLINEAR" inspect "$WORK/$scheme"
  grep -q "quantized layers" "$WORK/inspect-$scheme.out" || { echo "scale: inspect printed no layers" >&2; exit 1; }
  measure "run-$scheme" "$QLINEAR" run "$WORK/$scheme" --m 1,16 --reps 3 --layers "$RUN_LAYERS"
done
echo "scale: ok ($LAYERS layers, $(python3 -c "print(f'{$input_bytes / 1e9:.2f}')") GB of BF16)"
