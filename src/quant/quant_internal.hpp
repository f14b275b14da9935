#pragma once
// Shared pieces of the reference quantizers (src/quant/): key classification, group geometry, input
// loading and the per-family entry points that quantize.cpp / dequantize.cpp dispatch to.
//
// Numerics convention for every family: inputs are widened exactly to double; amax and scales are derived
// in double and a scale that is stored as f32 is rounded to f32 once (RNE) *before* it is used, so
// dequantize(q) reproduces exactly the scale the codes were made with. Element codes are
// formats::encode(x / s) with the quotient taken in double (no reciprocal multiply).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qlinear/quantize.hpp"

namespace qlinear::quant {

// The four families a supported key belongs to; each has its own file.
enum class Family : uint8_t {
  kFp8,   // F8E4M3 elements, f32 scales on any group grid            (fp8_quant.cpp)
  kInt8,  // I8 elements, f32 scales, symmetric or with an i32 zero point (int8_quant.cpp)
  kMx,    // OCP MX: E4M3/E2M3/E3M2/E2M1 elements, E8M0 scale per 1x32   (mx_quant.cpp)
  kNvfp4, // E2M1 elements, E4M3 scale per 1x16, f32 global multiplier   (nvfp4_quant.cpp)
};

// Which family `key` belongs to, or an error that names the key and the part that is not supported.
Result<Family> classify(const QuantKey& key);

// The grid of groups that f32 scales cover on a [rows, cols] operand (FP8 / INT8 families).
//   per-tensor (-1,-1): one group;  per-token (1,-1) and per-channel (-1,1): one group per row
//   (vLLM's per-channel is per output channel, i.e. per row of a weight [N, K]);
//   otherwise (R, C) with -1 meaning the whole dimension: ceil(rows/R) x ceil(cols/C) groups,
//   the last ones partial.
struct GroupGrid {
  int64_t row_extent = 1;  // rows one group spans
  int64_t col_extent = 1;  // cols one group spans
  int64_t grid_rows = 1;
  int64_t grid_cols = 1;
  int64_t index(int64_t r, int64_t c) const { return (r / row_extent) * grid_cols + c / col_extent; }
  int64_t size() const { return grid_rows * grid_cols; }
};
GroupGrid group_grid(const GroupShape& group, int64_t rows, int64_t cols);

// A float input widened to double, row-major [rows, cols].
struct Input {
  std::vector<double> values;
  int64_t rows = 0;
  int64_t cols = 0;
  const double* row(int64_t r) const { return values.data() + r * cols; }
};

// Per-group amax (max |x|) over `grid`; exact and independent of thread count.
std::vector<double> group_amax(const Input& x, const GroupGrid& grid);

// Reads an f32 scale tensor ([1] or [] for per-tensor, else scale_shape) into doubles, checking that every
// value is finite and > 0 (>= 0 with allow_zero: dequantizing a checkpoint whose producer wrote zero
// scales for all-zero channels). `where` starts every message ("quantize kFp8StaticTensorSym: static_scale").
Result<std::vector<double>> read_f32_scales(const Tensor& t, const Shape& expected, bool allow_scalar,
                                            const std::string& where, bool allow_zero = false);

// Rounds a scale derived in double to the f32 it is stored as.
inline double to_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

// Per-family quantizers. `x` is validated (2-D, finite); `options` is validated against the key.
Result<QuantizedTensor> quantize_fp8(const Input& x, const QuantKey& key, const QuantizeOptions& options);
Result<QuantizedTensor> quantize_int8(const Input& x, const QuantKey& key, const QuantizeOptions& options);
Result<QuantizedTensor> quantize_mx(const Input& x, const QuantKey& key, const QuantizeOptions& options);
Result<QuantizedTensor> quantize_nvfp4(const Input& x, const QuantKey& key, const QuantizeOptions& options);

// The f32 scales of an FP8 / symmetric INT8 key, one per group of `grid`: options.static_scale when given
// (shape scale_shape(); [] also accepted per-tensor); otherwise computed per group by `from_amax` (already
// rounded to f32). Static keys compute them too when their granularity is a weight's (per-tensor,
// per-channel, 2-D blocks): that is how a checkpoint producer makes them. Static per-token and 1xG are
// activation granularities whose scale must be given.
Result<std::vector<double>> resolve_scales(const Input& x, const QuantKey& key, const GroupGrid& grid,
                                           const QuantizeOptions& options,
                                           const std::function<double(double amax)>& from_amax);

// resolve_scales with the per-group amax supplied by `amax` (called only when the scales are computed):
// the vectorized quantizer (fast_quantize.cpp) computes it its own way and shares the rest.
Result<std::vector<double>> resolve_scales_from(int64_t rows, int64_t cols, const QuantKey& key,
                                                const QuantizeOptions& options,
                                                const std::function<std::vector<double>()>& amax,
                                                const std::function<double(double amax)>& from_amax);

// The scale rules, amax -> f32 scale (as a double): FP8 by granularity (fp8_quant.cpp), symmetric INT8.
std::function<double(double)> fp8_scale_rule(const QuantKey& key, const QuantizeOptions& options);
std::function<double(double)> int8_scale_rule();

// Options that the key would not use are errors rather than silently ignored (quantize.cpp).
Status check_options(const QuantKey& key, Family family, const QuantizeOptions& options);

// Shared by the FP8 and symmetric INT8 quantizers: codes = encode(elem, x / s[group]) for given scales.
Tensor encode_scaled(const Input& x, const GroupGrid& grid, const std::vector<double>& scales, DType elem);
// The [1] / [grid] f32 tensor holding `scales`.
Tensor scales_to_tensor(const std::vector<double>& scales, const Shape& shape);

}  // namespace qlinear::quant
