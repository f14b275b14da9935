// The three MX shared-exponent rules (quantize.hpp, MxScaleRule) on hand-worked blocks, and where they
// differ: ceil-over-max never saturates, floor-log2 uses only the top binades, OCP may saturate.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/quant_test_util.hpp"

namespace qlinear {
namespace {

using quant_test::code_at;
using quant_test::make_tensor;
using quant_test::u8_at;

struct RuleCase {
  QuantKey key;
  double amax;
  int ceil_e, floor_e, ocp_e;  // worked by hand from the rule definitions
};

// One 32-block whose largest magnitude is `amax` (placed at column 5, negative), the rest small.
Tensor block_with_amax(double amax) {
  std::vector<double> v(32, 0.0);
  for (int i = 0; i < 32; ++i) v[i] = amax * (i % 7) / 16.0;
  v[5] = -amax;
  return make_tensor(DType::kF64, 1, 32, v);
}

int exponent_for(const QuantKey& key, double amax, MxScaleRule rule) {
  QuantizeOptions o;
  o.mx_rule = rule;
  const auto q = quantize(block_with_amax(amax), key, o);
  EXPECT_TRUE(q.is_ok()) << q.message();
  return q.is_ok() ? int{u8_at(q->scale, 0)} - 127 : 999;
}

TEST(MxRules, HandWorkedExponents) {
  const std::vector<RuleCase> cases = {
      // E4M3, max 448 = 1.75 * 2^8, emax 8.
      {kMxfp8Dynamic, 448.0, 0, 8, 0},   // 448/448 = 1 -> ceil 0; floor(log2 448) = 8; 8 - 8
      {kMxfp8Dynamic, 1.0, -8, 0, -8},   // ceil(log2(1/448)) = ceil(-8.81) = -8; 0; 0 - 8
      {kMxfp8Dynamic, 500.0, 1, 8, 0},   // 500 > 448: ceil goes up a binade, OCP stays and saturates
      {kMxfp8Dynamic, 256.0, 0, 8, 0},   // 256/448 = 0.57 -> 0
      {kMxfp8Dynamic, 224.0, -1, 7, -1}, // 224/448 = 2^-1 exactly
      {kMxfp8Dynamic, 0x1p-140, -127, -127, -127},  // clamped to the smallest E8M0 exponent
      // E2M1, max 6 = 1.5 * 2^2, emax 2.
      {kMxfp4Dynamic, 6.0, 0, 2, 0},
      {kMxfp4Dynamic, 7.0, 1, 2, 0},
      {kMxfp4Dynamic, 1.0, -2, 0, -2},   // ceil(log2(1/6)) = ceil(-2.58) = -2
      {kMxfp4Dynamic, 4.0, 0, 2, 0},
      // E2M3, max 7.5 = 1.875 * 2^2, emax 2.
      {kMxfp6E2M3Dynamic, 7.5, 0, 2, 0},
      {kMxfp6E2M3Dynamic, 8.0, 1, 3, 1},
      // E3M2, max 28 = 1.75 * 2^4, emax 4.
      {kMxfp6E3M2Dynamic, 28.0, 0, 4, 0},
      {kMxfp6E3M2Dynamic, 29.0, 1, 4, 0},
      {kMxfp6E3M2Dynamic, 0.5, -5, -1, -5},  // ceil(log2(0.5/28)) = ceil(-5.81) = -5
  };
  for (const RuleCase& c : cases) {
    SCOPED_TRACE(key_name(c.key) + " amax " + std::to_string(c.amax));
    EXPECT_EQ(exponent_for(c.key, c.amax, MxScaleRule::kCeilOverMax), c.ceil_e);
    EXPECT_EQ(exponent_for(c.key, c.amax, MxScaleRule::kFloorLog2), c.floor_e);
    EXPECT_EQ(exponent_for(c.key, c.amax, MxScaleRule::kOcp), c.ocp_e);
  }
}

TEST(MxRules, AllZeroBlockIsCodeZero) {
  for (MxScaleRule rule : {MxScaleRule::kCeilOverMax, MxScaleRule::kFloorLog2, MxScaleRule::kOcp}) {
    QuantizeOptions o;
    o.mx_rule = rule;
    const auto q = quantize(make_tensor(DType::kF32, 2, 64, std::vector<double>(128, 0.0)), kMxfp4Dynamic, o);
    ASSERT_TRUE(q.is_ok()) << q.message();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(u8_at(q->scale, i), 0);
    for (int c = 0; c < 64; ++c) EXPECT_EQ(code_at(*q, 1, c), 0u);
  }
}

// The block maximum under each rule: ceil keeps it exact, OCP saturates it, floor keeps it in [1, 2).
TEST(MxRules, BlockMaximumCodes) {
  auto max_code = [](const QuantKey& key, double amax, MxScaleRule rule) {
    QuantizeOptions o;
    o.mx_rule = rule;
    const auto q = quantize(block_with_amax(amax), key, o);
    EXPECT_TRUE(q.is_ok()) << q.message();
    return q.is_ok() ? code_at(*q, 0, 5) : 0u;
  };
  // E4M3 amax 500: ceil e=1 -> -250 -> RNE -256 (0xF8); OCP e=0 -> -500 saturates to -448 (0xFE);
  // floor e=8 -> -500/256 = -1.953 -> RNE -2 (0xC0).
  EXPECT_EQ(max_code(kMxfp8Dynamic, 500.0, MxScaleRule::kCeilOverMax), 0xF8u);
  EXPECT_EQ(max_code(kMxfp8Dynamic, 500.0, MxScaleRule::kOcp), 0xFEu);
  EXPECT_EQ(max_code(kMxfp8Dynamic, 500.0, MxScaleRule::kFloorLog2), 0xC0u);
  // E2M1 amax 7: ceil e=1 -> -3.5 -> tie between 3 and 4 -> even code 4 (0b1110); OCP e=0 -> -7 saturates
  // to -6 (0b1111); floor e=2 -> -1.75 -> tie between 1.5 and 2 -> even code 2 (0b1100).
  EXPECT_EQ(max_code(kMxfp4Dynamic, 7.0, MxScaleRule::kCeilOverMax), 0xEu);
  EXPECT_EQ(max_code(kMxfp4Dynamic, 7.0, MxScaleRule::kOcp), 0xFu);
  EXPECT_EQ(max_code(kMxfp4Dynamic, 7.0, MxScaleRule::kFloorLog2), 0xCu);
}

// The ceil rule is evaluated exactly: an amax one f32 ulp above 448 * 2^-8 needs e = -7, although
// log2(amax / 448) computed in f32 rounds to exactly -8 (what vLLM's torch reference would give).
TEST(MxRules, CeilRuleIsExactAtBinadeEdges) {
  const double amax = std::nextafter(448.0f * 0x1p-8f, 2.0f);
  EXPECT_EQ(std::ceil(std::log2(static_cast<float>(amax) / 448.0f)), -8.0f);
  EXPECT_EQ(exponent_for(kMxfp8Dynamic, amax, MxScaleRule::kCeilOverMax), -7);
  EXPECT_EQ(exponent_for(kMxfp8Dynamic, 448.0 * 0x1p-8, MxScaleRule::kCeilOverMax), -8);
}

// Static MX keys are weights: with no given scale the scale is computed like the dynamic key's; a given
// E8M0 scale is used as is.
TEST(MxRules, StaticKeysComputeOrUseTheGivenScale) {
  const Tensor x = block_with_amax(448.0);
  const auto dyn = quantize(x, kMxfp8Dynamic);
  const auto stat = quantize(x, kMxfp8Static);
  ASSERT_TRUE(dyn.is_ok() && stat.is_ok());
  EXPECT_EQ(u8_at(stat->scale, 0), u8_at(dyn->scale, 0));
  QuantizeOptions o;
  o.static_scale = quant_test::u8_tensor(DType::kU8, {1, 1}, {127 + 2});
  const auto given = quantize(x, kMxfp8Static, o);
  ASSERT_TRUE(given.is_ok()) << given.message();
  EXPECT_EQ(u8_at(given->scale, 0), 129);
  EXPECT_EQ(decode(DType::kF8E4M3, code_at(*given, 0, 5)), -112.0);  // -448 / 4
}

}  // namespace
}  // namespace qlinear
