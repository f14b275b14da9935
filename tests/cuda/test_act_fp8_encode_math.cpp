// The FP8 activation quantizers' exact f32 encoder of x / s (act_fp8_encode_math.hpp, the code the CUDA
// kernels run) compiled for the host and checked bit for bit against the reference's rounding of the double
// quotient (encode(kF8E4M3, double(x) / s), as src/quant/quantize.cpp's encode_scaled): every finite BF16
// input against hundreds of scales -- powers of two and 1/50 (exact products, so quotients land exactly on
// rounding midpoints), amax / 448 of random BF16 maxima (the dynamic scales), log-uniform scales across
// 2^-100 .. 2^100 and the range's ends -- and random f32 inputs with full mantissas and f32 subnormals. The
// hardware conversion is the reference's RNE / saturating encode of the float handed to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/act_fp8_encode_math.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear {
namespace {

namespace enc = cuda::actenc;

// What encode_e4m3_div (fp_codec.cuh) computes, with the hardware conversion of a non-negative float
// replaced by the reference encoder on that float (exact in double).
uint32_t f32_path(float x, float s) {
  const float r = 1.0f / s;
  const float a = std::fabs(x);
  float q = a * r;
  if (enc::quotient_needs_check(q)) q = enc::quotient_magnitude(a, q, s);
  const uint32_t sign = (enc::f32_bits(x) >> 24) & 0x80u;
  return encode(DType::kF8E4M3, static_cast<double>(q), Overflow::kSaturate) | sign;
}

uint32_t reference(float x, float s) {
  return encode(DType::kF8E4M3, static_cast<double>(x) / static_cast<double>(s), Overflow::kSaturate);
}

float bf16_value(uint32_t bits) { return enc::f32_of(bits << 16); }

std::vector<float> test_scales() {
  std::vector<float> s;
  for (int e = -24; e <= 24; e += 3) s.push_back(std::ldexp(1.0f, e));  // r exact: exact midpoints
  for (float v : {0.02f, 1.0f / 50, 1.0f / 3, 0.1f, 3.0f, 1.0f / 448, static_cast<float>(kFp8MinScalingFactor),
                  0x1p-100f, 0x1p100f, 0x1.fffffep-101f * 2, 0x1.fffffep99f}) {
    s.push_back(v);
  }
  std::mt19937_64 rng(0x5EEDF8);
  std::uniform_int_distribution<uint32_t> bf(0x0080, 0x7F7F);  // positive normal BF16
  for (int i = 0; i < 120; ++i) {
    const float amax = bf16_value(bf(rng));
    const float sc = static_cast<float>(static_cast<double>(amax) / 448.0);
    if (enc::quotient_scale_in_range(sc)) s.push_back(sc);
  }
  std::uniform_real_distribution<double> lg(-100.0, 100.0);
  for (int i = 0; i < 120; ++i) s.push_back(static_cast<float>(std::exp2(lg(rng))));
  return s;
}

TEST(ActFp8EncodeMath, EveryBf16InputMatchesTheReferenceQuotient) {
  const std::vector<float> scales = test_scales();
  int64_t checked = 0, took_check = 0;
  for (float s : scales) {
    ASSERT_TRUE(enc::quotient_scale_in_range(s)) << s;
    int64_t bad = 0;
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const float x = bf16_value(b);
      if (!std::isfinite(x)) continue;
      const uint32_t got = f32_path(x, s), want = reference(x, s);
      ++checked;
      took_check += enc::quotient_needs_check(std::fabs(x) * (1.0f / s)) ? 1 : 0;
      if (got != want && ++bad <= 3) {
        ADD_FAILURE() << "x = " << x << " (bf16 0x" << std::hex << b << std::dec << "), s = " << s << ": code 0x"
                      << std::hex << got << ", reference 0x" << want;
      }
    }
    ASSERT_EQ(bad, 0) << "scale " << s;
  }
  // The test reaches the exact comparison, not only the fast conversion.
  EXPECT_GT(took_check, checked / 1000);
}

TEST(ActFp8EncodeMath, RandomF32InputsMatchTheReferenceQuotient) {
  const std::vector<float> scales = test_scales();
  std::mt19937_64 rng(0xF32F32);
  std::uniform_int_distribution<uint32_t> any(0, 0xFFFFFFFFu);
  int64_t bad = 0;
  for (float s : scales) {
    for (int i = 0; i < 20000; ++i) {
      uint32_t bits = any(rng);
      // A third near the scale's useful range (|x / s| in 2^-12 .. 2^10), a third f32 subnormals, the rest anywhere.
      if (i % 3 == 0) {
        const int e = static_cast<int>(std::ilogb(s)) + static_cast<int>(any(rng) % 23) - 12;
        bits = (bits & 0x807FFFFFu) | static_cast<uint32_t>(std::clamp(e + 127, 1, 254)) << 23;
      } else if (i % 3 == 1) {
        bits &= 0x807FFFFFu;
      }
      const float x = enc::f32_of(bits);
      if (!std::isfinite(x)) continue;
      const uint32_t got = f32_path(x, s), want = reference(x, s);
      if (got != want && ++bad <= 5) {
        ADD_FAILURE() << "x = " << x << " (0x" << std::hex << bits << std::dec << "), s = " << s << ": code 0x"
                      << std::hex << got << ", reference 0x" << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(ActFp8EncodeMath, ScalesOutsideTheF32RangeAreRefused) {
  EXPECT_FALSE(enc::quotient_scale_in_range(0x1p-101f));
  EXPECT_FALSE(enc::quotient_scale_in_range(0x1p101f));
  EXPECT_FALSE(enc::quotient_scale_in_range(0.0f));
  EXPECT_FALSE(enc::quotient_scale_in_range(std::nanf("")));
  EXPECT_TRUE(enc::quotient_scale_in_range(1.0f));
}

}  // namespace
}  // namespace qlinear
