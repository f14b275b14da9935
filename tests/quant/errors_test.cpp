// Every rejection of quantize() / dequantize() comes back as an error that names the key and the
// offending value (STYLE 12).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "quant/quant_test_util.hpp"

namespace qlinear {
namespace {

using quant_test::f32_tensor;
using quant_test::i32_tensor;
using quant_test::make_tensor;
using quant_test::u8_tensor;

Tensor ones(int64_t rows, int64_t cols, DType dtype = DType::kF32) {
  return make_tensor(dtype, rows, cols, std::vector<double>(static_cast<size_t>(rows * cols), 1.0));
}

// Expects an error whose message contains every one of `parts`.
template <class T>
void expect_error(const Result<T>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning " << *parts.begin();
  for (const std::string& p : parts) {
    EXPECT_NE(r.message().find(p), std::string::npos) << r.message() << "\n  missing: " << p;
  }
}

TEST(QuantizeErrors, InputShapeAndDtype) {
  expect_error(quantize(Tensor::zeros(DType::kF32, {2, 3, 4}), kFp8DynamicTokenSym),
               {"kFp8DynamicTokenSym", "f32[2, 3, 4]", "2-D"});
  expect_error(quantize(Tensor::zeros(DType::kF32, {8}), kMxfp4Dynamic), {"kMxfp4Dynamic", "f32[8]"});
  expect_error(quantize(Tensor::zeros(DType::kI8, {2, 32}), kInt8DynamicTokenSym), {"kInt8DynamicTokenSym", "i8"});
  expect_error(quantize(Tensor::zeros(DType::kF8E4M3, {2, 32}), kFp8DynamicTensorSym),
               {"kFp8DynamicTensorSym", "f8e4m3fn"});
  expect_error(quantize(Tensor(), kNvfp4Dynamic), {"kNvfp4Dynamic", "undefined"});
}

TEST(QuantizeErrors, NonFiniteInput) {
  std::vector<double> v(2 * 32, 1.0);
  v[32 + 7] = std::numeric_limits<double>::infinity();
  expect_error(quantize(make_tensor(DType::kF32, 2, 32, v), kFp8DynamicTokenSym),
               {"kFp8DynamicTokenSym", "inf", "[1, 7]"});
  v[32 + 7] = std::nan("");
  expect_error(quantize(make_tensor(DType::kBF16, 2, 32, v), kMxfp8Dynamic), {"kMxfp8Dynamic", "nan", "[1, 7]"});
}

TEST(QuantizeErrors, StaticKeyWithoutScale) {
  expect_error(quantize(ones(4, 8), kFp8StaticTokenSym), {"kFp8StaticTokenSym", "static_scale", "[4, 1]"});
  expect_error(quantize(ones(4, 8), kInt8StaticTensorAsym), {"kInt8StaticTensorAsym", "static_scale"});
  QuantizeOptions o;
  o.static_scale = f32_tensor({1}, {0.5f});
  expect_error(quantize(ones(4, 8), kInt8StaticTensorAsym, o), {"kInt8StaticTensorAsym", "static_zero_point"});
  // NVFP4 block scales without the global scale they were made with.
  o.static_scale = u8_tensor(DType::kF8E4M3, {4, 2}, std::vector<uint8_t>(8, 0x38));
  expect_error(quantize(ones(4, 32), kNvfp4Static, o), {"kNvfp4Static", "nvfp4_global_scale"});
}

TEST(QuantizeErrors, WrongStaticScale) {
  QuantizeOptions o;
  o.static_scale = f32_tensor({1}, {1.0f});
  expect_error(quantize(ones(4, 8), kFp8StaticChannelSym, o), {"kFp8StaticChannelSym", "[1]", "[4, 1]"});
  o.static_scale = f32_tensor({2, 2}, {1, 1, 1, 1});
  expect_error(quantize(ones(130, 8), kFp8Static128BlockSym, o), {"kFp8Static128BlockSym", "[2, 2]", "[2, 1]"});
  o.static_scale = make_tensor(DType::kBF16, 1, 1, {1.0});
  expect_error(quantize(ones(4, 8), kFp8StaticTensorSym, o), {"kFp8StaticTensorSym", "bf16[1, 1]", "f32"});
  o.static_scale = f32_tensor({1}, {0.0f});
  expect_error(quantize(ones(4, 8), kInt8StaticTensorSym, o), {"kInt8StaticTensorSym", "0.000000", "> 0"});
  o.static_scale = f32_tensor({1}, {-2.0f});
  expect_error(quantize(ones(4, 8), kFp8StaticTensorSym, o), {"kFp8StaticTensorSym", "-2.0"});
  o.static_scale = f32_tensor({1}, {0.5f});
  o.static_zero_point = i32_tensor({2}, {1, 2});
  expect_error(quantize(ones(4, 8), kInt8StaticTensorAsym, o), {"kInt8StaticTensorAsym", "i32[2]"});
  // MX: E8M0 bytes of the right shape, no NaN code.
  QuantizeOptions mx;
  mx.static_scale = u8_tensor(DType::kU8, {2, 1}, {127, 127});
  expect_error(quantize(ones(2, 64), kMxfp8Static, mx), {"kMxfp8Static", "[2, 1]", "[2, 2]"});
  mx.static_scale = u8_tensor(DType::kU8, {2, 2}, {127, 127, 255, 127});
  expect_error(quantize(ones(2, 64), kMxfp4Static, mx), {"kMxfp4Static", "255", "[2]"});
  mx.static_scale = f32_tensor({2, 2}, {1, 1, 1, 1});
  expect_error(quantize(ones(2, 64), kMxfp4Static, mx), {"kMxfp4Static", "f32[2, 2]"});
  // NVFP4: negative or NaN block scales.
  QuantizeOptions nv;
  nv.nvfp4_global_scale = 1.0f;
  nv.static_scale = u8_tensor(DType::kF8E4M3, {1, 2}, {0x38, 0xB8});
  expect_error(quantize(ones(1, 32), kNvfp4Static, nv), {"kNvfp4Static", "[1]", "-1.0"});
}

TEST(QuantizeErrors, ColsNotMultipleOfBlock) {
  expect_error(quantize(ones(2, 48), kMxfp8Dynamic), {"kMxfp8Dynamic", "cols = 48", "32"});
  expect_error(quantize(ones(2, 40), kMxfp6E2M3Static), {"kMxfp6E2M3Static", "cols = 40", "32"});
  expect_error(quantize(ones(2, 24), kNvfp4Dynamic), {"kNvfp4Dynamic", "cols = 24", "16"});
}

TEST(QuantizeErrors, UnsupportedKeys) {
  const QuantKey mx_e5m2{DType::kF8E5M2, {DType::kE8M0, false, kMxBlock}};
  expect_error(quantize(ones(2, 32), mx_e5m2), {mx_e5m2.to_string(), "f8e5m2"});
  const QuantKey fp8_e5m2{DType::kF8E5M2, {DType::kF32, false, kPerToken}};
  expect_error(quantize(ones(2, 32), fp8_e5m2), {fp8_e5m2.to_string(), "f8e5m2"});
  const QuantKey fp8_asym{DType::kF8E4M3, {DType::kF32, false, kPerToken}, std::nullopt, false};
  expect_error(quantize(ones(2, 32), fp8_asym), {fp8_asym.to_string(), "zero point"});
  const QuantKey int8_asym_tensor_dyn{DType::kI8, {DType::kF32, false, kPerTensor}, std::nullopt, false};
  expect_error(quantize(ones(2, 32), int8_asym_tensor_dyn), {int8_asym_tensor_dyn.to_string(), "per_tensor"});
  const QuantKey mx_16{DType::kF4E2M1, {DType::kE8M0, false, kNvfp4Block}};
  expect_error(quantize(ones(2, 32), mx_16), {mx_16.to_string(), "1x16"});
  const QuantKey nv_32{DType::kF4E2M1, {DType::kF8E4M3, false, kMxBlock}, kF32StaticTensor};
  expect_error(quantize(ones(2, 32), nv_32), {nv_32.to_string(), "1x32"});
  const QuantKey nv_no_global{DType::kF4E2M1, {DType::kF8E4M3, false, kNvfp4Block}};
  expect_error(quantize(ones(2, 32), nv_no_global), {nv_no_global.to_string(), "scale2"});
  const QuantKey int8_e8m0{DType::kI8, {DType::kE8M0, false, kMxBlock}};
  expect_error(quantize(ones(2, 32), int8_e8m0), {int8_e8m0.to_string(), "i8"});
  const QuantKey f16_scale{DType::kF8E4M3, {DType::kF16, false, kPerToken}};
  expect_error(quantize(ones(2, 32), f16_scale), {f16_scale.to_string(), "f16"});
  const QuantKey bad_group{DType::kF8E4M3, {DType::kF32, false, GroupShape{0, 32}}};
  expect_error(quantize(ones(2, 32), bad_group), {bad_group.to_string(), "0x32"});
  const QuantKey fp8_scale2{DType::kF8E4M3, {DType::kF32, false, kPerToken}, kF32StaticTensor};
  expect_error(quantize(ones(2, 32), fp8_scale2), {fp8_scale2.to_string(), "second scale"});
}

TEST(QuantizeErrors, OptionsTheKeyDoesNotUse) {
  QuantizeOptions o;
  o.static_scale = f32_tensor({1}, {1.0f});
  expect_error(quantize(ones(2, 32), kFp8DynamicTensorSym, o),
               {"kFp8DynamicTensorSym", "static_scale", "f32[1]", "dynamic"});
  QuantizeOptions zp;
  zp.static_scale = f32_tensor({1}, {1.0f});
  zp.static_zero_point = i32_tensor({1}, {3});
  expect_error(quantize(ones(2, 32), kInt8StaticTensorSym, zp),
               {"kInt8StaticTensorSym", "static_zero_point", "i32[1]"});
  QuantizeOptions ub;
  ub.scale_ub = 2.5f;
  expect_error(quantize(ones(2, 32), kFp8DynamicTensorSym, ub), {"kFp8DynamicTensorSym", "scale_ub = 2.5"});
  expect_error(quantize(ones(2, 32), kInt8DynamicTokenSym, ub), {"kInt8DynamicTokenSym", "scale_ub"});
  ub.scale_ub = -1.0f;
  expect_error(quantize(ones(2, 32), kFp8DynamicTokenSym, ub), {"kFp8DynamicTokenSym", "scale_ub = -1.0"});
  QuantizeOptions g;
  g.nvfp4_global_scale = 3.0f;
  expect_error(quantize(ones(2, 32), kMxfp4Dynamic, g), {"kMxfp4Dynamic", "nvfp4_global_scale = 3.0"});
  g.nvfp4_global_scale = 0.0f;
  expect_error(quantize(ones(2, 32), kNvfp4Dynamic, g), {"kNvfp4Dynamic", "nvfp4_global_scale = 0.0"});
}

// An f64 input can hold magnitudes that no f32 scale can express.
TEST(QuantizeErrors, F64BeyondF32Scales) {
  const Tensor huge = make_tensor(DType::kF64, 2, 32, std::vector<double>(64, 1e300));
  expect_error(quantize(huge, kFp8DynamicTokenSym), {"kFp8DynamicTokenSym", "group 0", "1000000"});
  expect_error(quantize(huge, kInt8StaticChannelSym), {"kInt8StaticChannelSym", "amax"});
  std::vector<double> v(64, 1e300);
  v[0] = -1e300;
  expect_error(quantize(make_tensor(DType::kF64, 2, 32, v), kInt8DynamicTokenAsym), {"kInt8DynamicTokenAsym", "row 0"});
  expect_error(quantize(huge, kNvfp4Dynamic), {"kNvfp4Dynamic", "amax", "global scale"});
}

TEST(DequantizeErrors, MismatchedTensors) {
  auto q = quantize(ones(4, 64), kFp8DynamicTokenSym);
  ASSERT_TRUE(q.is_ok());
  expect_error(dequantize(*q, DType::kF16), {"kFp8DynamicTokenSym", "f16"});
  QuantizedTensor bad = *q;
  bad.scale = f32_tensor({1}, {1.0f});
  expect_error(dequantize(bad), {"kFp8DynamicTokenSym", "scale", "[1]", "[4, 1]"});
  bad = *q;
  bad.cols = 32;
  expect_error(dequantize(bad), {"kFp8DynamicTokenSym", "data", "f8e4m3fn[4, 64]", "[4, 32]"});
  bad = *q;
  bad.rows = -1;
  expect_error(dequantize(bad), {"kFp8DynamicTokenSym", "rows = -1"});

  auto asym = quantize(ones(4, 64), kInt8DynamicTokenAsym);
  ASSERT_TRUE(asym.is_ok());
  bad = *asym;
  bad.zero_point = Tensor();
  expect_error(dequantize(bad), {"kInt8DynamicTokenAsym", "zero_point", "undefined"});

  auto mx = quantize(ones(2, 64), kMxfp6E3M2Dynamic);
  ASSERT_TRUE(mx.is_ok());
  bad = *mx;
  static_cast<uint8_t*>(bad.scale.raw())[3] = 0xFF;
  expect_error(dequantize(bad), {"kMxfp6E3M2Dynamic", "scale[3]", "255"});
  bad = *mx;
  bad.cols = 48;
  expect_error(dequantize(bad), {"kMxfp6E3M2Dynamic", "cols = 48"});

  auto nv = quantize(ones(2, 32), kNvfp4Dynamic);
  ASSERT_TRUE(nv.is_ok());
  bad = *nv;
  bad.scale2 = Tensor();
  expect_error(dequantize(bad), {"kNvfp4Dynamic", "scale2", "undefined"});
  bad = *nv;
  bad.scale2 = f32_tensor({1}, {0.0f});
  expect_error(dequantize(bad), {"kNvfp4Dynamic", "scale2", "0.0"});

  QuantizedTensor e5m2 = *q;
  e5m2.key.dtype = DType::kF8E5M2;
  expect_error(dequantize(e5m2), {e5m2.key.to_string(), "f8e5m2"});
}

}  // namespace
}  // namespace qlinear
