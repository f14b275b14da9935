#pragma once
// `qlinear tune`: for each GEMM kind, weight shape and M, every cuBLASLt heuristic candidate timed with
// the benchmark method (timing.hpp: CUDA events, L2 flushed before every repetition, medians) on random
// operands; the fastest becomes the tuned table's entry (backends/cuda/tuning/cublaslt_table.hpp).
// Candidates are first timed with few repetitions; the best few are timed again with the full count.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/tuning/cublaslt_table.hpp"
#include "bench/shapes.hpp"
#include "bench/timing.hpp"

namespace qlinear::bench {

struct LtTuneOptions {
  std::vector<LayerShape> layers;
  std::vector<int64_t> ms;  // each M is the upper bound of a bucket
  std::vector<cuda::LtKind> kinds;
  int candidates = 16;      // asked of the heuristic
  int quick_reps = 10;      // first round, every candidate
  int reps = 30;            // second round, the best `finalists`
  int finalists = 3;
  uint64_t max_workspace = 32u << 20;
};

struct LtTuneResult {
  cuda::LtKind kind;
  LayerShape layer;
  int64_t m = 0;
  int candidates = 0;
  double heuristic_us = 0;  // the heuristic's first choice (what an untuned call runs)
  double best_us = 0;
  int best_rank = 0;        // the winner's place in the heuristic's order
  cuda::LtTunedEntry entry; // device name owned by the result (device_name below)
  std::string device_name;
};

// Runs the tuning; `progress` gets each result as it is measured. An error names the problem that failed.
Result<std::vector<LtTuneResult>> tune_cublaslt(const LtTuneOptions& options, DeviceTimer& timer,
                                                const std::function<void(const LtTuneResult&)>& progress);

}  // namespace qlinear::bench
