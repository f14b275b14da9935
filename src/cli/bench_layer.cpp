#include "cli/bench_layer.hpp"

#include <cstring>

#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"

namespace qlinear::cli {

namespace {

// `t` repeated `times` along dim 0 (row-major: the whole buffer `times` times).
Tensor repeat_rows(const Tensor& t, int64_t times) {
  Shape shape = t.shape();
  shape[0] *= times;
  Tensor out = Tensor::empty(t.dtype(), shape);
  const Tensor src = t.contiguous();
  const size_t bytes = static_cast<size_t>(src.nbytes());
  for (int64_t i = 0; i < times; ++i) std::memcpy(static_cast<char*>(out.raw()) + i * bytes, src.raw(), bytes);
  return out;
}

}  // namespace

Result<LinearLayer> bench_layer(const std::string& name, const Scheme& scheme, int64_t n, int64_t k, uint64_t seed) {
  if (n % kTileRows != 0 || n < 2 * kTileRows) {
    return quantize_layer(name, scheme, random_normal(DType::kF32, {n, k}, seed, 0.02));
  }
  // A layer too big for this machine fails now, as quantizing it whole would (std::bad_alloc: "out of
  // memory"), not after the block is quantized: every scheme's codes take at least half a byte per weight
  // (an allocation never touched costs nothing when it succeeds).
  { const Tensor probe = Tensor::empty(DType::kU8, {n, (k + 1) / 2}); }
  QL_ASSIGN_OR_RETURN(LinearLayer layer, quantize_layer(name, scheme, random_normal(DType::kF32, {kTileRows, k}, seed, 0.02)));
  const int64_t times = n / kTileRows;
  for (auto& [param, t] : layer.params) {
    // Per-row tensors (codes, per-channel and MX/NVFP4 block scales, zero-point corrections) have kTileRows
    // rows, 128x128 block scales kTileRows / 128; per-tensor scales have one element and stay.
    if (t.rank() >= 1 && (t.size(0) == kTileRows || (t.rank() == 2 && t.size(0) == kTileRows / 128))) {
      t = repeat_rows(t, times);
    }
  }
  layer.config.n = n;
  return layer;
}

}  // namespace qlinear::cli
