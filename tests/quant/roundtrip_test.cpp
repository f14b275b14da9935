// dequantize(quantize(x)) against x, within each format's own error bound (STYLE 8, the end-to-end oracle).
//
// For an element x with effective scale σ (FP8/INT8: its group's s; MX: 2^e; NVFP4: sf/g) the bound is
//   |x̂ - x| <= rel * |x| + (min_subnormal / 2) * σ + sat,      sat = max(0, |x| - max_finite * σ)
// with rel = 2^-(mantissa bits + 1) (INT8: 0, and 1/2 a step absolute), and sat, the saturation error,
// limited per rule: ~0 where the scale keeps the block maximum in range (FP8, INT8, MX ceil and floor
// rules), 1 - max/2^(emax+1) of |x| for the OCP rule, and the E4M3 rounding of the block scale for NVFP4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "quant/quant_test_util.hpp"

namespace qlinear {
namespace {

using quant_test::code_at;
using quant_test::make_tensor;

// Rows of different magnitudes: zeros, ordinary, huge and tiny f32 values, wide dynamic range, one lone
// value; cols a multiple of 32 so that every key applies.
std::vector<double> test_values(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> expo(-3, 3);
  std::vector<double> v(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t r = 1; r < rows; ++r) {
    const double row_mag = r == 2 ? 1e30 : r == 3 ? 1e-30 : std::pow(10.0, expo(rng));
    for (int64_t c = 0; c < cols; ++c) {
      const double mag = r == 4 ? std::pow(10.0, 2 * expo(rng)) : row_mag;
      v[r * cols + c] = r == 5 ? (c == 17 ? -3.5 : 0.0) : normal(rng) * mag;
    }
  }
  return v;
}

// The value of x as the quantizer saw it (rounded to the input dtype).
std::vector<double> as_seen(const Tensor& x) {
  std::vector<double> v(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) v[i] = element_as_double(x, i);
  return v;
}

// The index of (r, c)'s scale in a [rows, cols] operand's scale tensor under `g` (scale_shape's layout).
int64_t scale_index(const GroupShape& g, int64_t r, int64_t c, const Shape& scale_shape) {
  if (g.is_per_tensor()) return 0;
  if (g.is_per_token() || g.is_per_channel()) return r;
  const int64_t gr = g.row == -1 ? 0 : r / g.row, gc = g.col == -1 ? 0 : c / g.col;
  return gr * scale_shape[1] + gc;
}

struct Bound {
  double rel = 0;           // of |x|
  double abs_per_scale = 0; // times σ
  double max_code = 0;      // largest |code value|
};

Bound element_bound(DType elem) {
  if (elem == DType::kI8) return {0.0, 0.5, 127.0};
  const FormatTraits& t = traits(elem);
  return {std::ldexp(1.0, -(t.mantissa_bits + 1)), t.min_subnormal / 2, t.max_finite};
}

// Static keys that need a given scale get the one a calibration would produce.
QuantizeOptions options_for(const QuantKey& key, const std::vector<double>& v, int64_t rows, int64_t cols) {
  QuantizeOptions o;
  if (key == kFp8StaticTokenSym) {
    Tensor s = Tensor::empty(DType::kF32, {rows, 1});
    for (int64_t r = 0; r < rows; ++r) {
      double amax = 0;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(v[r * cols + c]));
      s.data<float>()[r] = std::max(static_cast<float>(amax / 448.0), kFp8MinScalingFactor);
    }
    o.static_scale = s;
  } else if (key == kInt8StaticTensorAsym) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const float s = static_cast<float>((*hi - *lo) / 255.0);
    o.static_scale = quant_test::f32_tensor({1}, {s});
    o.static_zero_point = quant_test::i32_tensor({1}, {static_cast<int32_t>(std::nearbyint(-128.0 - *lo / s))});
  }
  return o;
}

// Checks every element of dequantize(q) against x; returns the number of violations (reports the first few).
int check_roundtrip(const QuantizedTensor& q, const std::vector<double>& x, MxScaleRule rule) {
  const auto d64 = dequantize(q, DType::kF64);
  const auto d32 = dequantize(q, DType::kF32);
  EXPECT_TRUE(d64.is_ok() && d32.is_ok()) << d64.message();
  if (!d64.is_ok() || !d32.is_ok()) return 1;
  const QuantKey& key = q.key;
  const bool mx = key.scale.dtype == DType::kE8M0, nvfp4 = key.scale.dtype == DType::kF8E4M3;
  const Bound b = element_bound(key.dtype);
  double g = 1;
  if (nvfp4) g = q.scale2.data<float>()[0];
  int bad = 0;
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t i = r * q.cols + c;
      const double xv = x[i], got = d64->data<double>()[i];
      EXPECT_EQ(d32->data<float>()[i], static_cast<float>(got));  // F32 output is the F64 value rounded once
      double sigma = 0, abs = b.abs_per_scale, sat_limit = 0x1p-20 * std::fabs(xv);
      if (mx) {
        sigma = std::ldexp(1.0, int{quant_test::u8_at(q.scale, r * (q.cols / 32) + c / 32)} - 127);
        if (rule == MxScaleRule::kOcp) {
          const int emax = std::ilogb(b.max_code);
          sat_limit = (1 - b.max_code / std::ldexp(1.0, emax + 1)) * std::fabs(xv);
        } else if (rule == MxScaleRule::kQuarkEven) {  // amax < (2 - 2^-(M+1)) * 2^emax * sigma
          const double threshold = 2.0 - std::ldexp(1.0, -(traits(key.dtype).mantissa_bits + 1));
          sat_limit = (1 - b.max_code / std::ldexp(threshold, std::ilogb(b.max_code))) * std::fabs(xv);
        }
      } else if (nvfp4) {
        sigma = decode(DType::kF8E4M3, quant_test::u8_at(q.scale, r * (q.cols / 16) + c / 16)) / g;
        double amax_blk = 0;
        for (int64_t k = c / 16 * 16; k < c / 16 * 16 + 16; ++k) {
          amax_blk = std::max(amax_blk, std::fabs(x[r * q.cols + k]));
        }
        sat_limit = 0.072 * amax_blk + 6 * 0x1p-10 / g;
      } else {
        sigma = q.scale.data<float>()[scale_index(key.scale.group, r, c, q.scale.shape())];
        if (!key.symmetric) abs = 1.0;  // half a step, plus half a step of zero-point rounding
      }
      // Asymmetric INT8 maps [lo, hi] onto [-128, 127] through the zero point: nothing saturates.
      const double sat = key.symmetric ? std::max(0.0, std::fabs(xv) - b.max_code * sigma) : 0.0;
      const double bound = b.rel * std::fabs(xv) + abs * sigma + sat;
      const double err = std::fabs(got - xv);
      if (!(err <= bound * (1 + 1e-12)) || !(sat <= sat_limit + 1e-300)) {
        if (++bad <= 5) {
          ADD_FAILURE() << key_name(key) << " [" << r << ", " << c << "]: x = " << xv << ", dequantized " << got
                        << ", error " << err << " > bound " << bound << " (σ = " << sigma << ", saturation "
                        << sat << ", allowed " << sat_limit << ")";
        }
      }
    }
  }
  return bad;
}

TEST(RoundTrip, EveryNamedKeyWithinItsFormatBound) {
  const int64_t rows = 37, cols = 256;
  const Tensor x = make_tensor(DType::kF32, rows, cols, test_values(rows, cols, 1));
  const std::vector<double> v = as_seen(x);
  for (const NamedKey& k : named_keys()) {
    const bool is_mx = k.key.scale.dtype == DType::kE8M0;
    for (MxScaleRule rule :
         {MxScaleRule::kCeilOverMax, MxScaleRule::kFloorLog2, MxScaleRule::kOcp, MxScaleRule::kQuarkEven}) {
      if (!is_mx && rule != MxScaleRule::kCeilOverMax) continue;
      SCOPED_TRACE(std::string(k.name) + " rule " + std::to_string(static_cast<int>(rule)));
      QuantizeOptions o = options_for(k.key, v, rows, cols);
      o.mx_rule = rule;
      const auto q = quantize(x, k.key, o);
      ASSERT_TRUE(q.is_ok()) << q.message();
      EXPECT_EQ(check_roundtrip(*q, v, rule), 0);
    }
  }
}

TEST(RoundTrip, OtherInputDtypes) {
  const int64_t rows = 9, cols = 64;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF64}) {
    std::vector<double> raw = test_values(rows, cols, 2);
    // Keep f16 inside its range: rows 2 and 3 are 1e30 / 1e-30 otherwise.
    if (dtype == DType::kF16) {
      for (double& e : raw) e = std::clamp(e, -6e4, 6e4);
    }
    const Tensor x = make_tensor(dtype, rows, cols, raw);
    const std::vector<double> v = dtype == DType::kF64 ? raw : as_seen(x);
    for (const QuantKey& key : {kFp8DynamicTokenSym, kFp8Dynamic64Sym, kInt8DynamicTokenSym, kInt8DynamicTokenAsym,
                                kMxfp8Dynamic, kMxfp6E3M2Dynamic, kMxfp4Dynamic, kNvfp4Dynamic}) {
      SCOPED_TRACE(key_name(key) + " from " + std::string(name(dtype)));
      const auto q = quantize(x, key);
      ASSERT_TRUE(q.is_ok()) << q.message();
      EXPECT_EQ(check_roundtrip(*q, v, default_mx_rule(key)), 0);
    }
  }
}

// Dequantization is exact: an MX code times its power of two, an FP8 code times its f32 scale.
TEST(RoundTrip, DequantizeIsExact) {
  const Tensor x = make_tensor(DType::kF32, 3, 64, test_values(3, 64, 3));
  for (const QuantKey& key : {kMxfp6E2M3Dynamic, kFp8Dynamic128Sym}) {
    const auto q = quantize(x, key);
    ASSERT_TRUE(q.is_ok()) << q.message();
    const auto d = dequantize(*q, DType::kF64);
    ASSERT_TRUE(d.is_ok()) << d.message();
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < 64; ++c) {
        const double code_value = decode(key.dtype, code_at(*q, r, c));
        const double scale = key.scale.dtype == DType::kE8M0
                                 ? std::ldexp(1.0, int{quant_test::u8_at(q->scale, r * 2 + c / 32)} - 127)
                                 : q->scale.data<float>()[r];
        EXPECT_EQ(d->data<double>()[r * 64 + c], code_value * scale);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear
