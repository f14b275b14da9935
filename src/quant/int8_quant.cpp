// INT8 with f32 scales (vLLM §3.3, ops.scaled_int8_quant).
//
// Symmetric, any granularity (per-tensor static/dynamic, per-token dynamic, per-channel weights):
//   s = amax / 127 (rounded to f32); q = clamp(RNE(x / s), -128, 127).
//   vLLM's reference writes round(); its kernels use nearbyint / __float2int_rn, i.e. round half to even,
//   which is what we do. An all-zero group (or an underflowing amax / 127) gets s = 1: any positive scale
//   encodes it as zeros, and 1 keeps the scale tensor free of zeros that would divide later.
//
// Asymmetric (an i32 zero point zp; x = s * (q - zp)):
//   dynamic per-token: over the row, lo = min, hi = max (vLLM does not widen the range to include 0);
//     s = (hi - lo) / 255 (rounded to f32), zp = RNE(-128 - lo / s) (clamped to the i32 range),
//     q = clamp(RNE(x / s) + zp, -128, 127).
//     A constant row (hi == lo) would give s = 0: its range is widened to include 0 first, so that the
//     constant c comes back to f32 accuracy (s = |c|/255, q - zp = ±255); an all-zero row gets s = 1,
//     zp = -128.
//   static per-tensor: s and zp given (options.static_scale, options.static_zero_point), same q.
// vLLM computes hi - lo in f32 before dividing; we take it exactly in double (one rounding, to the f32 s).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "quant/quant_internal.hpp"

namespace qlinear::quant {

namespace {

constexpr double kInt8Max = 127.0;

double rne(double v) { return std::nearbyint(v); }  // default rounding mode: to nearest, ties to even

double clamp_i32(double v) {
  return std::clamp(v, static_cast<double>(std::numeric_limits<int32_t>::min()),
                    static_cast<double>(std::numeric_limits<int32_t>::max()));
}

// q = clamp(RNE(x / s) + zp, -128, 127) for one row with one (s, zp).
void encode_asym_row(const double* x, int64_t cols, double s, double zp, int8_t* out) {
  for (int64_t c = 0; c < cols; ++c) {
    out[c] = static_cast<int8_t>(std::clamp(rne(x[c] / s) + zp, -128.0, 127.0));
  }
}

Result<QuantizedTensor> quantize_asym(const Input& x, const QuantKey& key, const QuantizeOptions& options) {
  const std::string where = "quantize " + key_name(key) + ": ";
  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  q.data = Tensor::empty(DType::kI8, {x.rows, x.cols});
  int8_t* codes = q.data.data<int8_t>();

  if (key.scale.is_static) {  // per-tensor (classify() allows no other static asymmetric key)
    if (!options.static_scale.defined() || !options.static_zero_point.defined()) {
      return Status::error(where + "static asymmetric INT8 needs options.static_scale (f32 [1]) and "
                                   "options.static_zero_point (i32 [1])" +
                           std::string(options.static_scale.defined() ? "; static_zero_point is missing"
                                                                      : "; static_scale is missing"));
    }
    QL_ASSIGN_OR_RETURN(const std::vector<double> s,
                        read_f32_scales(options.static_scale, {1}, true, where + "static_scale"));
    const Tensor& zpt = options.static_zero_point;
    if (zpt.dtype() != DType::kI32 || zpt.numel() != 1 || zpt.rank() > 1) {
      return Status::error(where + "static_zero_point must be i32 [1], got " + zpt.describe());
    }
    const double zp = zpt.contiguous().data<int32_t>()[0];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < x.rows; ++r) encode_asym_row(x.row(r), x.cols, s[0], zp, codes + r * x.cols);
    q.scale = scales_to_tensor(s, {1});
    q.zero_point = Tensor::empty(DType::kI32, {1});
    q.zero_point.data<int32_t>()[0] = static_cast<int32_t>(zp);
    return q;
  }

  // Dynamic per-token.
  q.scale = Tensor::empty(DType::kF32, {x.rows, 1});
  q.zero_point = Tensor::empty(DType::kI32, {x.rows, 1});
  float* scales = q.scale.data<float>();
  int32_t* zps = q.zero_point.data<int32_t>();
  // Rows whose (hi - lo) / 255 is beyond f32 (only an f64 input can do that), reported after the loop.
  std::vector<uint8_t> overflow(static_cast<size_t>(x.rows), 0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const double* v = x.row(r);
    double lo = x.cols > 0 ? v[0] : 0.0;
    double hi = lo;
    for (int64_t c = 1; c < x.cols; ++c) {
      lo = std::min(lo, v[c]);
      hi = std::max(hi, v[c]);
    }
    if (hi == lo) {
      lo = std::min(lo, 0.0);
      hi = std::max(hi, 0.0);
    }
    double s = to_f32((hi - lo) / 255.0);
    if (s == 0) s = 1.0;
    if (!std::isfinite(s)) {
      overflow[r] = 1;
      continue;
    }
    const double zp = clamp_i32(rne(-128.0 - lo / s));
    encode_asym_row(v, x.cols, s, zp, codes + r * x.cols);
    scales[r] = static_cast<float>(s);
    zps[r] = static_cast<int32_t>(zp);
  }
  const auto bad = std::find(overflow.begin(), overflow.end(), 1);
  if (bad != overflow.end()) {
    return Status::error(where + "row " + std::to_string(bad - overflow.begin()) +
                         " spans a range beyond what an f32 scale can express");
  }
  return q;
}

}  // namespace

std::function<double(double)> int8_scale_rule() {
  return [](double amax) {
    const double s = to_f32(amax / kInt8Max);
    return s > 0 ? s : 1.0;
  };
}

Result<QuantizedTensor> quantize_int8(const Input& x, const QuantKey& key, const QuantizeOptions& options) {
  if (!key.symmetric) return quantize_asym(x, key, options);
  const GroupShape& g = key.scale.group;
  const GroupGrid grid = group_grid(g, x.rows, x.cols);
  const std::function<double(double)> rule = int8_scale_rule();
  QL_ASSIGN_OR_RETURN(std::vector<double> scales, resolve_scales(x, key, grid, options, rule));
  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  q.data = encode_scaled(x, grid, scales, DType::kI8);
  q.scale = scales_to_tensor(scales, scale_shape(g, x.rows, x.cols));
  return q;
}

}  // namespace qlinear::quant
