#pragma once
// INT8 W8A8 on the GPU: activation quantization bit-identical to the reference quantizer
// (src/quant/int8_quant.cpp), an exact INT8 x INT8 -> INT32 GEMM (cuBLASLt IMMA), and the epilogue that
// applies zero points, scales and bias in FP64 before the one rounding to the output dtype.
//
//   activation key             scale s (f32)                          zero point z       codes q
//   static per-tensor, sym     given (max of input_scale over shards)  0                  sat8(rne(x / s))
//   static per-tensor, asym    given                                   input_zero_point   sat8(rne(x / s) + z)
//   dynamic per-token, sym     f32(amax_row / 127), 1 when 0           0                  sat8(rne(x / s))
//   dynamic per-token, asym    f32((hi - lo) / 255), 1 when 0          rne(-128 - lo / s) sat8(rne(x / s) + z)
// (x / s in double, as the reference; sat8 clamps to [-128, 127].)
//
// Epilogue: y[m, n] = (acc[m, n] - z[m] * colsum[n]) * s[m] * w_scale[n] + bias[n], where colsum[n] =
// sum_k w[n, k] (int64 on the host at process time). acc and the zero-point term are exact integers, so the
// only roundings are the FP64 products and the final one; the reference dequantizes s * (q - z) exactly and
// accumulates in FP64, so the two agree to the output dtype's rounding.
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

enum class Int8ActMode : uint8_t { kStaticSym, kStaticAsym, kDynamicTokenSym, kDynamicTokenAsym };

struct Int8QuantArgs {
  const void* x = nullptr;  // [m, k] row-major F32/BF16/F16, rows ld_x elements apart
  DType x_dtype = DType::kBF16;
  int64_t m = 0, k = 0, ld_x = 0;
  Int8ActMode mode = Int8ActMode::kDynamicTokenSym;
  float static_scale = 1.0f;      // static modes
  int32_t static_zero_point = 0;  // kStaticAsym
  int8_t* codes = nullptr;        // [m, ld_codes]; columns [k, ld_codes) are written as 0
  int64_t ld_codes = 0;
  float* scales = nullptr;        // dynamic modes: [m]
  int32_t* zero_points = nullptr; // kDynamicTokenAsym: [m]
  const float* row_amax = nullptr; // kDynamicTokenSym: the rows' amax given (tensor-parallel slices of a
                                   // row use the full row's), instead of reducing this slice
};
Status launch_int8_act_quant(const Int8QuantArgs& args, Stream stream);

struct Int8EpilogueArgs {
  const int32_t* acc = nullptr;  // [m, n] row-major
  int64_t m = 0, n = 0;
  int64_t ld_out = 0;  // elements between output rows; 0: n (a column block of a wider output otherwise)
  const float* x_scale = nullptr;        // [m], or one value when x_scale_per_row is false
  bool x_scale_per_row = false;
  float x_scale_value = 1.0f;            // used when x_scale is null
  const int32_t* x_zero_point = nullptr; // [m], or one value when x_zero_point_per_row is false
  bool x_zero_point_per_row = false;
  int32_t x_zero_point_value = 0;        // used when x_zero_point is null
  const float* w_scale = nullptr;  // [n]
  const int64_t* w_colsum = nullptr;  // [n]; null when every zero point is 0
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
};
Status launch_int8_epilogue(const Int8EpilogueArgs& args, Stream stream);

}  // namespace qlinear::cuda
