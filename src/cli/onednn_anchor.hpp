#pragma once
// oneDNN, the CPU anchor, measured in the same process on the same shapes (anchors/CPU.md's method):
// weights reordered once into the layout oneDNN picks, rotated copies over bench::cold_set_bytes() so they
// come from DRAM, timed with bench::time_host (src/bench/timing.hpp).
//   int8: s8 x s8 -> f32 with constant per-channel output scales (the brgemm VNNI path); no activation
//         quantization is timed, which favours oneDNN.
//   bf16: bf16 x bf16 -> f32 (the W8A16 anchor: what running unquantized BF16 weights costs); where
//         oneDNN has no bf16 matmul (AVX2 machines) f32 x f32 -> f32, what such a user would run.
#include <string>

#include "bench/timing.hpp"
#include "qlinear/status.hpp"

namespace qlinear::cli {

struct AnchorTiming {
  std::string name;   // "onednn_s8s8", "onednn_bf16"
  std::string impl;   // oneDNN's implementation string
  bench::Timing timing;
  double weight_bytes = 0;
};

bool onednn_available();
std::string onednn_version();  // "3.1.1", or "" without oneDNN
Result<AnchorTiming> time_onednn_matmul(bool int8, int64_t m, int64_t n, int64_t k, int reps);

}  // namespace qlinear::cli
