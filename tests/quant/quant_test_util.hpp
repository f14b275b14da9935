#pragma once
// Helpers shared by the quantizer tests: building small tensors and reading codes back.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qlinear/quantize.hpp"

namespace qlinear::quant_test {

// A row-major [rows, cols] tensor of `dtype` (F32, F64, BF16 or F16) holding `values` (rounded RNE).
inline Tensor make_tensor(DType dtype, int64_t rows, int64_t cols, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, {rows, cols});
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF64: t.data<double>()[i] = values[i]; break;
      case DType::kF32: t.data<float>()[i] = static_cast<float>(values[i]); break;
      case DType::kBF16: t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(values[i])); break;
      case DType::kF16: t.data<uint16_t>()[i] = float_to_f16(static_cast<float>(values[i])); break;
      default: break;
    }
  }
  return t;
}

inline Tensor f32_tensor(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

inline Tensor i32_tensor(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(DType::kI32, std::move(shape));
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

inline Tensor u8_tensor(DType dtype, Shape shape, const std::vector<uint8_t>& values) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  std::memcpy(t.raw(), values.data(), values.size());
  return t;
}

// Element (r, c) of a quantized operand's codes, unpacked for FP6 / FP4.
inline uint32_t code_at(const QuantizedTensor& q, int64_t r, int64_t c) {
  const uint8_t* bytes = static_cast<const uint8_t*>(q.data.raw());
  if (is_packed(q.key.dtype)) return unpack_code(q.key.dtype, bytes + r * q.data.size(1), c);
  return bytes[r * q.cols + c];
}

inline float f32_at(const Tensor& t, int64_t i) { return t.data<float>()[i]; }
inline uint8_t u8_at(const Tensor& t, int64_t i) { return static_cast<const uint8_t*>(t.raw())[i]; }

}  // namespace qlinear::quant_test
