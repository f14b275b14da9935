#pragma once
// `qlinear tune --decode`: for each weight shape, weight code and M above 16, the routes of the tensor-core
// decode GEMM (cuda::mma_decode_candidates: wgmma token tiles, 256-row units and split counts, the mma.sync
// kernel, the widen route) timed with the benchmark method (timing.hpp: CUDA events, L2 flushed before
// every repetition, medians) against the built-in rules on random valid codes and scales; the fastest
// becomes the tuned table's entry (backends/cuda/tuning/mma_decode_table.hpp) where it gains at least
// kMmaDecodeMinGain.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/tuning/mma_decode_table.hpp"
#include "bench/shapes.hpp"
#include "bench/timing.hpp"

namespace qlinear::bench {

struct MmaTuneOptions {
  std::vector<LayerShape> layers;
  std::vector<int64_t> ms;           // each M (> 16) is the upper bound of a bucket
  std::vector<std::string> schemes;  // weight-only schemes of the decode kernels, one per weight code
  int reps = 30;
};

struct MmaTuneResult {
  LayerShape layer;
  std::string scheme;
  int64_t m = 0;
  double rule_us = 0;                 // the built-in rules (what an untuned call runs)
  std::string rule_route;             // what they chose, in words
  double best_us = 0;
  cuda::MmaDecodeTunedEntry best;     // the fastest candidate, keyed to this layer (device: device_name)
  std::string device_name;
  std::vector<std::string> failed;    // the candidates that did not run, with why
  // The table's entry: the best where it gains >= kMmaDecodeMinGain, else kRule (the bucket kept, so that
  // the next bucket does not reach down into it).
  cuda::MmaDecodeTunedEntry entry() const {
    cuda::MmaDecodeTunedEntry e = best;
    e.device = device_name.c_str();
    if (rule_us < cuda::kMmaDecodeMinGain * best_us) {
      e.route = cuda::MmaDecodeRoute::kRule;
      e.tokens = e.rows = e.splits = 0;
    }
    return e;
  }
};

// The weight-only schemes whose codes `qlinear tune --decode` tunes by default: E4M3, E2M3, E2M1.
inline const char* const kMmaTuneDefaultSchemes = "w8a16-fp8,w6a16-mxfp6-e2m3,w4a16-mxfp4";

// Runs the tuning; `progress` gets each result as it is measured. An error names the problem that failed.
Result<std::vector<MmaTuneResult>> tune_mma_decode(const MmaTuneOptions& options, DeviceTimer& timer,
                                                   const std::function<void(const MmaTuneResult&)>& progress);

}  // namespace qlinear::bench
