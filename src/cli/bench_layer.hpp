#pragma once
// The layer a benchmark times: `scheme` at [n, k] with valid random codes and scales. Quantizing a model's
// largest projections on the host costs seconds per scheme (the reference quantizers are exact, not fast),
// and timing does not depend on the values, so when n is a multiple of kTileRows (and at least twice it)
// a [kTileRows, k] block is quantized and its codes and scales are repeated down the rows: every row of the
// result is a valid quantized row, with its own memory. Smaller layers are quantized whole.
#include "qlinear/layer.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::cli {

inline constexpr int64_t kTileRows = 512;  // a multiple of the 128-row weight blocks

Result<LinearLayer> bench_layer(const std::string& name, const Scheme& scheme, int64_t n, int64_t k, uint64_t seed);

}  // namespace qlinear::cli
