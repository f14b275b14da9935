#pragma once
// Device-side codecs, bit-for-bit the reference codec of src/formats (formats.hpp):
//   encode_e4m3(double)   = formats::encode(kF8E4M3, v, kSaturate): RNE, saturating to +-448, -0 keeps its
//                           sign, NaN never reaches it (quantizers reject non-finite input upstream);
//   decode_*              = the exact value of a code as float (every FP8/FP6/FP4 value is a float).
// Device code only (nvcc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/act_fp8_encode_math.hpp"

namespace qlinear::cuda::codec {

// E4M3FN: |v| = q * 2^(e-3) with e = max(ilogb|v|, -6); the scaling is exact, rint (round half to even in
// the default rounding mode) is the only rounding; a carry out of the mantissa moves to the next binade.
__device__ __forceinline__ uint8_t encode_e4m3(double v) {
  const uint32_t sign = signbit(v) ? 0x80u : 0u;
  const double a = fabs(v);
  if (a == 0.0) return static_cast<uint8_t>(sign);
  const int ea = ilogb(a);
  if (ea > 8) return static_cast<uint8_t>(sign | 0x7Eu);  // saturate to 448
  const int e = ea < -6 ? -6 : ea;
  const uint32_t q = static_cast<uint32_t>(rint(ldexp(a, 3 - e)));
  const uint32_t mag = (static_cast<uint32_t>(e + 6) << 3) + q;
  return static_cast<uint8_t>(sign | (mag > 0x7Eu ? 0x7Eu : mag));
}

// encode_e4m3(x / s) with the quotient rounded to double first, as the reference computes it, in f32
// (act_fp8_encode_math.hpp says why that is exact), r = f32(1/s): |x| r converted by the hardware (RNE,
// saturating) unless it is near a rounding midpoint or below 2^-6, where one FMA decides; the sign or-ed
// in. Scales beyond 2^+-100: the double quotient.
__device__ __forceinline__ uint8_t encode_e4m3_div(float x, float r, double s) {
  const float sf = static_cast<float>(s);
  if (!actenc::quotient_scale_in_range(sf)) return encode_e4m3(static_cast<double>(x) / s);
  const float a = fabsf(x);
  float q = a * r;
  if (actenc::quotient_needs_check(q)) q = actenc::quotient_magnitude(a, q, sf);
  const uint32_t sign = (__float_as_uint(x) >> 24) & 0x80u;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3) | sign);
}

// encode_e4m3(x * 2^-e) for MX: the scaling is exact in f32 (an underflow only touches values that encode
// to +-0 anyway), so the hardware RNE/saturating conversion is the reference's rounding.
__device__ __forceinline__ uint8_t encode_e4m3_pow2(float x, int e) {  // e in [-127, 127]
  const float scale = e == 127 ? __uint_as_float(0x00400000u) : __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE, __NV_E4M3));
}

// Exact float value of an E4M3FN code (0x7F/0xFF, the NaN codes, never occur in quantized data).
__device__ __forceinline__ float decode_e4m3(uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

// Four E4M3 codes (one 32-bit word, code 0 in the low byte) to four exact floats.
__device__ __forceinline__ void decode_e4m3x4(uint32_t word, float* out) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word & 0xFFFFu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo));
  const float2 b = __half22float2(__half2(hi));
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
}

// Eight floats (v[0] in the low byte) to E4M3 codes by the hardware's RNE conversion, saturating: for
// values that are E4M3 numbers, their exact codes.
__device__ __forceinline__ uint2 encode_e4m3x8(const float (&v)[8]) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v[4 * h], v[4 * h + 1]), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v[4 * h + 2], v[4 * h + 3]), __NV_SATFINITE, __NV_E4M3);
    w[h] = lo | hi << 16;
  }
  return make_uint2(w[0], w[1]);
}

// Small OCP minifloats (FP6 E2M3 / E3M2, FP4 E2M1) by bit placement: the magnitude bits go where a
// float's exponent and mantissa fields start, giving 2^(e - 127) * 1.m (or the float subnormal
// 2^-126 * 0.m); multiplying by 2^(127 - bias) is exact and gives the code's value (subnormals included,
// since denormals are not flushed: the backend is built without -ftz).
template <int kExpBits, int kManBits, int kBias>
__device__ __forceinline__ float decode_minifloat(uint32_t code) {
  constexpr int kBits = 1 + kExpBits + kManBits;
  constexpr uint32_t kMagMask = (1u << (kBits - 1)) - 1u;
  const uint32_t bits = ((code >> (kBits - 1)) << 31) | ((code & kMagMask) << (23 - kManBits));
  return __uint_as_float(bits) * __uint_as_float(static_cast<uint32_t>(254 - kBias) << 23);
}

__device__ __forceinline__ float decode_e2m3(uint32_t c) { return decode_minifloat<2, 3, 1>(c); }
__device__ __forceinline__ float decode_e3m2(uint32_t c) { return decode_minifloat<3, 2, 3>(c); }
__device__ __forceinline__ float decode_e2m1(uint32_t c) { return decode_minifloat<2, 1, 1>(c); }

// 2^(code - 127) for an E8M0 code (0..254); code 0 is the float subnormal 2^-127.
__device__ __forceinline__ float decode_e8m0(uint32_t code) {
  return code == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(code << 23);
}

}  // namespace qlinear::cuda::codec
