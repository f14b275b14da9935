// quantize_layer_chunked (quantize_checkpoint.hpp): the reference quantizer run on row chunks in parallel,
// the pieces joined so that the result equals quantize_layer of the whole weight, byte for byte.
#include <algorithm>
#include <cstring>
#include <vector>

#include "qlinear/quantize_checkpoint.hpp"

namespace qlinear {

namespace {

constexpr int64_t kRowAlign = 128;                  // the largest row group of any scheme (FP8 128x128 blocks)
constexpr int64_t kChunkElements = int64_t{1} << 20;  // ~1 M weights a chunk: many chunks for 2+ threads

bool has_per_tensor_weight_scale(const Scheme& s) {
  return s.weight_key.scale.group.is_per_tensor() || s.weight_key.scale2.has_value();
}

// The row-major element with the largest magnitude, sign cleared, as raw bits; nullopt when the weight holds
// an Inf or NaN (then quantize_layer runs on the whole weight, whatever it does with them).
std::optional<uint32_t> max_magnitude_bits(const Tensor& w) {
  const int64_t n = w.numel();
  if (w.dtype() == DType::kF32) {
    const uint32_t* p = w.data<uint32_t>();
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
    for (int64_t i = 0; i < n; ++i) m = std::max(m, p[i] & 0x7FFFFFFFu);
    if (m >= 0x7F800000u) return std::nullopt;
    return m;
  }
  const uint16_t* p = w.data<uint16_t>();
  uint16_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
  for (int64_t i = 0; i < n; ++i) m = std::max<uint16_t>(m, p[i] & 0x7FFF);
  const uint16_t inf = w.dtype() == DType::kBF16 ? 0x7F80 : 0x7C00;
  if (m >= inf) return std::nullopt;
  return m;
}

}  // namespace

Result<LinearLayer> quantize_layer_chunked(std::string name, const Scheme& scheme, const Tensor& weight,
                                           const MakeLayerOptions& options) {
  const bool widths = !options.logical_widths.empty();
  const bool floatish = weight.dtype() == DType::kF32 || weight.dtype() == DType::kBF16 || weight.dtype() == DType::kF16;
  if (weight.rank() != 2 || !weight.is_contiguous() || !floatish || widths) {
    return quantize_layer(std::move(name), scheme, weight, options);
  }
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t rows = std::max(2 * kRowAlign, (kChunkElements / std::max<int64_t>(k, 1)) / kRowAlign * kRowAlign);
  if (n <= rows) return quantize_layer(std::move(name), scheme, weight, options);
  const bool per_tensor = has_per_tensor_weight_scale(scheme);
  std::optional<uint32_t> max_bits;
  if (per_tensor) {
    max_bits = max_magnitude_bits(weight);
    if (!max_bits) return quantize_layer(std::move(name), scheme, weight, options);
  }
  const int64_t chunks = (n + rows - 1) / rows;
  const int64_t esize = element_size(weight.dtype());
  std::vector<std::optional<Result<LinearLayer>>> parts(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * rows, nr = std::min(rows, n - r0);
    const char* src = static_cast<const char*>(weight.raw()) + r0 * k * esize;
    Tensor piece = Tensor::empty(weight.dtype(), {nr + (per_tensor ? 1 : 0), k});
    std::memcpy(piece.raw(), src, static_cast<size_t>(nr * k * esize));
    if (per_tensor) {  // the extra row: the whole weight's largest magnitude, then zeros
      char* extra = static_cast<char*>(piece.raw()) + nr * k * esize;
      std::memset(extra, 0, static_cast<size_t>(k * esize));
      if (esize == 4) std::memcpy(extra, &*max_bits, 4);
      else {
        const uint16_t b = static_cast<uint16_t>(*max_bits);
        std::memcpy(extra, &b, 2);
      }
    }
    parts[static_cast<size_t>(c)] = quantize_layer(name, scheme, piece, options);
  }
  for (auto& p : parts) {
    if (!*p) return p->status().with_context("layer " + name);
  }
  // Join: a parameter with a row per weight row (or per 128-row block) is concatenated, the extra row
  // dropped; any other (per-tensor scales, input scales) must be the same in every chunk.
  LinearLayer out = std::move(**parts[0]);
  for (auto& [pname, t0] : out.params) {
    const auto rows_of = [&](int64_t c) { return std::min(rows, n - c * rows); };
    const int64_t r0 = rows_of(0);
    const bool row_indexed = t0.defined() && t0.rank() >= 2 &&
                             (t0.size(0) == r0 + (per_tensor ? 1 : 0) ||
                              (!per_tensor && t0.size(0) == (r0 + kRowAlign - 1) / kRowAlign));
    if (!row_indexed) {
      for (int64_t c = 1; c < chunks; ++c) {
        const Tensor& tc = (**parts[static_cast<size_t>(c)]).params.at(pname);
        if (tc.shape() != t0.shape() || tc.nbytes() != t0.nbytes() ||
            std::memcmp(tc.raw(), t0.raw(), static_cast<size_t>(t0.nbytes())) != 0) {
          return Status::error("layer " + name + ": parameter " + pname + " differs between row chunks (" +
                               t0.describe() + " vs " + tc.describe() + "); the chunked quantizer cannot join it");
        }
      }
      continue;
    }
    const bool per_block = t0.size(0) != r0 + (per_tensor ? 1 : 0);
    int64_t total_rows = 0;
    std::vector<int64_t> kept(static_cast<size_t>(chunks));
    for (int64_t c = 0; c < chunks; ++c) {
      kept[static_cast<size_t>(c)] = per_block ? (rows_of(c) + kRowAlign - 1) / kRowAlign : rows_of(c);
      total_rows += kept[static_cast<size_t>(c)];
    }
    Shape shape = t0.shape();
    shape[0] = total_rows;
    Tensor joined = Tensor::empty(t0.dtype(), shape);
    const int64_t row_bytes = t0.nbytes() / t0.size(0);
    char* dst = static_cast<char*>(joined.raw());
    for (int64_t c = 0; c < chunks; ++c) {
      const Tensor& tc = c == 0 ? t0 : (**parts[static_cast<size_t>(c)]).params.at(pname);
      const size_t bytes = static_cast<size_t>(kept[static_cast<size_t>(c)] * row_bytes);
      std::memcpy(dst, tc.raw(), bytes);
      dst += bytes;
    }
    t0 = std::move(joined);
  }
  out.config.n = n;
  return out;
}

}  // namespace qlinear
