// FP8 E4M3 with f32 scales, every granularity: per-tensor, per-token, per-channel, 1xG, 128x128.
// x = s * q; the scale rule depends on the granularity (vLLM's QuantFP8 / scaled_fp8_quant, §3.2, §5.5):
//
//   dynamic per-token   s = max(min(amax, scale_ub) / 448, 1/(448*512))   values above scale_ub saturate
//   1xG (any static-ness) s = max(amax, 1e-10f) / 448                    native_per_token_group_quant_fp8
//   everything else     s = amax / 448, and an all-zero group (or an amax so small that amax/448
//                       underflows f32) uses 1/(448*512) instead of a zero scale that would divide by 0
//
// Each s is rounded to f32 once; q = E4M3_RNE(clamp(x / s, ±448)) with the quotient in double.
// vLLM's CUDA kernels multiply by a reciprocal in f32; on rare ties that can differ by one code.
#include <algorithm>
#include <cmath>

#include "quant/quant_internal.hpp"

namespace qlinear::quant {

namespace {

// torch.clamp(min=1e-10) on an f32 tensor compares against the f32 value of 1e-10.
constexpr double kGroupAmaxFloor = static_cast<double>(1e-10f);

}  // namespace

std::function<double(double)> fp8_scale_rule(const QuantKey& key, const QuantizeOptions& options) {
  const GroupShape& g = key.scale.group;
  const double fp8_max = kFp8E4M3Max;
  const double min_scale = kFp8MinScalingFactor;
  if (g.is_per_token() && !key.scale.is_static) {
    const double ub = options.scale_ub ? static_cast<double>(*options.scale_ub) : HUGE_VAL;
    return [=](double amax) { return std::max(to_f32(std::min(amax, ub) / fp8_max), min_scale); };
  }
  if (g.is_per_group()) {
    return [=](double amax) { return to_f32(std::max(amax, kGroupAmaxFloor) / fp8_max); };
  }
  return [=](double amax) {
    const double s = to_f32(amax / fp8_max);
    return s > 0 ? s : min_scale;
  };
}

Result<QuantizedTensor> quantize_fp8(const Input& x, const QuantKey& key, const QuantizeOptions& options) {
  const GroupShape& g = key.scale.group;
  const GroupGrid grid = group_grid(g, x.rows, x.cols);
  const std::function<double(double)> rule = fp8_scale_rule(key, options);
  QL_ASSIGN_OR_RETURN(std::vector<double> scales, resolve_scales(x, key, grid, options, rule));

  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  q.data = encode_scaled(x, grid, scales, DType::kF8E4M3);
  q.scale = scales_to_tensor(scales, scale_shape(g, x.rows, x.cols));
  return q;
}

}  // namespace qlinear::quant
