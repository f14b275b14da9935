// Dynamic FP4 / FP6 MX activation quantization against AMD Quark's own (tools/gen_quark_mx_oracle.py:
// Quark's fake_quantize_mx, scale_calculation_mode "even"), value for value, on rows built to hit the
// rule's edges. The reference quantizer's default rule for these keys must be Quark's; the other rules
// must disagree with it somewhere in the table (or the table could not tell them apart).
#include <gtest/gtest.h>

#include "qlinear/quantize.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

const std::string kOracle = std::string(QLINEAR_TEST_DATA) + "/quark_mx/oracle.safetensors";

struct Fmt {
  const char* quark_name;
  QuantKey key;
};
const Fmt kFormats[] = {{"fp4", kMxfp4Dynamic}, {"fp6_e2m3", kMxfp6E2M3Dynamic}, {"fp6_e3m2", kMxfp6E3M2Dynamic}};

// Elements whose quantize-dequantize differs from Quark's.
int64_t mismatches(const Tensor& x, const Tensor& want, const QuantKey& key, std::optional<MxScaleRule> rule) {
  QuantizeOptions o;
  o.mx_rule = rule;
  auto q = quantize(x, key, o);
  EXPECT_TRUE(q) << q.message();
  if (!q) return -1;
  auto y = dequantize(*q, DType::kF32);
  EXPECT_TRUE(y) << y.message();
  if (!y) return -1;
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) bad += y->data<float>()[i] != want.data<float>()[i];
  return bad;
}

TEST(QuarkOracle, DynamicMxActivationsEqualQuarksFakeQuant) {
  auto file = SafetensorsFile::open(kOracle);
  ASSERT_TRUE(file) << file.message();
  for (const Fmt& f : kFormats) {
    SCOPED_TRACE(f.quark_name);
    const Tensor x = file->tensor(std::string(f.quark_name) + ".x").value().contiguous();
    const Tensor want = file->tensor(std::string(f.quark_name) + ".y").value().contiguous();
    ASSERT_EQ(x.shape(), want.shape());
    EXPECT_EQ(default_mx_rule(f.key), MxScaleRule::kQuarkEven);
    EXPECT_EQ(mismatches(x, want, f.key, std::nullopt), 0);
    EXPECT_EQ(mismatches(x, want, f.key, MxScaleRule::kQuarkEven), 0);
    EXPECT_GT(mismatches(x, want, f.key, MxScaleRule::kOcp), 0) << "the table does not separate even from OCP floor";
    EXPECT_GT(mismatches(x, want, f.key, MxScaleRule::kCeilOverMax), 0);
  }
}

// The rule on hand-worked amax values (quantize.hpp): FP4 (M = 1, emax 2) moves to the next binade from
// mantissa 1.75 on; E3M2 (M = 2, emax 4) from 1.875; E2M3 (M = 3, emax 2) from 1.9375.
TEST(QuarkOracle, EvenRuleOnHandWorkedBlocks) {
  struct Case {
    QuantKey key;
    double amax;
    int e;
  };
  const Case cases[] = {
      {kMxfp4Dynamic, 1.0, -2},        {kMxfp4Dynamic, 1.74, -2},       {kMxfp4Dynamic, 1.75, -1},
      {kMxfp4Dynamic, 6.0, 0},         {kMxfp4Dynamic, 7.0, 1},         {kMxfp4Dynamic, 0x1p-130, -127},
      {kMxfp6E3M2Dynamic, 1.87, -4},   {kMxfp6E3M2Dynamic, 1.875, -3},  {kMxfp6E2M3Dynamic, 1.93, -2},
      {kMxfp6E2M3Dynamic, 1.9375, -1}, {kMxfp6E2M3Dynamic, 0x1p100, 98},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(key_name(c.key) + " amax " + std::to_string(c.amax));
    Tensor x = Tensor::zeros(DType::kF32, {1, 32});
    x.data<float>()[5] = static_cast<float>(-c.amax);
    auto q = quantize(x, c.key);
    ASSERT_TRUE(q) << q.message();
    EXPECT_EQ(static_cast<int>(q->scale.data<uint8_t>()[0]) - 127, c.e);
  }
}

}  // namespace
}  // namespace qlinear
