// The tensor-core decode kernels' f64 epilogue arithmetic on the CPU (no GPU needed): mma_epilogue_math.hpp is
// the code the kernels run, compiled here for the host, on single products -- an output whose FP32 sum is one
// exact product, as through an identity layer -- against the reference backend's arithmetic for them
// (dequantize each operand in f64, NVFP4's q * sf / g rounded once; multiply; add the bias; round once to the
// output dtype with encode). Counted: outputs that differ (0 expected, for the cases mma_epilogue_math.hpp
// argues). That the check can fail: an f32 epilogue (the same operations in f32) on the same products
// differs from the reference on ~1e-4 of the NVFP4 outputs, asserted here too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "backends/cuda/mma_epilogue_math.hpp"
#include "qlinear/formats.hpp"

namespace qlinear {
namespace {

// The output dtype's value of an f64 (the reference's final rounding).
double round_to(DType out, double v) {
  switch (out) {
    case DType::kBF16: return bf16_to_float(static_cast<uint16_t>(encode(DType::kBF16, v, Overflow::kNonSaturating)));
    case DType::kF16: return f16_to_float(static_cast<uint16_t>(encode(DType::kF16, v, Overflow::kNonSaturating)));
    default: return static_cast<float>(v);
  }
}

// fl(a * b) in f64 whatever the compiler contracts around it.
double mul(double a, double b) { return std::fma(a, b, 0.0); }

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  uint64_t below(uint64_t n) { return gen() % n; }
  // A nonzero NVFP4 value q * sf: an E2M1 value times a positive E4M3 scale from [2^-9, 448], either sign.
  double nvfp4_value() {
    static const double kE2M1[] = {0.5, 1, 1.5, 2, 3, 4, 6};
    const double sf = decode(DType::kF8E4M3, static_cast<uint32_t>(1 + below(0x7E)));
    return (below(2) ? 1 : -1) * kE2M1[below(7)] * sf;
  }
  // A random f32 global scale 2688 / amax whose significand is odd (its odd part has 24 bits, as almost every
  // computed one), amax in 1e-3 .. 1e5.
  float odd_global() {
    const float g = static_cast<float>(2688.0 / std::pow(10.0, -3.0 + 8.0 * std::uniform_real_distribution<double>(0, 1)(gen)));
    uint32_t bits;
    std::memcpy(&bits, &g, 4);
    bits |= 1;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
  }
  // A global scale with a small odd part (3 .. 45, or 2688 = 21 x 2^7: an amax that is a power of two).
  float small_odd_global() {
    static const int kOdd[] = {1, 3, 5, 7, 9, 15, 21, 45};
    return std::ldexp(static_cast<float>(kOdd[below(8)]), static_cast<int>(below(20)) - 10);
  }
  double bf16_value(int lo_exp, int hi_exp) {
    const float v = std::ldexp(1.0f + static_cast<float>(below(1 << 20)) / (1 << 20), lo_exp + static_cast<int>(below(hi_exp - lo_exp + 1)));
    return (below(2) ? 1 : -1) * bf16_to_float(float_to_bf16(v));
  }
};

struct Counts {
  int64_t n = 0, differ = 0, f32_differ = 0;
};

// One NVFP4 single product: weight value w_val = q * sf (g_w), activation a_val (g_x, or none: BF16 as
// given); the reference's rounded output, the kernel's, and an f32 epilogue's.
void nvfp4_product(double w_val, float gw, double a_val, std::optional<float> gx, std::optional<double> bias,
                   DType out, Counts& c) {
  const double w = w_val / gw;  // the reference's dequantized operands, one rounding each
  const double a = gx ? a_val / *gx : a_val;
  double ref = mul(a, w);
  if (bias) ref = ref + *bias;
  const float sum = static_cast<float>(w_val / 256.0 * a_val);  // the kernel's exact FP32 sum
  EXPECT_EQ(static_cast<double>(sum), w_val / 256.0 * a_val);
  const cuda::MmaFactor f = cuda::mma_epilogue_factor(
      cuda::mma_nvfp4_row_factor(gw), gx ? cuda::mma_nvfp4_activation_factor(*gx) : cuda::mma_no_activation_factor());
  const double y = cuda::mma_epilogue_value(sum, f, bias ? *bias : 0.0);
  const float s32 = static_cast<float>(256.0 / gw) * (gx ? static_cast<float>(1.0 / *gx) : 1.0f);
  const float y32 = sum * s32 + (bias ? static_cast<float>(*bias) : 0.0f);
  const double want = round_to(out, ref);
  ++c.n;
  if (round_to(out, y) != want && c.differ++ < 3) {
    ADD_FAILURE() << name(out) << ": w " << w_val << " / " << gw << ", a " << a_val << " / " << (gx ? *gx : 1.0f)
                  << ": kernel " << round_to(out, y) << ", reference " << want;
  }
  c.f32_differ += round_to(out, y32) != want;
}

constexpr int kSamples = 200000;

// W4A4 through an identity weight (q * sf / g_w a power of two, g_w = 2688 x 2^-p) with any input global
// scale, and W4A16 with g_w's odd part 24 bits: one quotient exact, the other N / g -- equal always.
TEST(MmaEpilogueMath, Nvfp4OneExactQuotientEqualsTheReference) {
  int64_t f32_w4a4 = 0, f32_w4a16 = 0;  // BF16 and F16 outputs an f32 epilogue rounds otherwise
  for (DType out : {DType::kBF16, DType::kF16, DType::kF32}) {
    Counts w4a4, w4a16;
    Rng rng(1234 + static_cast<int>(out));
    for (int i = 0; i < kSamples; ++i) {
      const int p = static_cast<int>(rng.below(17)) - 8, j = -static_cast<int>(rng.below(9));
      const float gw = std::ldexp(2688.0f, -p);
      const double w_val = std::ldexp(2688.0, j - p) * (rng.below(2) ? 1 : -1);  // q = 6, sf = 448 x 2^(j-p)
      const float gx = i % 2 ? rng.odd_global() : rng.small_odd_global();
      nvfp4_product(w_val, gw, rng.nvfp4_value(), gx, std::nullopt, out, w4a4);
      nvfp4_product(rng.nvfp4_value(), rng.odd_global(), rng.bf16_value(-20, 15), std::nullopt, std::nullopt, out, w4a16);
    }
    EXPECT_EQ(w4a4.differ, 0) << name(out);
    EXPECT_EQ(w4a16.differ, 0) << name(out);
    std::printf("[ epilogue ] %-4s W4A4 identity: %lld of %lld differ (f32 epilogue: %lld); W4A16: %lld (f32: %lld)\n",
                std::string(name(out)).c_str(), static_cast<long long>(w4a4.differ), static_cast<long long>(w4a4.n),
                static_cast<long long>(w4a4.f32_differ), static_cast<long long>(w4a16.differ),
                static_cast<long long>(w4a16.f32_differ));
    if (out != DType::kF32) {
      f32_w4a4 += w4a4.f32_differ;
      f32_w4a16 += w4a16.f32_differ;
    }
  }
  EXPECT_GT(f32_w4a4, 0) << "W4A4: no product here that an f32 epilogue rounds otherwise";
  EXPECT_GT(f32_w4a16, 0) << "W4A16: no product here that an f32 epilogue rounds otherwise";
}

// Both quotients inexact (random weight and input global scales), with and without a BF16 bias: BF16 and F16
// outputs agree all but certainly (a chance of ~2^-41 per output that a midpoint lies in the error window).
TEST(MmaEpilogueMath, Nvfp4TwoInexactQuotientsEqualTheReference) {
  for (DType out : {DType::kBF16, DType::kF16}) {
    for (bool with_bias : {false, true}) {
      Counts c;
      Rng rng(99 + static_cast<int>(out) + (with_bias ? 7 : 0));
      for (int i = 0; i < kSamples; ++i) {
        std::optional<double> bias;
        if (with_bias) bias = rng.bf16_value(-8, 8);
        nvfp4_product(rng.nvfp4_value(), rng.odd_global(), rng.nvfp4_value(), rng.odd_global(), bias, out, c);
      }
      EXPECT_EQ(c.differ, 0) << name(out) << (with_bias ? " with bias" : "");
      if (!with_bias) {
        EXPECT_GT(c.f32_differ, 0) << "no product here that an f32 epilogue rounds otherwise";
      }
    }
  }
}

// FP8 per-channel row scales (and static FP8 activation factors, the same arithmetic): an f32 scale times an
// exact sum is exact in f64, so the output is the reference's with any bias and output dtype.
TEST(MmaEpilogueMath, F32ScalesEqualTheReferenceWithBias) {
  Rng rng(7);
  for (DType out : {DType::kBF16, DType::kF16, DType::kF32}) {
    int64_t differ = 0;
    for (int i = 0; i < kSamples; ++i) {
      const double code = decode(DType::kF8E4M3, static_cast<uint32_t>(rng.below(0x7F))) * (rng.below(2) ? 1 : -1);
      const float s = rng.odd_global() / 2688.0f;
      const double x = rng.bf16_value(-12, 12);
      const double bias = rng.below(4) ? rng.bf16_value(-12, 12) : 0.0;
      const double ref = mul(x, mul(code, s)) + bias;  // the dequantized weight code x s, times x, plus bias
      const float sum = static_cast<float>(code * x);
      const double y = cuda::mma_epilogue_value(sum, cuda::mma_epilogue_factor(cuda::mma_multiplier(s), cuda::mma_no_activation_factor()), bias);
      differ += round_to(out, y) != round_to(out, ref);
    }
    EXPECT_EQ(differ, 0) << name(out);
  }
}

}  // namespace
}  // namespace qlinear
