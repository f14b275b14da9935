// dequantize(): the exact value of every code times its scale, into F64 (exact, except NVFP4's division by
// the global multiplier g, which is correctly rounded) or F32 (that value rounded once).
//   FP8 / INT8 symmetric   x = s[group(r, c)] * q
//   INT8 asymmetric        x = s * (q - zp)
//   MX                     x = decode(code) * 2^(e - 127)
//   NVFP4                  x = decode(q) * decode(sf) / g
// A QuantizedTensor may come from a checkpoint rather than quantize(), so every tensor's dtype and shape
// is checked against the key first.
#include <cmath>

#include "quant/quant_internal.hpp"

namespace qlinear {
namespace quant {

namespace {

Status check_tensor(const Tensor& t, const char* what, std::initializer_list<DType> dtypes, const Shape& shape,
                    const std::string& where, bool allow_scalar = false) {
  if (!t.defined()) return Status::error(where + what + " is undefined");
  if (t.device().kind != DeviceKind::kCpu) return Status::error(where + what + " is not a host tensor");
  bool dtype_ok = false;
  std::string names;
  for (DType d : dtypes) {
    dtype_ok = dtype_ok || t.dtype() == d;
    names += (names.empty() ? "" : " or ") + std::string(name(d));
  }
  const bool shape_ok = t.shape() == shape || (allow_scalar && t.rank() == 0);
  if (!dtype_ok || !shape_ok) {
    return Status::error(where + what + " is " + t.describe() + ", expected " + names + shape_to_string(shape));
  }
  return Status::ok();
}

// Row-major [rows, cols] values into the output tensor.
Tensor write_output(const std::vector<double>& values, int64_t rows, int64_t cols, DType out) {
  Tensor t = Tensor::empty(out, {rows, cols});
  const int64_t n = rows * cols;
  if (out == DType::kF64) {
    std::copy(values.begin(), values.end(), t.data<double>());
  } else {
    float* p = t.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(values[static_cast<size_t>(i)]);
  }
  return t;
}

Result<std::vector<double>> dequant_scaled(const QuantizedTensor& q, const std::string& where) {
  const QuantKey& key = q.key;
  const GroupShape& g = key.scale.group;
  const GroupGrid grid = group_grid(g, q.rows, q.cols);
  const Shape shape = scale_shape(g, q.rows, q.cols);
  QL_RETURN_IF_ERROR(check_tensor(q.data, "data", {key.dtype}, {q.rows, q.cols}, where));
  QL_ASSIGN_OR_RETURN(const std::vector<double> s,
                      read_f32_scales(q.scale, shape, g.is_per_tensor(), where + "scale", /*allow_zero=*/true));
  std::vector<double> zp;  // one per scale; empty when symmetric
  if (!key.symmetric) {
    QL_RETURN_IF_ERROR(check_tensor(q.zero_point, "zero_point", {DType::kI32}, shape, where, g.is_per_tensor()));
    const Tensor z = q.zero_point.contiguous();
    zp.assign(z.data<int32_t>(), z.data<int32_t>() + z.numel());
  }
  const Tensor data = q.data.contiguous();
  const uint8_t* bytes = static_cast<const uint8_t*>(data.raw());
  std::vector<double> out(static_cast<size_t>(q.rows * q.cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t i = r * q.cols + c;
      const int64_t gi = grid.index(r, c);
      const double v = key.dtype == DType::kI8 ? static_cast<double>(static_cast<int8_t>(bytes[i]))
                                               : decode(key.dtype, bytes[i]);
      out[static_cast<size_t>(i)] = zp.empty() ? s[gi] * v : s[gi] * (v - zp[gi]);
    }
  }
  return out;
}

Result<std::vector<double>> dequant_mx(const QuantizedTensor& q, const std::string& where) {
  const DType elem = q.key.dtype;
  if (q.cols % 32 != 0) {
    return Status::error(where + "cols = " + std::to_string(q.cols) + " is not a multiple of 32 (the MX block)");
  }
  const bool packed = is_packed(elem);
  const int64_t row_bytes = packed ? storage_bytes(elem, q.cols) : q.cols;
  const int64_t blocks = q.cols / 32;
  QL_RETURN_IF_ERROR(
      check_tensor(q.data, "data", {packed ? DType::kU8 : elem}, {q.rows, row_bytes}, where));
  QL_RETURN_IF_ERROR(check_tensor(q.scale, "scale", {DType::kU8, DType::kE8M0}, {q.rows, blocks}, where));
  const Tensor data = q.data.contiguous();
  const Tensor scale = q.scale.contiguous();
  const uint8_t* sc = static_cast<const uint8_t*>(scale.raw());
  for (int64_t i = 0; i < q.rows * blocks; ++i) {
    if (sc[i] == 0xFF) return Status::error(where + "scale[" + std::to_string(i) + "] is 255, the E8M0 NaN");
  }
  const uint8_t* bytes = static_cast<const uint8_t*>(data.raw());
  std::vector<double> out(static_cast<size_t>(q.rows * q.cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < q.rows; ++r) {
    const uint8_t* row = bytes + r * row_bytes;
    for (int64_t c = 0; c < q.cols; ++c) {
      const uint32_t code = packed ? unpack_code(elem, row, c) : row[c];
      out[static_cast<size_t>(r * q.cols + c)] = std::ldexp(decode(elem, code), sc[r * blocks + c / 32] - 127);
    }
  }
  return out;
}

Result<std::vector<double>> dequant_nvfp4(const QuantizedTensor& q, const std::string& where) {
  if (q.cols % 16 != 0) {
    return Status::error(where + "cols = " + std::to_string(q.cols) + " is not a multiple of 16 (the NVFP4 block)");
  }
  const int64_t row_bytes = storage_bytes(DType::kF4E2M1, q.cols);
  const int64_t blocks = q.cols / 16;
  QL_RETURN_IF_ERROR(check_tensor(q.data, "data", {DType::kU8}, {q.rows, row_bytes}, where));
  QL_RETURN_IF_ERROR(check_tensor(q.scale, "scale", {DType::kF8E4M3, DType::kU8}, {q.rows, blocks}, where));
  QL_RETURN_IF_ERROR(check_tensor(q.scale2, "scale2", {DType::kF32}, {1}, where, /*allow_scalar=*/true));
  const double g = q.scale2.contiguous().data<float>()[0];
  if (!(std::isfinite(g) && g > 0)) {
    return Status::error(where + "scale2 (global scale g) = " + std::to_string(g) + " must be finite and > 0");
  }
  const Tensor data = q.data.contiguous();
  const Tensor scale = q.scale.contiguous();
  const uint8_t* sc = static_cast<const uint8_t*>(scale.raw());
  std::vector<double> out(static_cast<size_t>(q.rows * q.cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < q.rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(data.raw()) + r * row_bytes;
    for (int64_t c = 0; c < q.cols; ++c) {
      const double sf = decode(DType::kF8E4M3, sc[r * blocks + c / 16]);
      out[static_cast<size_t>(r * q.cols + c)] = decode(DType::kF4E2M1, unpack_code(DType::kF4E2M1, row, c)) * sf / g;
    }
  }
  return out;
}

}  // namespace
}  // namespace quant

Result<Tensor> dequantize(const QuantizedTensor& q, DType out) {
  const std::string where = "dequantize " + key_name(q.key) + ": ";
  if (out != DType::kF32 && out != DType::kF64) {
    return Status::error(where + "output dtype " + std::string(name(out)) + " is not supported (f32 or f64)");
  }
  QL_ASSIGN_OR_RETURN(const quant::Family family, quant::classify(q.key));
  if (q.rows < 0 || q.cols < 0) {
    return Status::error(where + "rows = " + std::to_string(q.rows) + ", cols = " + std::to_string(q.cols) +
                         " must be >= 0");
  }
  Result<std::vector<double>> values = Status::error("unreachable");
  switch (family) {
    case quant::Family::kFp8:
    case quant::Family::kInt8: values = quant::dequant_scaled(q, where); break;
    case quant::Family::kMx: values = quant::dequant_mx(q, where); break;
    case quant::Family::kNvfp4: values = quant::dequant_nvfp4(q, where); break;
  }
  if (!values) return values.status();
  return quant::write_output(*values, q.rows, q.cols, out);
}

}  // namespace qlinear
