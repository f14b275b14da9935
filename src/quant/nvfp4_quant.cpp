// NVFP4: E2M1 elements, one E4M3 scale per 16 consecutive elements along cols, and a per-tensor f32
// global scale g that is a *multiplier* (compressed-tensors' *_global_scale; vLLM §5.7):
//
//   g   = options.nvfp4_global_scale, or 448 * 6 / amax(x) (rounded to f32; 1 when x is all zeros)
//   sf  = E4M3_RNE_saturating(amax_block / 6 * g)            scale [rows, cols/16] F8E4M3
//   q   = E2M1_RNE_saturating(x * g / sf), 0 where sf == 0   data  [rows, cols/2] packed U8
//   x  ~= q * sf / g                                          scale2 = f32 [1] holding g
//
// g maps the tensor amax onto 448 * 6, the largest value an E4M3 scale times an E2M1 element can hold, so
// the block scales use E4M3's whole range. All arithmetic is in double with the operations in the order
// written above; FlashInfer / vLLM kernels multiply by f32 reciprocals and may differ by one code on ties.
#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/quant_internal.hpp"

namespace qlinear::quant {

namespace {

constexpr int64_t kBlock = 16;
constexpr double kFp4Max = 6.0;

// Reads given block scales (a static key with options.static_scale): F8E4M3 or U8 bytes [rows, cols/16],
// each finite and >= 0.
Status read_static_block_scales(const Tensor& t, int64_t rows, int64_t blocks, const std::string& where,
                                std::vector<uint8_t>& codes) {
  if (t.dtype() != DType::kF8E4M3 && t.dtype() != DType::kU8) {
    return Status::error(where + " must be f8e4m3fn (or its u8 bytes), got " + t.describe());
  }
  const Shape expected{rows, blocks};
  if (t.shape() != expected) {
    return Status::error(where + " has shape " + shape_to_string(t.shape()) + ", expected " +
                         shape_to_string(expected));
  }
  const Tensor c = t.contiguous();
  const uint8_t* bytes = static_cast<const uint8_t*>(c.raw());
  codes.assign(bytes, bytes + rows * blocks);
  for (int64_t i = 0; i < rows * blocks; ++i) {
    const double v = decode(DType::kF8E4M3, codes[static_cast<size_t>(i)]);
    if (!(std::isfinite(v) && v >= 0)) {
      return Status::error(where + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                           " (block scales must be finite and >= 0)");
    }
  }
  return Status::ok();
}

}  // namespace

Result<QuantizedTensor> quantize_nvfp4(const Input& x, const QuantKey& key, const QuantizeOptions& options) {
  const std::string where = "quantize " + key_name(key) + ": ";
  if (x.cols % kBlock != 0) {
    return Status::error(where + "cols = " + std::to_string(x.cols) + " is not a multiple of 16 (the NVFP4 block)");
  }
  const int64_t blocks = x.cols / kBlock;

  double g = 0;
  if (options.nvfp4_global_scale) {
    g = *options.nvfp4_global_scale;
  } else if (options.static_scale.defined()) {
    // Given block scales were made against one particular g; computing another would silently rescale.
    return Status::error(where + "static_scale (block scales) given without options.nvfp4_global_scale");
  } else {
    double amax = 0;
    for (double v : x.values) amax = std::max(amax, std::fabs(v));
    g = amax > 0 ? to_f32(kFp8E4M3Max * kFp4Max / amax) : 1.0;
    // An amax so small that 2688 / amax overflows f32 would give g = inf: keep the largest finite f32.
    if (!std::isfinite(g)) g = static_cast<double>(std::numeric_limits<float>::max());
    // One so large (an f64 input) that g underflows f32 to 0 has no usable global scale.
    if (g == 0) {
      return Status::error(where + "amax " + std::to_string(amax) +
                           " is beyond what an f32 global scale 448*6/amax can express");
    }
  }

  std::vector<uint8_t> sf_codes;
  if (options.static_scale.defined()) {
    QL_RETURN_IF_ERROR(read_static_block_scales(options.static_scale, x.rows, blocks, where + "static_scale",
                                                sf_codes));
  } else {
    sf_codes.resize(static_cast<size_t>(x.rows * blocks));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const double* v = x.row(r) + b * kBlock;
        double amax = 0;
        for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
        sf_codes[static_cast<size_t>(r * blocks + b)] =
            static_cast<uint8_t>(encode(DType::kF8E4M3, amax / kFp4Max * g, Overflow::kSaturate));
      }
    }
  }

  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  const int64_t row_bytes = storage_bytes(DType::kF4E2M1, x.cols);
  q.data = Tensor::zeros(DType::kU8, {x.rows, row_bytes});
  q.scale = Tensor::empty(DType::kF8E4M3, {x.rows, blocks});
  std::copy(sf_codes.begin(), sf_codes.end(), static_cast<uint8_t*>(q.scale.raw()));
  q.scale2 = Tensor::empty(DType::kF32, {1});
  q.scale2.data<float>()[0] = static_cast<float>(g);
  uint8_t* data = q.data.data<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const double* v = x.row(r);
    for (int64_t c = 0; c < x.cols; ++c) {
      const double sf = decode(DType::kF8E4M3, sf_codes[static_cast<size_t>(r * blocks + c / kBlock)]);
      const uint32_t code = sf == 0 ? 0 : encode(DType::kF4E2M1, v[c] * g / sf, Overflow::kSaturate);
      pack_code(DType::kF4E2M1, data + r * row_bytes, c, code);
    }
  }
  return q;
}

}  // namespace qlinear::quant
