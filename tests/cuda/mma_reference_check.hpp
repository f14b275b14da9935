#pragma once
// The tensor-core decode tests' check of a kernel's output against the reference backend on the same
// quantized inputs (test_mma_decode.cpp, test_mma_decode_act.cpp): each output may differ from the
// reference's by one rounding of the output dtype plus kTensorCoreBound x sum |x w| (FP32 accumulation in
// another order, over the reference's effective activation and dequantized weight).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear::cuda_test {

inline constexpr double kTensorCoreBound = 1.0 / 1024;  // of sum |x w|

// One unit in the last place of dtype d at magnitude v (subnormal steps below the normal range).
inline double ulp_of(DType d, double v) {
  const double a = std::fabs(v);
  const int e = a > 0 ? std::ilogb(a) : -1000;
  switch (d) {
    case DType::kBF16: return std::ldexp(1.0, std::max(e, -126) - 7);
    case DType::kF16: return std::ldexp(1.0, std::max(e, -14) - 10);
    default: return std::ldexp(1.0, std::max(e, -126) - 23);
  }
}

// Failures of `got` ([m, n] host copy of the kernel's output, dtype `out`) against the reference kernel of
// `family` run on `ref` (the layer as the reference processed it) for x; the first five are reported.
inline int64_t compare_with_reference(Family family, const LinearLayer& ref, DType out, int64_t m, int64_t n,
                                      int64_t k, const Tensor& x, const Tensor* bias, const Tensor& got,
                                      double* worst_out) {
  const LinearKernel& kernel = *find_kernel("reference_" + std::string(family_name(family)));
  Tensor ref_out = Tensor::empty(out, {m, n});
  const Status rs = kernel.apply(ref, Activation::dense(x), bias, ref_out);
  EXPECT_TRUE(rs.is_ok()) << rs.message();
  const Tensor wd = reference::dequantized_weight(ref).value();
  const Tensor xa = reference::effective_activation(ref, Activation::dense(x)).value();
  const double* wp = wd.data<double>();
  const double* xp = xa.data<double>();
  std::vector<double> ratio(static_cast<size_t>(m * n), 0.0);
  std::vector<uint8_t> fail(static_cast<size_t>(m * n), 0);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += std::fabs(xp[i * k + q] * wp[j * k + q]);
      const double g = element_as_double(got, i * n + j);
      const double r = element_as_double(ref_out, i * n + j);
      const double slack = std::fabs(g - r) - ulp_of(out, std::max(std::fabs(g), std::fabs(r)));
      ratio[i * n + j] = slack <= 0 ? 0.0 : (s > 0 ? slack / s : HUGE_VAL);
      fail[i * n + j] = !(std::isfinite(g) && ratio[i * n + j] <= kTensorCoreBound);
    }
  }
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    worst = std::max(worst, ratio[i]);
    if (fail[i] && bad++ < 5) {
      ADD_FAILURE() << "out(" << i / n << ", " << i % n << ") = " << element_as_double(got, i) << ", reference "
                    << element_as_double(ref_out, i) << " (|err| / sum|xw| " << ratio[i] << ")";
    }
  }
  if (worst_out) *worst_out = worst;
  return bad;
}

}  // namespace qlinear::cuda_test
