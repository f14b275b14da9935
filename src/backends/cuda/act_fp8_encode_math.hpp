#pragma once
// The exact E4M3 code of a quotient x / s in f32 arithmetic, host and device alike (the CUDA quantizers run
// it through act_fp8_encode.cuh; tests/cuda/test_act_fp8_encode_math.cpp checks it on the CPU against the
// reference encoder, every BF16 input against hundreds of scales). No CUDA headers.
//
// The reference rounds the double quotient x / s to E4M3 (RNE, saturating to +-448, the sign kept on
// zeros). Both operands have 24 significant bits, so a quotient that is not exactly on an E4M3 rounding
// midpoint m (5 significant bits) lies at least 2^-28 |x| from it, far beyond the double's rounding: the
// double quotient rounds like the exact one. In f32, qa = |x| * r with r = f32(1/s) is within 2 ulps of the
// exact |x| / s, so the hardware's RNE conversion of qa gives the reference code unless qa is within 4 ulps
// of a midpoint. There the exact comparison of |x| / s with m is the sign of m s - |x|, which one FMA
// rounds from the exact product (a nonzero value stays nonzero and keeps its sign while s >= 2^-100:
// m s and |x| sit on a grid no finer than 2^-149). The code is then that of a float just above m, just
// below it, or m itself (a tie, which RNE sends to the even code, as the reference does).
//
// Below 2^-6 (E4M3 subnormals) the grid step is 2^-9 as in [2^-6, 2^-5): adding 2^-6 (exact up to one
// rounding, a fraction of an ulp there) moves qa into that binade, where every midpoint has the low 20
// mantissa bits 0x80000 as in every normal binade, so one bit test finds all midpoints.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QL_ENC_HD __host__ __device__ __forceinline__
#else
#define QL_ENC_HD inline
#endif

namespace qlinear::cuda::actenc {

QL_ENC_HD uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
QL_ENC_HD float f32_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr uint32_t kMidLow = 0x80000u;       // an E4M3 midpoint's low 20 mantissa bits
constexpr uint32_t kWindow = 4u;             // ulps either side of it that take the exact comparison
constexpr uint32_t kSubnormalTop = 0x3C800000u;  // f32 bits of 2^-6, the smallest normal E4M3 magnitude

// Scales for which the f32 path is exact: r = f32(1/s) normal and the FMA's sign argument (s >= 2^-100).
QL_ENC_HD bool quotient_scale_in_range(float s) { return s >= 0x1p-100f && s <= 0x1p100f; }

// True where qa (= |x| * r, finite or not) may not round like the exact quotient: within the window of a
// midpoint of a normal binade, or a nonzero value below 2^-6 (tested again after the shift into the first
// normal binade by quotient_magnitude). Two integer compares: the cheap test every element takes.
QL_ENC_HD bool quotient_needs_check(float qa) {
  const uint32_t u = f32_bits(qa);
  const bool near_mid = (u & 0xFFFFFu) - (kMidLow - kWindow) <= 2 * kWindow;
  const bool small = u - 1u < kSubnormalTop - 1u;
  return near_mid || small;
}

// A float whose RNE E4M3 conversion (saturating) is the magnitude code of |x| / s, given a = |x|, qa = a * r
// and the scale s (an f32 value in quotient_scale_in_range).
QL_ENC_HD float quotient_magnitude(float a, float qa, float s) {
  const float base = qa < 0x1p-6f ? 0x1p-6f : 0.0f;
  const uint32_t u = f32_bits(qa + base);
  if ((u & 0xFFFFFu) - (kMidLow - kWindow) > 2 * kWindow) return qa;  // clear of every midpoint
  const float mid = f32_of((u & 0xFFF00000u) | kMidLow) - base;      // exact (Sterbenz), >= 2^-10
  const float t = fmaf(mid, s, -a);  // the sign of m s - |x|, exact
  const uint32_t mb = f32_bits(mid);
  return f32_of(t < 0.0f ? mb + 1u : (t > 0.0f ? mb - 1u : mb));
}

}  // namespace qlinear::cuda::actenc
