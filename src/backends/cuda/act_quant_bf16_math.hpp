#pragma once
// The arithmetic of the fused activation pass (act_quant_bf16.hpp), host and device alike: the same
// functions run in the CUDA kernel and in the CPU test that checks them bit for bit against the reference
// quantizers (src/quant/mx_quant.cpp, fp8_quant.cpp, nvfp4_quant.cpp). No CUDA headers: plain C++ that nvcc
// also compiles for the device.
//
// Rounding to an element format's grid: a format with `mbits` mantissa bits and minimum normal exponent emin
// has, at |t| in [2^E, 2^(E+1)), the grid step 2^(max(E, emin) - mbits). Scaling |t| by the power of two
// 2^(mbits - E) is exact, rint rounds half to even (the default rounding mode, which is the even code), and
// values at or beyond the largest finite value saturate to it -- encode(elem, t, kSaturate) of
// src/formats, returned as the code's exact value.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QL_ACT_HD __host__ __device__ __forceinline__
#else
#define QL_ACT_HD inline
#endif

namespace qlinear::cuda {

// The element formats the pass quantizes to.
enum class ActElem : uint8_t { kE4M3, kE2M3, kE3M2, kE2M1 };

// MX shared-exponent rules (quantize.hpp's MxScaleRule, the two that activations use).
enum class ActMxRule : uint8_t {
  kCeilOverMax,  // e = ceil(log2(amax / max)): the OCP / vLLM rule, MXFP8's default
  kQuarkEven,    // amax's f32 bits rounded half up to the element's mantissa width, e = floor(log2) - emax
};

struct ActGrid {
  int emin;      // minimum normal exponent
  int mbits;     // mantissa bits
  float max;     // largest finite value
  int emax;      // floor(log2(max))
  int lsb_log2;  // log2 of the smallest nonzero value (the subnormal step 2^(emin - mbits))
};

QL_ACT_HD ActGrid act_grid(ActElem e) {
  switch (e) {
    case ActElem::kE4M3: return {-6, 3, 448.0f, 8, -9};
    case ActElem::kE2M3: return {0, 3, 7.5f, 2, -3};
    case ActElem::kE3M2: return {-2, 2, 28.0f, 4, -4};
    case ActElem::kE2M1: return {0, 1, 6.0f, 2, -1};
  }
  return {-6, 3, 448.0f, 8, -9};
}

QL_ACT_HD float act_pow2f(int n) {  // 2^n for n in [-126, 127]
  const uint32_t b = static_cast<uint32_t>(n + 127) << 23;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

QL_ACT_HD double act_pow2d(int n) {  // 2^n for n in [-1022, 1023]
  const uint64_t b = static_cast<uint64_t>(n + 1023) << 52;
  double d;
  memcpy(&d, &b, 8);
  return d;
}

QL_ACT_HD uint32_t act_f32_bits(float v) {
  uint32_t b;
  memcpy(&b, &v, 4);
  return b;
}

// 2^e for an E8M0 exponent e in [-127, 127] (2^-127 is an f32 subnormal).
QL_ACT_HD float act_e8m0_value(int e) {
  if (e > -127) return act_pow2f(e);
  const uint32_t b = 0x00400000u;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

// The value encode(elem, t, kSaturate) decodes to, for finite f32 t (sign kept, zeros included).
QL_ACT_HD float act_round_f32(float t, const ActGrid& g) {
  const float a = fabsf(t);
  if (a == 0.0f) return t;
  if (a >= g.max) return copysignf(g.max, t);
  int e = static_cast<int>((act_f32_bits(a) >> 23) & 0xFF) - 127;  // subnormals give -127: below every emin
  if (e < g.emin) e = g.emin;
  const float r = rintf(a * act_pow2f(g.mbits - e)) * act_pow2f(e - g.mbits);
  return copysignf(r > g.max ? g.max : r, t);
}

// f32 addition rounded to nearest even, never contracted or reassociated.
QL_ACT_HD float act_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
// act_round_f32 in fewer operations (no rint, one power of two; the FP8 block pass's BF16 kernel went from 664
// to 576 SASS instructions): below the grid's max, with E the binade of a = |t| (at least
// emin), c = 2^(E - mbits + 23) has an ulp of exactly the grid step at a and exceeds a, so the f32 sum a + c
// rounds a to the grid half to even and subtracting c is exact. Bit for bit act_round_f32 for finite t
// (tests/cuda/test_act_quant_bf16_math.cpp: every BF16 input and random f32s, on every grid).
QL_ACT_HD float act_round_f32_add(float t, const ActGrid& g) {
  const float a = fabsf(t);
  if (a >= g.max) return copysignf(g.max, t);
  int e = static_cast<int>((act_f32_bits(a) >> 23) & 0xFF) - 127;  // subnormals give -127: below every emin
  if (e < g.emin) e = g.emin;
  const float c = act_pow2f(e - g.mbits + 23);
  return copysignf(act_add_rn(act_add_rn(a, c), -c), t);
}
// The same in double (NVFP4, whose quotients the reference takes in double).
QL_ACT_HD double act_round_f64(double t, const ActGrid& g) {
  const double a = fabs(t);
  if (a == 0.0) return t;
  const double mx = static_cast<double>(g.max);
  if (a >= mx) return copysign(mx, t);
  uint64_t bits;
  memcpy(&bits, &a, 8);
  int e = static_cast<int>((bits >> 52) & 0x7FF) - 1023;
  if (e < g.emin) e = g.emin;
  const double r = rint(a * act_pow2d(g.mbits - e)) * act_pow2d(e - g.mbits);
  return copysign(r > mx ? mx : r, t);
}

// The MX shared exponent of a 32-block with |x| max `amax` (an input value, so exact in f32), clamped to
// E8M0's [-127, 127]; -127 for an all-zero block. mx_quant.cpp's shared_exponent, operation for operation.
QL_ACT_HD int act_mx_exponent(float amax, ActElem elem, ActMxRule rule) {
  if (amax == 0.0f) return -127;
  const ActGrid g = act_grid(elem);
  int e = 0;
  if (rule == ActMxRule::kCeilOverMax) {
    int ka = 0, km = 0;
    const float fa = frexpf(amax, &ka);
    const float fm = frexpf(g.max, &km);
    e = ka - km + (fa > fm ? 1 : 0);
  } else {
    const uint32_t bits = act_f32_bits(amax);
    const int field = static_cast<int>(((bits + (1u << (22 - g.mbits))) >> 23) & 0xFF);
    if (field == 0) return -127;
    if (field == 0xFF) return 127;
    e = field - 127 - g.emax;
  }
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// The dequantized MX value of x in a block with exponent e: round(x * 2^-e) * 2^e, in f32. x * 2^-e is exact
// except where it underflows f32's normal range, and such values round to zero in every element format.
// act_mx_code_value is the grid value round(x * 2^-e) alone.
QL_ACT_HD float act_mx_code_value(float x, int e, const ActGrid& g) {
  return act_round_f32_add(e == 127 ? x * act_e8m0_value(-127) : x * act_pow2f(-e), g);
}
QL_ACT_HD float act_mx_value(float x, int e, const ActGrid& g) {
  const float r = act_mx_code_value(x, e, g);
  return e == -127 ? r * act_e8m0_value(-127) : r * act_pow2f(e);
}

// Whether every value code x 2^e of `elem` is exactly a BF16 number: the smallest step 2^(lsb + e) must be
// on BF16's grid (>= 2^-133, its smallest subnormal) and the largest value below BF16's largest
// (2^128 - 2^120). E2M3, E3M2 and E2M1 hold for every e in [-127, 125] or so; E4M3 needs e >= -124.
QL_ACT_HD bool act_mx_bf16_exact(ActElem elem, int e) {
  const ActGrid g = act_grid(elem);
  if (g.lsb_log2 + e < -133) return false;
  // max = 1.f * 2^emax with at most 4 significant bits: max * 2^e is finite in BF16 while emax + e <= 127.
  return g.emax + e <= 127;
}

// NVFP4 (nvfp4_quant.cpp): the block scale's value sf = E4M3(amax / 6 * g) and the element's value
// q = E2M1(x * g / sf) (0 where sf == 0), each quotient and product rounded to double in that order.
QL_ACT_HD double act_nvfp4_block_scale(double amax, double g) {
  return act_round_f64(amax / 6.0 * g, act_grid(ActElem::kE4M3));
}
QL_ACT_HD double act_nvfp4_element(double x, double g, double sf) {
  return sf == 0.0 ? 0.0 : act_round_f64(x * g / sf, act_grid(ActElem::kE2M1));
}

// The dynamic NVFP4 global scale from the tensor's |x| max: f32(448 * 6 / amax), 1 for zeros, the largest
// f32 when the quotient overflows f32.
QL_ACT_HD float act_nvfp4_dynamic_global(float amax) {
  if (amax == 0.0f) return 1.0f;
  const float g = static_cast<float>(2688.0 / static_cast<double>(amax));
  return g <= 3.4028234663852886e38f ? g : 3.4028234663852886e38f;
}

}  // namespace qlinear::cuda
