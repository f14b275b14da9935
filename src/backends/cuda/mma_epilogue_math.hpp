#pragma once
// The epilogue arithmetic of the tensor-core decode kernels (mma_decode.cuh, mma_decode_regs.cuh,
// mma_decode_wgmma.cuh, the split-K reduction, and the widen route's scale-and-bias pass in dequant_bf16.cu),
// host and device alike: the kernels run these functions, and the CPU test
// (tests/cuda/test_mma_epilogue_math.cpp) checks them against the reference's arithmetic. Plain C++ that nvcc
// also compiles for the device (fma: DFMA, one rounding).
//
// The reference (src/backends/reference) dequantizes in f64 -- NVFP4's q * sf / g rounded once --, sums in
// f64, adds the bias and rounds once to the output dtype. The kernels' FP32 sum is exact where each output is
// one product (as through an identity layer); from it the epilogue computes in f64, so that such an output
// equals the reference's:
//   - A factor that is an f32 value (the FP8 per-channel row scale, the static FP8 activation scale) is exact
//     in f64, and an FP32 sum times it is exact (48 significant bits): y = that product + bias, the
//     reference's f64 value.
//   - NVFP4 divides: x = q * sf / g. The row's factor is 2^8 / g_w (the decode's weights are q * sf * 2^-8)
//     and the activations' 1 / g_x, each rounded in f64, but their divisors g_w / 2^8 and g_x are kept
//     exactly, and so is their product d (two f32 values: 48 bits). The epilogue takes the quotient
//     t = sum / d: y0 = sum * (1 / d), within 4 x 2^-53 of t, then one correction by the residual
//     sum - y0 * d (an fma) leaves the value within 2^-102 of t before its rounding: t correctly rounded,
//     unless t lies that close to an f64 midpoint. Through an identity weight (q * sf / g_w = 1, or a
//     power of two 2^j) t = 2^j * N / g_x (N = q * sf of 6 bits, g_x of 24): exact, or at least 2^-78 from
//     an f64 midpoint, so the result is f64(t) -- the reference's value, 2^j * f64(q * sf / g_x), which
//     stays equal after the bias and the output rounding (F16 subnormals included). Where a
//     quotient is inexact the reference rounds it, and then its product, so its f64 value can differ from
//     the correctly rounded t = sum / d in the last bits; the outputs then differ only where a midpoint of
//     the output dtype lies between the two. W4A16 (x exact; t = N / g_w, N of at most 14 bits): never
//     where t is not dyadic, i.e. wherever g_w's odd part does not divide N (t is then at least 2^-33
//     (BF16), 2^-36 (F16), 2^-49 (F32) from every midpoint, relative, against a window of 2.5 x 2^-53).
//     Both quotients inexact: a midpoint lies in the window with a chance of ~2^-41 per BF16 output.
// In f32 the product of the two scales, the sum times it and the bias add would each round to 24 bits: about
// 1e-4 of BF16 outputs would round to the other neighbour.
#include <cmath>

#if defined(__CUDACC__)
#define QL_EPI_HD __host__ __device__ __forceinline__
#else
#define QL_EPI_HD inline
#endif

namespace qlinear::cuda {

// A factor of the epilogue: `scale` exact and `divisor` 0 (a multiplier), or `scale` the f64 reciprocal of
// the exact `divisor`. No row factor is the multiplier 1, {1, 0}; no activation factor is 1 as the reciprocal
// of 1, {1, 1}, so that a row's reciprocal keeps its divisor in the product (mma_epilogue_factor). A
// multiplier other than 1 never meets a reciprocal (FP8 and MX rows have no divisor, NVFP4 activations come
// with NVFP4 weights).
struct MmaFactor {
  double scale;
  double divisor;
};
static_assert(sizeof(MmaFactor) == 16, "device buffers hold MmaFactors as f64 pairs");

QL_EPI_HD MmaFactor mma_no_row_factor() { return {1.0, 0.0}; }
QL_EPI_HD MmaFactor mma_no_activation_factor() { return {1.0, 1.0}; }

// An exact multiplier (an f32 scale).
QL_EPI_HD MmaFactor mma_multiplier(float s) { return {static_cast<double>(s), 0.0}; }

// NVFP4 weights: the decode's folded values are q * sf * 2^-8 (mma_decode.cuh), so a row of x = q * sf / g
// divides by g / 2^8 (exact) and multiplies by its reciprocal 2^8 / g (rounded once, at process time).
QL_EPI_HD MmaFactor mma_nvfp4_row_factor(float weight_global_scale) {
  return {256.0 / static_cast<double>(weight_global_scale), static_cast<double>(weight_global_scale) / 256.0};
}

// NVFP4 activations: the pass writes q * sf exactly (act_quant_bf16.hpp); they divide by g.
QL_EPI_HD MmaFactor mma_nvfp4_activation_factor(double input_global_scale) {
  return {1.0 / input_global_scale, input_global_scale};
}

// The factor of output (m, row): the row's times its token's. The divisors' product is exact (each an f32
// value, or 1, or 0).
QL_EPI_HD MmaFactor mma_epilogue_factor(MmaFactor row, MmaFactor activation) {
  return {row.scale * activation.scale, row.divisor * activation.divisor};
}

// The output's f64 value before its one rounding to the output dtype (bias 0 when there is none), for a
// multiplier: the product is exact, so the value is the same whether or not a compiler fuses it with the add.
QL_EPI_HD double mma_epilogue_product(float sum, double scale, double bias) {
  return static_cast<double>(sum) * scale + bias;
}

// The same for a reciprocal: sum / divisor, corrected once by the residual.
QL_EPI_HD double mma_epilogue_quotient(float sum, MmaFactor f, double bias) {
  const double v = sum;
  const double y0 = v * f.scale;
  return fma(fma(-y0, f.divisor, v), f.scale, y0) + bias;
}

QL_EPI_HD double mma_epilogue_value(float sum, MmaFactor f, double bias) {
  return f.divisor == 0.0 ? mma_epilogue_product(sum, f.scale, bias) : mma_epilogue_quotient(sum, f, bias);
}

}  // namespace qlinear::cuda
