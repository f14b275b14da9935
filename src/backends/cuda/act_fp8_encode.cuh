#pragma once
// The exact E4M3 encoder of the FP8 activation quantizers (act_quant.cu, act_quant_simple.cu, the fused
// quantization of the wgmma GEMM): codes of x / s, bit-identical to the reference quantizers, in f32
// (act_fp8_encode_math.hpp). Device code only (nvcc).
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/act_fp8_encode_math.hpp"
#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/fp_codec.cuh"

namespace qlinear::cuda::actenc {

// The path of encode8_div for scales outside quotient_scale_in_range (static scales beyond 2^+-100), out
// of line: the quotient in double.
static __device__ __noinline__ uint32_t encode_e4m3_quotient(float x, double s) {
  return codec::encode_e4m3(static_cast<double>(x) / s);
}

// The sign bits of 4 floats as the sign bits of 4 packed codes (float i's bit 31 -> bit 8 i + 7).
__device__ __forceinline__ uint32_t code_signs4(const float* x) {
  const uint32_t lo = __byte_perm(__float_as_uint(x[0]), __float_as_uint(x[1]), 0x73);  // bytes 3 of each
  const uint32_t hi = __byte_perm(__float_as_uint(x[2]), __float_as_uint(x[3]), 0x73);
  return (lo & 0x8080u) | (hi & 0x8080u) << 16;
}

// encode_e4m3(x[i] / s) for 8 elements, r = quotient_rcp(s), in f32 (act_fp8_encode_math.hpp says why it
// is exact): the magnitudes |x| r, converted two per instruction (RNE, saturating), the signs or-ed in (so
// -0 and negative values that round to zero keep their sign). A vector with an element near a rounding
// midpoint or in the E4M3 subnormal range (a few in a thousand on activations) takes the exact comparison
// for all its elements, the whole warp together (warp-uniform branch: no divergence, no f64).
__device__ __forceinline__ uint2 encode8_div(const float (&x)[actvec::kVec], float r, double s) {
  if (!(r == r)) {  // a scale outside the f32 path's range (uniform for the row or tensor)
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < actvec::kVec; ++i) w[i / 4] |= encode_e4m3_quotient(x[i], s) << (8 * (i % 4));
    return make_uint2(w[0], w[1]);
  }
  float q[actvec::kVec];
  bool check = false;
#pragma unroll
  for (int i = 0; i < actvec::kVec; ++i) {
    q[i] = fabsf(x[i]) * r;
    check |= quotient_needs_check(q[i]);
  }
  if (__any_sync(__activemask(), check)) {
    const float sf = static_cast<float>(s);
#pragma unroll
    for (int i = 0; i < actvec::kVec; ++i) q[i] = quotient_magnitude(fabsf(x[i]), q[i], sf);
  }
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(q[4 * h], q[4 * h + 1]), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(q[4 * h + 2], q[4 * h + 3]), __NV_SATFINITE, __NV_E4M3);
    w[h] = (lo | hi << 16) | code_signs4(x + 4 * h);
  }
  return make_uint2(w[0], w[1]);
}

// f32(1/s), or NaN where s is outside quotient_scale_in_range (a static scale beyond 2^+-100): encode8_div
// then takes the double path for every element.
__device__ __forceinline__ float quotient_rcp(double s) {
  const float sf = static_cast<float>(s);
  return quotient_scale_in_range(sf) ? 1.0f / sf : __int_as_float(0x7FFFFFFF);
}

}  // namespace qlinear::cuda::actenc
