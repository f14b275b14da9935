#pragma once
// The exact E4M3 encoder of the FP8 activation quantizers (act_quant.cu, the fused quantization of the
// wgmma GEMM): codes of x / s, bit-identical to the reference quantizers (the quotient in double where the
// f32 product could round differently). Device code only (nvcc).
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/fp_codec.cuh"

namespace qlinear::cuda::actenc {

// The exact path of encode8_div, out of line: it runs for a few elements in a million.
static __device__ __noinline__ uint32_t encode_e4m3_quotient(float x, double s) {
  return codec::encode_e4m3(static_cast<double>(x) / s);
}

// encode_e4m3(x[i] / s) for 8 elements, r = f32(1/s) (fp_codec.cuh's encode_e4m3_div, two conversions per
// instruction): q = x * r is within 2 ulps of the exact quotient, so where q is a normal E4M3 value
// (|q| >= 2^-6) at least 4 ulps from a rounding midpoint, the hardware's RNE/saturating conversion of q
// gives the code of the quotient; zeros keep their sign; everything else takes the exact double path.
// The checks are one predicate per element; the per-element repair runs only for a vector that has such
// an element (a few in a million on activations; the instruction count per element, not the loads, bounds
// this encoder).
__device__ __forceinline__ uint2 encode8_div(const float (&x)[actvec::kVec], float r, double s) {
  float q[actvec::kVec];
  bool any = false;
#pragma unroll
  for (int i = 0; i < actvec::kVec; ++i) {
    q[i] = x[i] * r;
    const uint32_t u = __float_as_uint(q[i]) & 0x7FFFFFFFu;
    const bool normal = u - (121u << 23) < 0x7F800000u - (121u << 23);
    const bool near_midpoint = (u & 0xFFFFFu) - 0x7FFFCu <= 8u;
    const bool neg_zero = __float_as_uint(q[i]) == 0x80000000u;
    any |= (u != 0 && (!normal || near_midpoint)) || neg_zero;
  }
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(q[4 * h], q[4 * h + 1]), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(q[4 * h + 2], q[4 * h + 3]), __NV_SATFINITE, __NV_E4M3);
    w[h] = lo | hi << 16;
  }
  if (any) {
#pragma unroll
    for (int i = 0; i < actvec::kVec; ++i) {
      const uint32_t bits = __float_as_uint(q[i]);
      const uint32_t u = bits & 0x7FFFFFFFu;
      const bool normal = u - (121u << 23) < 0x7F800000u - (121u << 23);
      const bool near_midpoint = (u & 0xFFFFFu) - 0x7FFFCu <= 8u;
      uint32_t c = 0;
      bool fix = false;
      if (bits == 0x80000000u) {  // -0 keeps its sign
        c = 0x80u;
        fix = true;
      }
      if (u != 0 && (!normal || near_midpoint)) {
        c = encode_e4m3_quotient(x[i], s);
        fix = true;
      }
      if (fix) w[i / 4] = (w[i / 4] & ~(0xFFu << (8 * (i % 4)))) | c << (8 * (i % 4));
    }
  }
  return make_uint2(w[0], w[1]);
}

// f32(1/s), or NaN when that is not a normal float (a static scale beyond 2^125): encode8_div then takes
// the exact path for every element, since the 2-ulp argument needs a normal reciprocal.
__device__ __forceinline__ float quotient_rcp(double s) {
  const float r = 1.0f / static_cast<float>(s);
  return r >= 0x1p-125f && r <= 0x1p125f ? r : __int_as_float(0x7FFFFFFF);
}

}  // namespace qlinear::cuda::actenc
