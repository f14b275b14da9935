// The INT8 activation quantizers' f32 encoder (act_int8_encode_math.hpp, what int8_scaled_mm.cu's kernels run)
// compiled for the host and checked code for code against the reference quantizer (quantize() with the static
// asymmetric INT8 key: clamp(rne(x / s) + z, -128, 127), the quotient in double; z = 0 is the symmetric
// modes' arithmetic): every finite BF16 input of both signs against scales that put many quotients exactly
// on half-integers (powers of two: ties, which go to the even integer), scales as the dynamic modes make them
// (amax / 127 and (hi - lo) / 255 of random BF16 values, rounded to f32), log-uniform scales across the f32
// path's range and its ends, with zero points 0, +-3, -128, 127 and beyond the code range; then random f32
// inputs with full mantissas. Inputs that leave the f32 path (int8_fast_quotient false) are counted, not
// compared: the kernels take the exact path (the quotient in double) for them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/act_int8_encode_math.hpp"
#include "qlinear/quant_key.hpp"
#include "qlinear/random.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear {
namespace {

namespace enc = cuda::actenc;

float f32_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The code the kernels' f32 path gives (int8_encode8 with r = f32(1/s)), or -1000 where it leaves that path.
int f32_path(float x, float s, double z) {
  const float q = x * (1.0f / s);
  if (!enc::int8_fast_quotient(q)) return -1000;
  const uint32_t byte = enc::int8_code_byte(enc::int8_rne_quotient(x, q, s), enc::int8_clamped_zero_point(z));
  return static_cast<int8_t>(static_cast<uint8_t>(byte));
}

// The reference quantizer's codes of a row of inputs with scale s and zero point z.
std::vector<int8_t> reference(const std::vector<float>& xs, float s, int32_t z) {
  Tensor x = Tensor::empty(DType::kF32, {1, static_cast<int64_t>(xs.size())});
  std::memcpy(x.raw(), xs.data(), xs.size() * 4);
  QuantizeOptions opt;
  opt.static_scale = Tensor::scalar_f32(s).reshape({1}).value();
  opt.static_zero_point = Tensor::empty(DType::kI32, {1});
  opt.static_zero_point.data<int32_t>()[0] = z;
  auto q = quantize(x, kInt8StaticTensorAsym, opt);
  EXPECT_TRUE(q) << q.message();
  if (!q) return {};
  const int8_t* c = q->data.data<int8_t>();
  return std::vector<int8_t>(c, c + xs.size());
}

std::vector<float> test_scales() {
  std::vector<float> s;
  for (int e = -20; e <= 20; e += 2) s.push_back(std::ldexp(1.0f, e));  // exact quotients: ties
  for (float v : {0.02f, 1.0f / 50, 1.0f / 3, 0.1f, 3.0f, 1.0f / 127, 0x1p-100f, 0x1p100f, 0x1.fffffep99f}) {
    s.push_back(v);
  }
  std::mt19937_64 rng(0x5EED18);
  std::uniform_int_distribution<uint32_t> bf(0x0080, 0x7F7F);  // positive normal BF16
  for (int i = 0; i < 24; ++i) {
    const float a = f32_of(bf(rng) << 16), b = f32_of(bf(rng) << 16);
    s.push_back(static_cast<float>(static_cast<double>(a) / 127.0));                // symmetric dynamic
    s.push_back(static_cast<float>((static_cast<double>(a) + b) / 255.0));           // asymmetric dynamic
  }
  std::uniform_real_distribution<double> lg(-100.0, 100.0);
  for (int i = 0; i < 24; ++i) s.push_back(static_cast<float>(std::exp2(lg(rng))));
  std::vector<float> in_range;
  for (float v : s) {
    if (enc::int8_scale_in_range(v)) in_range.push_back(v);
  }
  return in_range;
}

const int32_t kZeroPoints[] = {0, 3, -128, 300, -4194600};

TEST(ActInt8EncodeMath, EveryBf16InputMatchesTheReferenceQuantizer) {
  std::vector<float> xs;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = f32_of(b << 16);
    if (std::isfinite(x)) xs.push_back(x);
  }
  int64_t checked = 0, ties = 0, exact_path = 0, exact_below = 0;
  for (float s : test_scales()) {
    for (int32_t z : kZeroPoints) {
      const std::vector<int8_t> want = reference(xs, s, z);
      ASSERT_EQ(want.size(), xs.size());
      int64_t bad = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const int got = f32_path(xs[i], s, z);
        if (got == -1000) {
          ++exact_path;
          exact_below += std::fabs(static_cast<double>(xs[i]) / s) < 0x1p19 ? 1 : 0;
          continue;
        }
        ++checked;
        const double quotient = static_cast<double>(xs[i]) / s;
        ties += quotient - std::floor(quotient) == 0.5 ? 1 : 0;
        if (got != want[i] && ++bad <= 3) {
          ADD_FAILURE() << "x = " << xs[i] << ", s = " << s << ", z = " << z << ": code " << got << ", reference "
                        << static_cast<int>(want[i]);
        }
      }
      ASSERT_EQ(bad, 0) << "scale " << s << ", zero point " << z;
    }
  }
  std::printf("[ int8 ] %lld codes compared, %lld exact ties, %lld on the exact path (|x / s| >= 2^20)\n",
              static_cast<long long>(checked), static_cast<long long>(ties), static_cast<long long>(exact_path));
  // The inputs reach exact ties, and only quotients beyond the f32 path's range take the exact one.
  EXPECT_GT(ties, 10000);
  EXPECT_GT(exact_path, 0);
  EXPECT_EQ(exact_below, 0);
  EXPECT_GT(checked, 10000000);
}

TEST(ActInt8EncodeMath, RandomF32InputsMatchTheReferenceQuantizer) {
  std::mt19937_64 rng(0x1F32);
  std::uniform_int_distribution<uint32_t> any(0, 0xFFFFFFFFu);
  int64_t bad = 0;
  for (float s : test_scales()) {
    std::vector<float> xs;
    for (int i = 0; i < 2000; ++i) {
      // Full mantissas with |x / s| in 2^-4 .. 2^9 (codes and saturation), or anywhere.
      uint32_t bits = any(rng);
      if (i % 2 == 0) {
        const int e = static_cast<int>(std::ilogb(s)) + static_cast<int>(any(rng) % 14) - 4;
        bits = (bits & 0x807FFFFFu) | static_cast<uint32_t>(std::clamp(e + 127, 1, 254)) << 23;
      }
      const float x = f32_of(bits);
      if (std::isfinite(x)) xs.push_back(x);
    }
    for (int32_t z : {0, 5, -100}) {
      const std::vector<int8_t> want = reference(xs, s, z);
      ASSERT_EQ(want.size(), xs.size());
      for (size_t i = 0; i < xs.size(); ++i) {
        const int got = f32_path(xs[i], s, z);
        if (got != -1000 && got != want[i] && ++bad <= 5) {
          ADD_FAILURE() << "x = " << xs[i] << ", s = " << s << ", z = " << z << ": code " << got << ", reference "
                        << static_cast<int>(want[i]);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

// The dynamic per-token scale and zero point from a row's range (what the CUDA quantizers compute after their
// block reduction) against the reference quantizer's: random rows over many magnitudes, constant rows (the
// range widened to include 0), all-zero rows, one-element rows.
TEST(ActInt8EncodeMath, DynamicRowScalesMatchTheReferenceQuantizer) {
  std::mt19937_64 rng(0xD1A);
  const int64_t rows = 400, k = 33;
  Tensor x = random_normal(DType::kF32, {rows, k}, 0xD1A, 1.0);
  float* p = x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 120) - 60);
    for (int64_t c = 0; c < k; ++c) p[r * k + c] *= scale;
    if (r % 7 == 3) std::fill(p + r * k, p + (r + 1) * k, p[r * k]);  // constant
    if (r % 11 == 5) std::fill(p + r * k, p + (r + 1) * k, 0.0f);     // zeros
    if (r % 13 == 6) std::fill(p + r * k + 1, p + (r + 1) * k, 0.0f);   // one nonzero element
  }
  for (const bool asym : {false, true}) {
    auto q = quantize(x, asym ? kInt8DynamicTokenAsym : kInt8DynamicTokenSym, QuantizeOptions{});
    ASSERT_TRUE(q) << q.message();
    for (int64_t r = 0; r < rows; ++r) {
      double lo = p[r * k], hi = lo, amax = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        lo = std::fmin(lo, p[r * k + c]);
        hi = std::fmax(hi, p[r * k + c]);
        amax = std::fmax(amax, std::fabs(p[r * k + c]));
      }
      double s = 0, z = 0;
      enc::int8_dynamic_scale(asym ? lo : amax, asym ? hi : amax, asym, s, z);
      EXPECT_EQ(static_cast<float>(s), q->scale.data<float>()[r]) << "row " << r << (asym ? " asymmetric" : "");
      if (asym) {
        EXPECT_EQ(static_cast<int32_t>(z), q->zero_point.data<int32_t>()[r]) << "row " << r;
      }
    }
  }
}

TEST(ActInt8EncodeMath, ScalesAndQuotientsOutsideTheF32PathAreRefused) {
  EXPECT_FALSE(enc::int8_scale_in_range(0x1p-101f));
  EXPECT_FALSE(enc::int8_scale_in_range(0x1p101f));
  EXPECT_FALSE(enc::int8_scale_in_range(0.0f));
  EXPECT_FALSE(enc::int8_scale_in_range(std::nanf("")));
  EXPECT_TRUE(enc::int8_scale_in_range(1.0f));
  EXPECT_FALSE(enc::int8_fast_quotient(0x1p20f));
  EXPECT_FALSE(enc::int8_fast_quotient(-0x1p20f));
  EXPECT_FALSE(enc::int8_fast_quotient(std::nanf("")));
  EXPECT_FALSE(enc::int8_fast_quotient(INFINITY));
  EXPECT_TRUE(enc::int8_fast_quotient(0x1.fffffep19f));
}

}  // namespace
}  // namespace qlinear
