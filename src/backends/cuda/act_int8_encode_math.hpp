#pragma once
// The INT8 code sat8(rne(x / s) + z) of the reference (src/quant/int8_quant.cpp: the quotient in double) in f32
// arithmetic without a branch per element, host and device alike: the CUDA quantizers (int8_scaled_mm.cu) run
// it, tests/cuda/test_act_int8_encode_math.cpp checks it on the CPU against the reference quantizer (every
// BF16 input against scales that put quotients exactly on half-integers, dynamic scales, zero points). No
// CUDA headers.
//
// x and s are f32 values. With r = f32(1/s), q = x * r lies within 2 ulps of the exact quotient Q = x / s, so
// for |q| < 2^20 (2 ulps <= 2^-3) Q lies within 1/8 of q, and f = floor(q) is an integer from which the
// rounding of Q is one comparison with the midpoint m = f + 1/2 (exact below 2^22):
//   Q > m: f + 1;   Q < m: f;   Q == m: the even one of f and f + 1 (a tie, ties to even);
// which also holds where Q and q lie on either side of an integer, Q being so close to it. The sign of
// Q - m is that of x - m s, which one FMA rounds from the exact product: nonzero values stay nonzero (x and
// m s lie on a grid no finer than 2^-149 while s >= 2^-100; no flush to zero: nvcc's default -ftz=false)
// and keep their sign. The double quotient of the reference rounds like Q: a quotient of two 24-bit
// numbers that is not a half-integer lies further from one than a double's rounding moves it.
//
// Elsewhere (|q| >= 2^20, or a scale outside [2^-100, 2^100], or x not finite) the caller takes the exact
// path (the quotient in double); int8_fast_quotient says where.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define QL_I8ENC_HD __host__ __device__ __forceinline__
#else
#define QL_I8ENC_HD inline
#endif

namespace qlinear::cuda::actenc {

// A dynamic row's scale s and zero point z (src/quant/int8_quant.cpp) from its range: lo and hi the row's min
// and max (asymmetric) or its max |x| in both (symmetric). s is an f32 value; z is 0 when symmetric.
QL_I8ENC_HD void int8_dynamic_scale(double lo, double hi, bool asym, double& s, double& z) {
  if (asym) {
    if (hi == lo) {  // a constant row: its range widened to include 0
      lo = fmin(lo, 0.0);
      hi = fmax(hi, 0.0);
    }
    s = static_cast<double>(static_cast<float>((hi - lo) / 255.0));
    if (s == 0) s = 1.0;
    // (hi - lo) / 255 of finite inputs is below FLT_MAX, so the reference's overflow refusal cannot trigger.
    z = fmin(fmax(rint(-128.0 - lo / s), -2147483648.0), 2147483647.0);
  } else {
    s = static_cast<double>(static_cast<float>(hi / 127.0));
    if (!(s > 0)) s = 1.0;
    z = 0.0;
  }
}

// Scales for which the f32 path applies: r = f32(1/s) normal and the FMA's sign argument.
QL_I8ENC_HD bool int8_scale_in_range(float s) { return s >= 0x1p-100f && s <= 0x1p100f; }

// Whether q = x * r (r = f32(1/s), s in range) takes the f32 path: |q| < 2^20 (false for NaN).
QL_I8ENC_HD bool int8_fast_quotient(float q) { return fabsf(q) < 0x1p20f; }

// rne(x / s) for q = x * r where int8_fast_quotient(q).
QL_I8ENC_HD int32_t int8_rne_quotient(float x, float q, float s) {
  const float f = floorf(q);
  const float t = fmaf(-(f + 0.5f), s, x);  // the sign of x - (f + 1/2) s, exact
  const int32_t i = static_cast<int32_t>(f);
  return i + ((t > 0.0f || (t == 0.0f && (i & 1) != 0)) ? 1 : 0);
}

// The zero point as the f32 path adds it: z clamped to +-(2^22 + 256), which saturates the same for every
// |rne(Q)| < 2^22, and the sum stays in int32.
QL_I8ENC_HD int32_t int8_clamped_zero_point(double z) {
  return static_cast<int32_t>(fmin(fmax(z, -4194560.0), 4194560.0));
}

// sat8(n + zc) as the code's byte.
QL_I8ENC_HD uint32_t int8_code_byte(int32_t n, int32_t zc) {
  const int32_t v = n + zc;
  return static_cast<uint8_t>(static_cast<int8_t>(v < -128 ? -128 : (v > 127 ? 127 : v)));
}

}  // namespace qlinear::cuda::actenc
