// OCP MX quantization: 32 consecutive elements along cols share one E8M0 scale 2^e (OCP MX v1.0 §5).
//
//   scale [rows, cols/32] U8 (E8M0 code e + 127)        data [rows, cols] F8E4M3, or packed U8 for FP6/FP4
//   row r: | x[r, 0..31] -> code[r, 0] | x[r, 32..63] -> code[r, 1] | ...
//
// The exponent rule is the producer's choice (MxScaleRule, documented in quantize.hpp). We evaluate each
// rule exactly with frexp instead of log2() in floating point: vLLM's torch path computes
// ceil(log2(amax / 448)) in f32, which can land one binade low when amax / 448 is within an f32 ulp above a
// power of two. Elements are encode(elem, x / 2^e) with RNE and saturation; the division is exact.
#include <algorithm>
#include <bit>
#include <cmath>

#include "quant/quant_internal.hpp"

namespace qlinear::quant {

namespace {

constexpr int64_t kBlock = 32;
constexpr int kMinExp = -127;  // E8M0 code 0
constexpr int kMaxExp = 127;   // E8M0 code 254 (255 is NaN)

// floor(log2(v)) for finite v > 0, exact (frexp gives v = f * 2^k with f in [0.5, 1)).
int floor_log2(double v) {
  int k = 0;
  std::frexp(v, &k);
  return k - 1;
}

// ceil(log2(a / m)) for finite a, m > 0, exact: the smallest e with a <= m * 2^e.
int ceil_log2_ratio(double a, double m) {
  int ka = 0, km = 0;
  const double fa = std::frexp(a, &ka);
  const double fm = std::frexp(m, &km);
  return ka - km + (fa > fm ? 1 : 0);
}

// Quark's "even" rule (quantize.hpp) on the f32 bits of amax, as its even_round does it.
int quark_even_exponent(double amax, DType elem) {
  const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(amax));
  const int mbits = traits(elem).mantissa_bits;
  const int field = static_cast<int>(((bits + (1u << (22 - mbits))) >> 23) & 0xFF);
  if (field == 0) return kMinExp;
  if (field == 0xFF) return kMaxExp;
  return field - 127 - floor_log2(traits(elem).max_finite);
}

int shared_exponent(double amax, DType elem, MxScaleRule rule) {
  if (amax == 0) return kMinExp;
  const double max_finite = traits(elem).max_finite;
  int e = 0;
  switch (rule) {
    case MxScaleRule::kCeilOverMax: e = ceil_log2_ratio(amax, max_finite); break;
    case MxScaleRule::kFloorLog2: e = floor_log2(amax); break;
    case MxScaleRule::kOcp: e = floor_log2(amax) - floor_log2(max_finite); break;  // emax = floor(log2 max)
    case MxScaleRule::kQuarkEven: e = quark_even_exponent(amax, elem); break;
  }
  return std::clamp(e, kMinExp, kMaxExp);
}

// Reads a given E8M0 scale tensor (U8 or E8M0 bytes, [rows, cols/32]) into unbiased exponents.
Status read_static_exponents(const Tensor& t, int64_t rows, int64_t blocks, const std::string& where,
                             std::vector<int>& exps) {
  if (t.dtype() != DType::kU8 && t.dtype() != DType::kE8M0) {
    return Status::error(where + " must be u8 or e8m0 bytes, got " + t.describe());
  }
  const Shape expected{rows, blocks};
  if (t.shape() != expected) {
    return Status::error(where + " has shape " + shape_to_string(t.shape()) + ", expected " +
                         shape_to_string(expected));
  }
  const Tensor c = t.contiguous();
  const uint8_t* codes = static_cast<const uint8_t*>(c.raw());
  exps.resize(static_cast<size_t>(rows * blocks));
  for (int64_t i = 0; i < rows * blocks; ++i) {
    if (codes[i] == 0xFF) return Status::error(where + "[" + std::to_string(i) + "] is 255, the E8M0 NaN");
    exps[static_cast<size_t>(i)] = static_cast<int>(codes[i]) - 127;
  }
  return Status::ok();
}

}  // namespace

}  // namespace qlinear::quant

namespace qlinear {

MxScaleRule default_mx_rule(const QuantKey& key) {
  const bool fp6_or_fp4 = key.dtype == DType::kF6E2M3 || key.dtype == DType::kF6E3M2 || key.dtype == DType::kF4E2M1;
  const bool dynamic_mx = key.scale.dtype == DType::kE8M0 && !key.scale.is_static;
  return fp6_or_fp4 && dynamic_mx ? MxScaleRule::kQuarkEven : MxScaleRule::kCeilOverMax;
}

}  // namespace qlinear

namespace qlinear::quant {

Result<QuantizedTensor> quantize_mx(const Input& x, const QuantKey& key, const QuantizeOptions& options) {
  const std::string where = "quantize " + key_name(key) + ": ";
  if (x.cols % kBlock != 0) {
    return Status::error(where + "cols = " + std::to_string(x.cols) + " is not a multiple of 32 (the MX block)");
  }
  const DType elem = key.dtype;
  const int64_t blocks = x.cols / kBlock;

  // Unbiased exponent per block: given (a static key with options.static_scale), else from the data.
  std::vector<int> exps;
  const MxScaleRule rule = options.mx_rule.value_or(default_mx_rule(key));
  if (options.static_scale.defined()) {
    QL_RETURN_IF_ERROR(read_static_exponents(options.static_scale, x.rows, blocks, where + "static_scale", exps));
  } else {
    exps.resize(static_cast<size_t>(x.rows * blocks));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const double* v = x.row(r) + b * kBlock;
        double amax = 0;
        for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
        exps[static_cast<size_t>(r * blocks + b)] = shared_exponent(amax, elem, rule);
      }
    }
  }

  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  const bool packed = is_packed(elem);
  const int64_t row_bytes = packed ? storage_bytes(elem, x.cols) : x.cols;
  q.data = packed ? Tensor::zeros(DType::kU8, {x.rows, row_bytes}) : Tensor::empty(elem, {x.rows, x.cols});
  q.scale = Tensor::empty(DType::kU8, {x.rows, blocks});
  uint8_t* data = static_cast<uint8_t*>(q.data.raw());
  uint8_t* scale = q.scale.data<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const double* v = x.row(r);
    uint8_t* out = data + r * row_bytes;
    for (int64_t c = 0; c < x.cols; ++c) {
      const int e = exps[static_cast<size_t>(r * blocks + c / kBlock)];
      const uint32_t code = encode(elem, std::ldexp(v[c], -e), Overflow::kSaturate);
      if (packed) {
        pack_code(elem, out, c, code);
      } else {
        out[c] = static_cast<uint8_t>(code);
      }
    }
    for (int64_t b = 0; b < blocks; ++b) scale[r * blocks + b] = static_cast<uint8_t>(exps[r * blocks + b] + 127);
  }
  return q;
}

}  // namespace qlinear::quant
