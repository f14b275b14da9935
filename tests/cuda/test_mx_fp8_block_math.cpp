// The FP8 block route's arithmetic on the CPU (no GPU needed): mx_fp8_block_math.hpp is what the CUDA
// kernels and the weight planner run. Checked against brute force with the library's E4M3 codec: the
// exponent window of each MX element format over every code; weight plans of quantized layers (every
// weight value divided by its block scale is an E4M3 number, blocks beyond the window refused with the block
// named, all-zero groups ignored); and the activation side applied to rows quantized by the reference
// quantizer (every value of a block that fits is exactly E4M3 code x 2^F).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/mx_fp8_block_math.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear {
namespace {

using cuda::ActElem;
using cuda::ActMxRule;
constexpr auto dtype_of = cuda_test::act_elem_dtype;
constexpr auto dynamic_mx_key = cuda_test::act_elem_mx_key;

const ActElem kElems[] = {ActElem::kE2M1, ActElem::kE2M3, ActElem::kE3M2};

// Whether v is an E4M3 number (encode then decode gives it back).
bool e4m3_exact(double v) { return decode(DType::kF8E4M3, encode(DType::kF8E4M3, v)) == v; }

// Every code's value of the format.
std::vector<double> grid_values(DType d) {
  std::vector<double> v;
  for (uint32_t c = 0; c < (1u << traits(d).bits); ++c) v.push_back(decode(d, c));
  return v;
}

TEST(MxFp8BlockMath, WindowIsExactlyTheShiftsThatKeepEveryCodeInE4M3) {
  for (ActElem e : kElems) {
    const cuda::MxFp8Window w = cuda::mx_fp8_window(e);
    const std::vector<double> values = grid_values(dtype_of(e));
    for (int d = -30; d <= 30; ++d) {
      bool all = true;
      for (double v : values) all = all && e4m3_exact(std::ldexp(v, d));
      EXPECT_EQ(all, d >= w.dmin && d <= w.dmax) << name(dtype_of(e)) << " d=" << d;
    }
  }
  EXPECT_EQ(cuda::mx_fp8_window(ActElem::kE2M1).dmin, -8);
  EXPECT_EQ(cuda::mx_fp8_window(ActElem::kE2M1).dmax, 6);
}

struct QuantizedWeights {
  QuantizedTensor q;
  std::vector<bool> nonzero;
};

// n x k weights quantized per 32 (the reference quantizer), each group's magnitude 2^(spread * u - spread / 2)
// for u uniform in [0, 1), every 11th group all zero.
QuantizedWeights quantized_weights(ActElem e, int64_t n, int64_t k, int spread, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor w = Tensor::empty(DType::kF32, {n, k});
  float* p = w.data<float>();
  for (int64_t g = 0; g < n * k / 32; ++g) {
    const int ex = spread == 0 ? 0 : static_cast<int>(rng() % static_cast<uint64_t>(spread)) - spread / 2;
    for (int64_t i = 0; i < 32; ++i) p[g * 32 + i] = g % 11 == 4 ? 0.0f : std::ldexp(normal(rng), ex);
  }
  QuantizeOptions opt;
  auto q = quantize(w, dynamic_mx_key(e), opt);
  EXPECT_TRUE(q) << q.message();
  QuantizedWeights out{*q, std::vector<bool>(static_cast<size_t>(n * k / 32), false)};
  const DType d = dtype_of(e);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(q->data.raw()) + r * storage_bytes(d, k);
    for (int64_t c = 0; c < k; ++c) {
      if (decode(d, unpack_code(d, row, c)) != 0.0) out.nonzero[static_cast<size_t>(r * (k / 32) + c / 32)] = true;
    }
  }
  return out;
}

// The word tests against decoding every code, on quantized weights with zero groups, negative zeros and
// groups whose only nonzero code sits at each position.
TEST(MxFp8BlockMath, NonzeroGroupsMatchDecodingEveryCode) {
  std::mt19937_64 rng(5);
  for (ActElem e : kElems) {
    const DType d = dtype_of(e);
    const int64_t n = 37, k = 256, groups = k / 32;
    QuantizedWeights qw = quantized_weights(e, n, k, 4, 9 + static_cast<uint64_t>(e));
    uint8_t* data = static_cast<uint8_t*>(qw.q.data.raw());
    const uint32_t neg_zero = 1u << (traits(d).bits - 1);
    for (int64_t r = 0; r < n; ++r) {
      uint8_t* row = data + r * storage_bytes(d, k);
      for (int64_t g = 0; g < groups; ++g) {
        const int kind = static_cast<int>(rng() % 4);  // keep, all (negative) zeros, one nonzero code
        if (kind == 0) continue;
        for (int64_t c = g * 32; c < g * 32 + 32; ++c) pack_code(d, row, c, rng() % 2 ? neg_zero : 0u);
        if (kind == 3) pack_code(d, row, g * 32 + static_cast<int64_t>(rng() % 32), neg_zero | 1u);
      }
    }
    const std::vector<bool> got = cuda::mx_fp8_nonzero_groups(e, n, k, data);
    int64_t zero = 0;
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* row = data + r * storage_bytes(d, k);
      for (int64_t g = 0; g < groups; ++g) {
        bool want = false;
        for (int64_t c = g * 32; c < g * 32 + 32; ++c) want = want || decode(d, unpack_code(d, row, c)) != 0.0;
        zero += want ? 0 : 1;
        EXPECT_EQ(got[static_cast<size_t>(r * groups + g)], want) << name(d) << " row " << r << " group " << g;
      }
    }
    EXPECT_GT(zero, 0);
  }
}

TEST(MxFp8BlockMath, WeightPlanMakesEveryWeightAnE4M3NumberTimesItsBlockScale) {
  for (ActElem e : kElems) {
    const int64_t n = 200, k = 384;  // a partial row block
    const uint64_t seed = 1000 + static_cast<uint64_t>(e);
    SCOPED_TRACE(std::string(name(dtype_of(e))) + " seed=" + std::to_string(seed));
    const QuantizedWeights qw = quantized_weights(e, n, k, 6, seed);
    const uint8_t* scales = static_cast<const uint8_t*>(qw.q.scale.raw());
    const cuda::MxFp8WeightPlan plan = cuda::mx_fp8_plan_weights(e, n, k, scales, qw.nonzero);
    ASSERT_TRUE(plan.ok) << plan.why_not;
    ASSERT_EQ(plan.row_blocks, 2);
    ASSERT_EQ(plan.k_blocks, 3);
    ASSERT_EQ(plan.scale.size(), 2u * 4u);  // K blocks padded to 4
    const DType d = dtype_of(e);
    int64_t checked = 0;
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* row = static_cast<const uint8_t*>(qw.q.data.raw()) + r * storage_bytes(d, k);
      for (int64_t c = 0; c < k; ++c) {
        const double v = std::ldexp(decode(d, unpack_code(d, row, c)), static_cast<int>(scales[r * (k / 32) + c / 32]) - 127);
        const int f = plan.exponent[static_cast<size_t>((r / 128) * plan.k_blocks + c / 128)];
        EXPECT_EQ(plan.scale[static_cast<size_t>((r / 128) * 4 + c / 128)], std::ldexp(1.0f, f));
        const double y = std::ldexp(v, -f);
        ++checked;
        ASSERT_TRUE(e4m3_exact(y)) << "(" << r << ", " << c << "): " << v << " / 2^" << f;
        EXPECT_GE(f, plan.exp_min);
        EXPECT_LE(f, plan.exp_max);
      }
    }
    EXPECT_EQ(checked, n * k);
  }
}

TEST(MxFp8BlockMath, WeightPlanRefusesBlocksBeyondTheWindowAndNamesThem) {
  for (ActElem e : kElems) {
    const cuda::MxFp8Window w = cuda::mx_fp8_window(e);
    const int64_t n = 256, k = 256;
    std::vector<uint8_t> scales(static_cast<size_t>(n * k / 32), 120);
    std::vector<bool> nonzero(scales.size(), true);
    // Row block 1, K block 1: one group just inside the window, then one just outside.
    const size_t g = static_cast<size_t>(130 * (k / 32) + 5);
    scales[g] = static_cast<uint8_t>(120 - (w.dmax - w.dmin));
    EXPECT_TRUE(cuda::mx_fp8_plan_weights(e, n, k, scales.data(), nonzero).ok);
    scales[g] = static_cast<uint8_t>(120 - (w.dmax - w.dmin) - 1);
    const cuda::MxFp8WeightPlan bad = cuda::mx_fp8_plan_weights(e, n, k, scales.data(), nonzero);
    EXPECT_FALSE(bad.ok);
    EXPECT_NE(bad.why_not.find("rows 128+, K 128+"), std::string::npos) << bad.why_not;
    // The same group all zero: its exponent does not count (Quark writes 2^-127 for zero groups).
    nonzero[g] = false;
    scales[g] = 0;
    EXPECT_TRUE(cuda::mx_fp8_plan_weights(e, n, k, scales.data(), nonzero).ok);
    // A whole block of zeros: scale 1.
    std::fill(nonzero.begin(), nonzero.end(), false);
    const cuda::MxFp8WeightPlan zeros = cuda::mx_fp8_plan_weights(e, n, k, scales.data(), nonzero);
    ASSERT_TRUE(zeros.ok);
    EXPECT_EQ(zeros.scale[0], 1.0f);
    // Scales below f32's normal range, and K off 128.
    std::fill(nonzero.begin(), nonzero.end(), true);
    std::fill(scales.begin(), scales.end(), 1);
    EXPECT_FALSE(cuda::mx_fp8_plan_weights(e, n, k, scales.data(), nonzero).ok);
    EXPECT_FALSE(cuda::mx_fp8_plan_weights(e, n, 160, scales.data(), nonzero).ok);
  }
}

// The activation pass's decision per 128 block, applied on the host to rows the reference quantizer
// quantized: where the block fits, every value is (E4M3 number) x 2^F, equal to the reference's value.
TEST(MxFp8BlockMath, ActivationBlocksThatFitAreExactE4M3TimesTheirScale) {
  std::mt19937_64 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (ActElem e : kElems) {
    for (ActMxRule rule : {ActMxRule::kQuarkEven, ActMxRule::kCeilOverMax}) {
      const int64_t m = 64, k = 512;
      Tensor x = Tensor::empty(DType::kF32, {m, k});
      for (int64_t g = 0; g < m * k / 32; ++g) {
        // Per group a magnitude within 0 .. 24 octaves of spread by row, zeros now and then.
        const int spread = static_cast<int>((g * 32 / k) % 25);
        const int ex = spread == 0 ? 0 : static_cast<int>(rng() % static_cast<uint64_t>(spread + 1)) - spread / 2;
        for (int64_t i = 0; i < 32; ++i) x.data<float>()[g * 32 + i] = g % 13 == 2 ? 0.0f : std::ldexp(normal(rng), ex);
      }
      QuantizeOptions opt;
      opt.mx_rule = rule == ActMxRule::kQuarkEven ? MxScaleRule::kQuarkEven : MxScaleRule::kCeilOverMax;
      auto q = quantize(x, dynamic_mx_key(e), opt);
      ASSERT_TRUE(q) << q.message();
      const DType d = dtype_of(e);
      const cuda::ActGrid grid = cuda::act_grid(e);
      int fits = 0, refused = 0;
      for (int64_t r = 0; r < m; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(q->data.raw()) + r * storage_bytes(d, k);
        for (int64_t b = 0; b < k / 128; ++b) {
          int lo = INT_MAX, hi = INT_MIN, ex[4];
          for (int g = 0; g < 4; ++g) {
            float amax = 0.0f;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x.data<float>()[r * k + b * 128 + g * 32 + i]));
            ex[g] = cuda::act_mx_exponent(amax, e, rule);
            EXPECT_EQ(ex[g], static_cast<int>(q->scale.data<uint8_t>()[r * (k / 32) + b * 4 + g]) - 127);
            if (amax > 0.0f) {
              lo = std::min(lo, ex[g]);
              hi = std::max(hi, ex[g]);
            }
          }
          int f = 0;
          if (!cuda::mx_fp8_activation_block(cuda::mx_fp8_window(e), lo, hi, 0, 0, f)) {
            ++refused;
            EXPECT_LT(lo, f + cuda::mx_fp8_window(e).dmin);
            continue;
          }
          ++fits;
          for (int64_t c = b * 128; c < b * 128 + 128; ++c) {
            const int g = static_cast<int>((c % 128) / 32);
            const float cv = cuda::act_mx_code_value(x.data<float>()[r * k + c], ex[g], grid);
            const double y = std::ldexp(static_cast<double>(cv), ex[g] - f);
            ASSERT_TRUE(e4m3_exact(y)) << "row " << r << " col " << c;
            const double want = std::ldexp(decode(d, unpack_code(d, row, c)), ex[g]);
            EXPECT_EQ(std::ldexp(y, f), want) << "row " << r << " col " << c;
          }
        }
      }
      EXPECT_GT(fits, 0);
      EXPECT_GT(refused, 0);  // the widest rows leave the window
    }
  }
  // Scales whose product with the weights' would leave the exact range are refused.
  const cuda::MxFp8Window e2m1 = cuda::mx_fp8_window(ActElem::kE2M1);
  int f = 0;
  EXPECT_TRUE(cuda::mx_fp8_activation_block(e2m1, 0, 3, -20, 20, f));
  EXPECT_FALSE(cuda::mx_fp8_activation_block(e2m1, 80, 80, 0, 20, f));
  EXPECT_FALSE(cuda::mx_fp8_activation_block(e2m1, -120, -120, -20, 0, f));
  EXPECT_TRUE(cuda::mx_fp8_activation_block(e2m1, INT_MAX, INT_MIN, 0, 0, f));  // all zero
  EXPECT_EQ(f, 0);
}

}  // namespace
}  // namespace qlinear
