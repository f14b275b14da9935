// Hand-worked FP8 / INT8 / NVFP4 examples of the scale rules, scale_shape(), and thread-count
// independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quant_test_util.hpp"

namespace qlinear {
namespace {

using quant_test::code_at;
using quant_test::f32_at;
using quant_test::f32_tensor;
using quant_test::make_tensor;
using quant_test::u8_at;

int8_t i8_at(const QuantizedTensor& q, int64_t r, int64_t c) { return q.data.data<int8_t>()[r * q.cols + c]; }

TEST(Fp8Numerics, DynamicPerTokenScaleBoundsAndUpperBound) {
  // Row 0: amax 448 -> s = 1; row 1: all zero -> s = 1/(448*512); row 2: amax 2 -> s = 2/448.
  std::vector<double> v(3 * 4, 0.0);
  v[0] = 448, v[1] = 1.0625, v[2] = -3, v[3] = 0.5;
  v[8] = 2, v[9] = -1;
  const Tensor x = make_tensor(DType::kF32, 3, 4, v);
  auto q = quantize(x, kFp8DynamicTokenSym);
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(q->scale.shape(), (Shape{3, 1}));
  EXPECT_EQ(f32_at(q->scale, 0), 1.0f);
  EXPECT_EQ(f32_at(q->scale, 1), kFp8MinScalingFactor);
  EXPECT_EQ(f32_at(q->scale, 2), 2.0f / 448.0f);
  EXPECT_EQ(code_at(*q, 0, 0), 0x7Eu);                            // 448
  EXPECT_EQ(decode(DType::kF8E4M3, code_at(*q, 0, 1)), 1.0);      // 1.0625: tie between 1 and 1.125 -> even
  EXPECT_EQ(decode(DType::kF8E4M3, code_at(*q, 2, 0)), 448.0);
  // scale_ub = 224 caps row 0's scale at 0.5; 448 / 0.5 = 896 saturates to 448.
  QuantizeOptions o;
  o.scale_ub = 224.0f;
  q = quantize(x, kFp8DynamicTokenSym, o);
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(f32_at(q->scale, 0), 0.5f);
  EXPECT_EQ(code_at(*q, 0, 0), 0x7Eu);
  EXPECT_EQ(decode(DType::kF8E4M3, code_at(*q, 0, 1)), 2.0);  // 2.125 -> tie between 2 and 2.25 -> even 2
}

TEST(Fp8Numerics, ZeroGuards) {
  const Tensor zeros = make_tensor(DType::kF32, 2, 256, std::vector<double>(512, 0.0));
  for (const QuantKey& key : {kFp8DynamicTensorSym, kFp8StaticTensorSym, kFp8StaticChannelSym,
                              kFp8Static128BlockSym, kFp8Dynamic128x128Sym}) {
    const auto q = quantize(zeros, key);
    ASSERT_TRUE(q.is_ok()) << q.message();
    for (int64_t i = 0; i < q->scale.numel(); ++i) {
      EXPECT_EQ(f32_at(q->scale, i), kFp8MinScalingFactor) << key_name(key);
    }
  }
  // 1xG groups floor the amax at 1e-10f instead (native_per_token_group_quant_fp8).
  const auto q = quantize(zeros, kFp8Dynamic128Sym);
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(q->scale.shape(), (Shape{2, 2}));
  EXPECT_EQ(f32_at(q->scale, 0), static_cast<float>(static_cast<double>(1e-10f) / 448.0));
}

TEST(Fp8Numerics, BlockScalesCoverPartialBlocks) {
  // [130, 200] weight, 128x128 blocks -> scale [2, 2]; block (1, 1) is rows 128..129, cols 128..199.
  std::vector<double> v(130 * 200, 1.0);
  v[129 * 200 + 199] = -896.0;  // amax of block (1, 1)
  v[0] = 44.8;                  // amax of block (0, 0)
  const auto q = quantize(make_tensor(DType::kF32, 130, 200, v), kFp8Static128BlockSym);
  ASSERT_TRUE(q.is_ok()) << q.message();
  ASSERT_EQ(q->scale.shape(), (Shape{2, 2}));
  EXPECT_EQ(f32_at(q->scale, 0), static_cast<float>(static_cast<double>(44.8f) / 448.0));
  EXPECT_EQ(f32_at(q->scale, 1), static_cast<float>(1.0 / 448.0));
  EXPECT_EQ(f32_at(q->scale, 2), static_cast<float>(1.0 / 448.0));
  EXPECT_EQ(f32_at(q->scale, 3), 2.0f);
  EXPECT_EQ(code_at(*q, 129, 199), 0xFEu);  // -448
}

TEST(Int8Numerics, SymmetricRoundsHalfToEven) {
  const Tensor x = make_tensor(DType::kF32, 1, 6, {127, 0.5, 1.5, 2.5, -2.5, -0.5});
  const auto q = quantize(x, kInt8DynamicTokenSym);
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(f32_at(q->scale, 0), 1.0f);
  const int8_t want[] = {127, 0, 2, 2, -2, 0};
  for (int c = 0; c < 6; ++c) EXPECT_EQ(i8_at(*q, 0, c), want[c]) << c;
}

TEST(Int8Numerics, AsymmetricDynamicPerToken) {
  // Row 0: [-128, 127] -> s = 1, zp = 0. Row 1: [10, 265] (all positive: the range does not include 0)
  // -> s = 1, zp = -138, outside the i8 range and fine as i32. Row 2: the constant 5 widens to [0, 5] ->
  // s = 5/255, zp = -128, q = 255 - 128 = 127. Row 3: zeros -> s = 1, zp = -128, q = -128.
  const Tensor x = make_tensor(DType::kF32, 4, 2, {-128, 127, 10, 265, 5, 5, 0, 0});
  const auto q = quantize(x, kInt8DynamicTokenAsym);
  ASSERT_TRUE(q.is_ok()) << q.message();
  ASSERT_EQ(q->zero_point.shape(), (Shape{4, 1}));
  const int32_t* zp = q->zero_point.data<int32_t>();
  const float want_scale[] = {1.0f, 1.0f, static_cast<float>(5.0 / 255.0), 1.0f};
  const int32_t want_zp[] = {0, -138, -128, -128};
  const int8_t want_q[][2] = {{-128, 127}, {-128, 127}, {127, 127}, {-128, -128}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(f32_at(q->scale, r), want_scale[r]) << r;
    EXPECT_EQ(zp[r], want_zp[r]) << r;
    for (int c = 0; c < 2; ++c) EXPECT_EQ(i8_at(*q, r, c), want_q[r][c]) << r << "," << c;
  }
  const auto d = dequantize(*q, DType::kF64);
  ASSERT_TRUE(d.is_ok()) << d.message();
  EXPECT_EQ(d->data<double>()[3], 265.0);
  EXPECT_NEAR(d->data<double>()[4], 5.0, 5.0 * 0x1p-23);
  EXPECT_EQ(d->data<double>()[6], 0.0);
}

TEST(Int8Numerics, AsymmetricStatic) {
  QuantizeOptions o;
  o.static_scale = f32_tensor({1}, {0.5f});
  o.static_zero_point = quant_test::i32_tensor({1}, {10});
  const auto q = quantize(make_tensor(DType::kF32, 1, 4, {0.25, -0.75, 100, -100}), kInt8StaticTensorAsym, o);
  ASSERT_TRUE(q.is_ok()) << q.message();
  // 0.5 -> RNE 0 (+10); -1.5 -> -2 (+10); 200 + 10 -> 127; -200 + 10 -> -128.
  const int8_t want[] = {10, 8, 127, -128};
  for (int c = 0; c < 4; ++c) EXPECT_EQ(i8_at(*q, 0, c), want[c]) << c;
  EXPECT_EQ(q->zero_point.data<int32_t>()[0], 10);
}

TEST(Nvfp4Numerics, GlobalAndBlockScales) {
  // amax(x) = 2688 = 448 * 6 -> g = 1. Block 0 amax 6 -> sf = 1; block 1 amax 2688 -> sf = 448.
  std::vector<double> v(32, 0.0);
  v[0] = 6, v[1] = 3, v[2] = -0.75, v[3] = 1.25;  // 0.75 and 1.25 are E2M1 ties -> 1 (even) and 1 (even)
  v[16] = 2688, v[17] = 448;
  const auto q = quantize(make_tensor(DType::kF32, 1, 32, v), kNvfp4Dynamic);
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(q->scale2.data<float>()[0], 1.0f);
  EXPECT_EQ(decode(DType::kF8E4M3, u8_at(q->scale, 0)), 1.0);
  EXPECT_EQ(decode(DType::kF8E4M3, u8_at(q->scale, 1)), 448.0);
  const double want[] = {6, 3, -1, 1};
  for (int c = 0; c < 4; ++c) EXPECT_EQ(decode(DType::kF4E2M1, code_at(*q, 0, c)), want[c]) << c;
  EXPECT_EQ(decode(DType::kF4E2M1, code_at(*q, 0, 16)), 6.0);
  EXPECT_EQ(decode(DType::kF4E2M1, code_at(*q, 0, 17)), 1.0);
  // An all-zero tensor: g = 1, sf = 0, codes 0.
  const auto z = quantize(make_tensor(DType::kF32, 1, 16, std::vector<double>(16, 0.0)), kNvfp4Dynamic);
  ASSERT_TRUE(z.is_ok()) << z.message();
  EXPECT_EQ(z->scale2.data<float>()[0], 1.0f);
  EXPECT_EQ(u8_at(z->scale, 0), 0);
}

TEST(ScaleShape, AsDocumented) {
  EXPECT_EQ(scale_shape(kPerTensor, 7, 300), (Shape{1}));
  EXPECT_EQ(scale_shape(kPerToken, 7, 300), (Shape{7, 1}));
  EXPECT_EQ(scale_shape(kPerChannel, 7, 300), (Shape{7, 1}));
  EXPECT_EQ(scale_shape(kGroup1x128, 7, 300), (Shape{7, 3}));
  EXPECT_EQ(scale_shape(kGroup1x64, 7, 128), (Shape{7, 2}));
  EXPECT_EQ(scale_shape(kBlock128x128, 257, 300), (Shape{3, 3}));
  EXPECT_EQ(scale_shape(kMxBlock, 7, 96), (Shape{7, 3}));
  EXPECT_EQ(scale_shape(kNvfp4Block, 7, 96), (Shape{7, 6}));
  EXPECT_EQ(scale_shape(kPerToken, 0, 300), (Shape{0, 1}));
}

TEST(Quantize, EmptyOperands) {
  const Tensor x = Tensor::empty(DType::kF32, {0, 64});
  for (const NamedKey& k : named_keys()) {
    if (k.key.scale.is_static && (k.key.scale.group.row == 1 || !k.key.symmetric)) continue;  // need a scale
    const auto q = quantize(x, k.key);
    ASSERT_TRUE(q.is_ok()) << k.name << ": " << q.message();
    EXPECT_EQ(q->rows, 0);
    const auto d = dequantize(*q);
    ASSERT_TRUE(d.is_ok()) << k.name << ": " << d.message();
    EXPECT_EQ(d->shape(), (Shape{0, 64}));
  }
}

// Results must not depend on the number of OpenMP threads.
TEST(Quantize, IndependentOfThreadCount) {
  std::vector<double> v(67 * 256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * i) * std::pow(10.0, (i % 13) - 6.0);
  const Tensor x = make_tensor(DType::kF32, 67, 256, v);
  const int threads = omp_get_max_threads();
  for (const NamedKey& k : named_keys()) {
    if (k.key.scale.is_static && (k.key.scale.group.row == 1 || !k.key.symmetric)) continue;
    omp_set_num_threads(1);
    const auto one = quantize(x, k.key);
    omp_set_num_threads(4);
    const auto four = quantize(x, k.key);
    omp_set_num_threads(threads);
    ASSERT_TRUE(one.is_ok() && four.is_ok()) << k.name;
    for (const auto& [a, b] : {std::pair{&one->data, &four->data}, std::pair{&one->scale, &four->scale}}) {
      ASSERT_EQ(a->nbytes(), b->nbytes()) << k.name;
      EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0) << k.name;
    }
  }
}

}  // namespace
}  // namespace qlinear
