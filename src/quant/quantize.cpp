// quantize(): validates the input and the options against the key, widens the input to double and
// dispatches on the key's family. Also the group geometry shared by the f32-scaled families.
#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/quant_internal.hpp"

namespace qlinear {
namespace quant {

namespace {

bool valid_extent(int64_t v) { return v == -1 || v >= 1; }

Status unsupported(const QuantKey& key, const std::string& why) {
  return Status::error("unsupported quant key " + key_name(key) + ": " + why);
}

}  // namespace

Result<Family> classify(const QuantKey& key) {
  const GroupShape& g = key.scale.group;
  const std::string elem(name(key.dtype));
  if (!valid_extent(g.row) || !valid_extent(g.col)) {
    return unsupported(key, "group shape " + std::to_string(g.row) + "x" + std::to_string(g.col) +
                                " (each extent must be -1 or >= 1)");
  }
  switch (key.scale.dtype) {
    case DType::kF32:
      if (key.scale2) return unsupported(key, "a second scale is only defined for NVFP4");
      if (key.dtype == DType::kF8E4M3) {
        if (!key.symmetric) return unsupported(key, "FP8 has no zero point (asymmetric is INT8 only)");
        return Family::kFp8;
      }
      if (key.dtype == DType::kI8) {
        // Asymmetric INT8 exists in vLLM as a static per-tensor or a dynamic per-token activation only.
        if (!key.symmetric && !(key.scale.is_static && g.is_per_tensor()) &&
            !(!key.scale.is_static && g.is_per_token())) {
          return unsupported(key, "asymmetric INT8 is static per-tensor or dynamic per-token, not " +
                                      std::string(key.scale.is_static ? "static " : "dynamic ") + g.to_string());
        }
        return Family::kInt8;
      }
      return unsupported(key, "element format " + elem + " with f32 scales (f8e4m3fn or i8 expected)");
    case DType::kE8M0:
      if (key.dtype != DType::kF8E4M3 && key.dtype != DType::kF6E2M3 && key.dtype != DType::kF6E3M2 &&
          key.dtype != DType::kF4E2M1) {
        return unsupported(key, "element format " + elem +
                                    " in MX (f8e4m3fn, f6e2m3fn, f6e3m2fn or f4e2m1fn expected)");
      }
      if (g != kMxBlock) return unsupported(key, "MX scale group " + g.to_string() + " (1x32 expected)");
      if (key.scale2) return unsupported(key, "MX has no second scale");
      if (!key.symmetric) return unsupported(key, "MX has no zero point");
      return Family::kMx;
    case DType::kF8E4M3:
      if (key.dtype != DType::kF4E2M1) {
        return unsupported(key, "element format " + elem + " with E4M3 block scales (NVFP4 is f4e2m1)");
      }
      if (g != kNvfp4Block) return unsupported(key, "NVFP4 scale group " + g.to_string() + " (1x16 expected)");
      if (!key.scale2 || (*key.scale2 != kF32StaticTensor && *key.scale2 != kF32DynamicTensor)) {
        return unsupported(key, "NVFP4 needs scale2 = f32,static|dynamic,per_tensor (the global scale)");
      }
      if (!key.symmetric) return unsupported(key, "NVFP4 has no zero point");
      return Family::kNvfp4;
    default:
      return unsupported(key, "scale format " + std::string(name(key.scale.dtype)) +
                                  " (f32, e8m0 or f8e4m3fn expected)");
  }
}

GroupGrid group_grid(const GroupShape& group, int64_t rows, int64_t cols) {
  GroupGrid grid;
  if (group.is_per_channel()) {  // vLLM: one scale per output channel = per row of [N, K]
    grid.row_extent = 1;
    grid.col_extent = std::max<int64_t>(cols, 1);
  } else {
    grid.row_extent = group.row == -1 ? std::max<int64_t>(rows, 1) : group.row;
    grid.col_extent = group.col == -1 ? std::max<int64_t>(cols, 1) : group.col;
  }
  // A whole-dimension extent is one group even when the dimension is empty, so that the scale shapes stay
  // [1] / [rows, 1] as documented.
  const bool whole_rows = group.row == -1 && !group.is_per_channel();
  const bool whole_cols = group.col == -1 || group.is_per_channel();
  grid.grid_rows = whole_rows ? 1 : (rows + grid.row_extent - 1) / grid.row_extent;
  grid.grid_cols = whole_cols ? 1 : (cols + grid.col_extent - 1) / grid.col_extent;
  return grid;
}

std::vector<double> group_amax(const Input& x, const GroupGrid& grid) {
  // Row-wise maxima per group column first (parallel over rows), then a serial fold over the rows of
  // each group: max is exact, so the result does not depend on the thread count.
  std::vector<double> row_amax(static_cast<size_t>(x.rows * grid.grid_cols), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const double* v = x.row(r);
    double* out = row_amax.data() + r * grid.grid_cols;
    for (int64_t c = 0; c < x.cols; ++c) {
      double& m = out[c / grid.col_extent];
      m = std::max(m, std::fabs(v[c]));
    }
  }
  std::vector<double> amax(static_cast<size_t>(grid.size()), 0.0);
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t gc = 0; gc < grid.grid_cols; ++gc) {
      double& m = amax[(r / grid.row_extent) * grid.grid_cols + gc];
      m = std::max(m, row_amax[r * grid.grid_cols + gc]);
    }
  }
  return amax;
}

Result<std::vector<double>> read_f32_scales(const Tensor& t, const Shape& expected, bool allow_scalar,
                                            const std::string& where, bool allow_zero) {
  if (t.dtype() != DType::kF32) return Status::error(where + " must be f32, got " + t.describe());
  const bool scalar_ok = allow_scalar && t.rank() == 0;
  if (t.shape() != expected && !scalar_ok) {
    return Status::error(where + " has shape " + shape_to_string(t.shape()) + ", expected " +
                         shape_to_string(expected));
  }
  const Tensor c = t.contiguous();
  std::vector<double> out(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) {
    const double v = c.data<float>()[i];
    if (!(std::isfinite(v) && (v > 0 || (allow_zero && v == 0)))) {
      return Status::error(where + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                           (allow_zero ? " (scales must be finite and >= 0)" : " (scales must be finite and > 0)"));
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

Result<std::vector<double>> resolve_scales(const Input& x, const QuantKey& key, const GroupGrid& grid,
                                           const QuantizeOptions& options,
                                           const std::function<double(double amax)>& from_amax) {
  return resolve_scales_from(x.rows, x.cols, key, options, [&] { return group_amax(x, grid); }, from_amax);
}

Result<std::vector<double>> resolve_scales_from(int64_t rows, int64_t cols, const QuantKey& key,
                                                const QuantizeOptions& options,
                                                const std::function<std::vector<double>()>& amax,
                                                const std::function<double(double amax)>& from_amax) {
  const GroupShape& g = key.scale.group;
  const Shape shape = scale_shape(g, rows, cols);
  const std::string where = "quantize " + key_name(key) + ": ";
  if (options.static_scale.defined()) {
    return read_f32_scales(options.static_scale, shape, g.is_per_tensor(), where + "static_scale");
  }
  if (key.scale.is_static && g.row == 1) {
    return Status::error(where + "a static " + g.to_string() + " key needs options.static_scale (f32 " +
                         shape_to_string(shape) + "); it is not computed from the data");
  }
  std::vector<double> scales = amax();
  for (size_t i = 0; i < scales.size(); ++i) {
    const double group_max = scales[i];
    scales[i] = from_amax(group_max);
    // Only an f64 input can get here: its amax may exceed what an f32 scale can express.
    if (!std::isfinite(scales[i])) {
      return Status::error(where + "group " + std::to_string(i) + " has amax " + std::to_string(group_max) +
                           ", beyond what an f32 scale can express");
    }
  }
  return scales;
}

Tensor encode_scaled(const Input& x, const GroupGrid& grid, const std::vector<double>& scales, DType elem) {
  Tensor data = Tensor::empty(elem, {x.rows, x.cols});
  uint8_t* out = static_cast<uint8_t*>(data.raw());  // F8E4M3 and I8 are one byte per element
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const double* v = x.row(r);
    for (int64_t c = 0; c < x.cols; ++c) {
      // encode() rounds half to even and saturates (FP8 to ±448, INT8 to [-128, 127]).
      out[r * x.cols + c] = static_cast<uint8_t>(encode(elem, v[c] / scales[grid.index(r, c)]));
    }
  }
  return data;
}

Tensor scales_to_tensor(const std::vector<double>& scales, const Shape& shape) {
  Tensor t = Tensor::empty(DType::kF32, shape);
  for (size_t i = 0; i < scales.size(); ++i) t.data<float>()[i] = static_cast<float>(scales[i]);
  return t;
}

namespace {

Result<Input> load_input(const Tensor& x, const QuantKey& key) {
  const std::string where = "quantize " + key_name(key) + ": input ";
  if (!x.defined()) return Status::error(where + "tensor is undefined");
  if (x.device().kind != DeviceKind::kCpu) {
    return Status::error(where + "is on " + x.device().to_string() + " (host tensors only)");
  }
  if (x.rank() != 2) return Status::error(where + x.describe() + " is not 2-D [rows, cols]");
  const DType d = x.dtype();
  if (d != DType::kF32 && d != DType::kF64 && d != DType::kBF16 && d != DType::kF16) {
    return Status::error(where + "dtype " + std::string(name(d)) + " is not supported (f32, bf16, f16 or f64)");
  }
  const Tensor c = x.contiguous();
  Input in;
  in.rows = c.size(0);
  in.cols = c.size(1);
  in.values.resize(static_cast<size_t>(in.rows * in.cols));
  // First non-finite column per row (cols when none), so that the reported position is deterministic.
  std::vector<int64_t> bad(static_cast<size_t>(in.rows), in.cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < in.rows; ++r) {
    for (int64_t i = r * in.cols; i < (r + 1) * in.cols; ++i) {
      const double v = element_as_double(c, i);
      in.values[static_cast<size_t>(i)] = v;
      if (!std::isfinite(v) && bad[r] == in.cols) bad[r] = i - r * in.cols;
    }
  }
  for (int64_t r = 0; r < in.rows; ++r) {
    if (bad[r] != in.cols) {
      // Quantizers derive scales from amax; one Inf or NaN would silently poison a whole group.
      return Status::error(where + "has a non-finite value " + std::to_string(in.values[r * in.cols + bad[r]]) +
                           " at [" + std::to_string(r) + ", " + std::to_string(bad[r]) + "]");
    }
  }
  return in;
}

bool finite_positive(float v) { return std::isfinite(v) && v > 0; }

}  // namespace

// Options that the key would not use are errors rather than silently ignored.
Status check_options(const QuantKey& key, Family family, const QuantizeOptions& o) {
  const std::string where = "quantize " + key_name(key) + ": ";
  if (o.static_scale.defined() && !key.scale.is_static) {
    return Status::error(where + "static_scale " + o.static_scale.describe() + " given for a dynamic key");
  }
  if (o.static_zero_point.defined() && (key.symmetric || !key.scale.is_static)) {
    return Status::error(where + "static_zero_point " + o.static_zero_point.describe() +
                         " given, but the key is not static asymmetric");
  }
  if (o.scale_ub) {
    if (!(family == Family::kFp8 && !key.scale.is_static && key.scale.group.is_per_token())) {
      return Status::error(where + "scale_ub = " + std::to_string(*o.scale_ub) +
                           " only applies to dynamic per-token FP8");
    }
    if (!finite_positive(*o.scale_ub)) {
      return Status::error(where + "scale_ub = " + std::to_string(*o.scale_ub) + " must be finite and > 0");
    }
  }
  if (o.nvfp4_global_scale) {
    if (family != Family::kNvfp4) {
      return Status::error(where + "nvfp4_global_scale = " + std::to_string(*o.nvfp4_global_scale) +
                           " only applies to NVFP4");
    }
    if (!key.scale2->is_static) {
      return Status::error(where + "nvfp4_global_scale = " + std::to_string(*o.nvfp4_global_scale) +
                           " given for a key whose global scale is dynamic (computed from each input)");
    }
    if (!finite_positive(*o.nvfp4_global_scale)) {
      return Status::error(where + "nvfp4_global_scale = " + std::to_string(*o.nvfp4_global_scale) +
                           " must be finite and > 0");
    }
  }
  return Status::ok();
}

}  // namespace quant

Shape scale_shape(const GroupShape& group, int64_t rows, int64_t cols) {
  if (group.is_per_tensor()) return {1};
  const quant::GroupGrid grid = quant::group_grid(group, rows, cols);
  return {grid.grid_rows, grid.grid_cols};
}

Result<QuantizedTensor> quantize(const Tensor& x, const QuantKey& key, const QuantizeOptions& options) {
  QL_ASSIGN_OR_RETURN(const quant::Family family, quant::classify(key));
  QL_RETURN_IF_ERROR(quant::check_options(key, family, options));
  QL_ASSIGN_OR_RETURN(const quant::Input in, quant::load_input(x, key));
  switch (family) {
    case quant::Family::kFp8: return quant::quantize_fp8(in, key, options);
    case quant::Family::kInt8: return quant::quantize_int8(in, key, options);
    case quant::Family::kMx: return quant::quantize_mx(in, key, options);
    case quant::Family::kNvfp4: return quant::quantize_nvfp4(in, key, options);
  }
  return Status::error("quantize " + key_name(key) + ": unreachable family");
}

}  // namespace qlinear
