#pragma once
// `qlinear run CKPT --tp N` (tp_check.cpp): the checkpoint's layers split across N GPUs, checked against
// one GPU.
#include <vector>

#include "qlinear/loader.hpp"
#include "qlinear/tensor_parallel.hpp"

namespace qlinear::cli {

struct TpCheckInput {
  int tp = 2;
  LoadedModel model;    // the whole (unsplit) model, loaded with `options`
  LoadOptions options;  // layer filter and dtypes; tp_rank/tp_size are set per rank
  std::vector<int64_t> ms;
  bool json = false;
  tp::ParallelOptions parallel;  // how row-parallel layers sum their ranks' partials
};

// Prints a table (or JSON records) and returns the exit code: 0 when every layer matched one GPU.
int run_tensor_parallel(const TpCheckInput& input);

}  // namespace qlinear::cli
