// Activations of the AVX2 FP engine: dense rows to f32, or quantized bit-identically to the reference
// quantizers (src/quant/fp8_quant.cpp, mx_quant.cpp, nvfp4_quant.cpp) and handed on as the exact f32
// values of their codes.
//
// The reference computes every scale in double from the exact inputs, rounds f32-stored scales once, and
// encodes encode(elem, x / s) (FP8), encode(elem, x * 2^-e) (MX), encode(E2M1, x * g / sf) (NVFP4) with the
// quotient in double and round-to-nearest-even with saturation. This file does the same operations in the
// same order in double (IEEE division and multiplication are correctly rounded, so the results are the
// same bits), and rounds to the element grid with nearbyint on the exact power-of-two-scaled value: the
// grid of a format with mbits mantissa bits and minimum normal exponent emin, at |t| in [2^e, 2^(e+1)), is
// 2^(max(e, emin) - mbits); ties go to the even multiple, which is the even code -- four doubles at a time
// (grid_round4), the scalar rule for row tails. No a*b+c appears, so FMA
// contraction cannot change a rounding.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/x86/fp_isa.hpp"
#include "core/threads.hpp"
#include "backends/x86/act_load_avx2.hpp"

namespace qlinear::x86 {

namespace {

using avx2::bf16_bits_to_f32;
using avx2::load1;
using avx2::load8;

struct Grid {
  int emin, mbits;
  double max;
  int emax;  // floor(log2(max)): OCP's emax
};

Grid grid_of(FpElem e) {
  switch (e) {
    case FpElem::kE4M3: return {-6, 3, 448.0, 8};
    case FpElem::kE3M2: return {-2, 2, 28.0, 4};
    case FpElem::kE2M3: return {0, 3, 7.5, 2};
    case FpElem::kE2M1: return {0, 1, 6.0, 2};
  }
  return {-6, 3, 448.0, 8};
}

double pow2d(int e) {  // 2^e, e in [-1022, 1023]
  const uint64_t b = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

// The value encode(elem, t, kSaturate) decodes to, for finite t.
double grid_round(double t, const Grid& g) {
  const double a = std::fabs(t);
  if (a == 0) return t;
  if (a >= g.max) return std::copysign(g.max, t);
  uint64_t bits;
  std::memcpy(&bits, &a, 8);
  int e = static_cast<int>((bits >> 52) & 0x7FF) - 1023;
  if (e < g.emin) e = g.emin;
  double r = std::nearbyint(a * pow2d(g.mbits - e)) * pow2d(e - g.mbits);
  if (r > g.max) r = g.max;
  return std::copysign(r, t);
}

double to_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

// grid_round(t, g) on 4 doubles of normal or zero magnitude (the operations of the scalar rule: the binade's
// spacing 2^(max(e, emin) - mbits) as exact powers of two, RNE, saturation at max, the sign of t kept).
__m256d grid_round4(__m256d t, const Grid& g) {
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d a = _mm256_andnot_pd(sign, t);
  // e = max(floor(log2 a), emin) from the exponent field (zero: -1023, lifted to emin); the 32-bit max is the
  // 64-bit one here: both are small, so each lane's high half is its sign extension
  const __m256i field = _mm256_srli_epi64(_mm256_castpd_si256(a), 52);
  const __m256i e = _mm256_max_epi32(_mm256_sub_epi64(field, _mm256_set1_epi64x(1023)), _mm256_set1_epi64x(g.emin));
  // 2^(mbits - e) and 2^(e - mbits) as bit patterns ((exponent + 1023) << 52)
  const __m256i bias = _mm256_set1_epi64x(1023);
  const __m256i mb = _mm256_set1_epi64x(g.mbits);
  const __m256d up = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_sub_epi64(mb, e), bias), 52));
  const __m256d down = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_sub_epi64(e, mb), bias), 52));
  __m256d r = _mm256_mul_pd(_mm256_round_pd(_mm256_mul_pd(a, up), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), down);
  const __m256d max = _mm256_set1_pd(g.max);
  r = _mm256_blendv_pd(_mm256_min_pd(max, r), max, _mm256_cmp_pd(a, max, _CMP_GE_OQ));
  return _mm256_or_pd(r, _mm256_and_pd(t, sign));
}

// The 4 integer-valued doubles v (each in [-128, 127]) as int8 at out[0..3].
void store_int8x4(int8_t* out, __m256d v) {
  const __m128i i32 = _mm256_cvtpd_epi32(v);
  const int32_t bytes = _mm_cvtsi128_si32(_mm_packs_epi16(_mm_packs_epi32(i32, i32), _mm_setzero_si128()));
  std::memcpy(out, &bytes, 4);
}

// One MX block of 32 activations with shared exponent e, as the scalar rule: out = grid_round(x * 2^-e) * 2^e
// (both products exact in double: |x| >= 2^-149 and |e| <= 127). ints / mult (null: not wanted): the integer
// form (FpActQuant::int_codes), the element's value times 2^shift.
void mx_block(const void* row, FloatKind kind, int64_t b, int e, const Grid& g, float* out, int8_t* ints, int shift,
              bool* exact) {
  const __m256d down = _mm256_set1_pd(pow2d(-e)), up = _mm256_set1_pd(pow2d(e)), to_int = _mm256_set1_pd(pow2d(shift));
  __m256d exact_all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  for (int i = 0; i < 32; i += 8) {
    const __m256 x = load8(row, kind, b + i);
    const __m128 halves[2] = {_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)};
    for (int h = 0; h < 2; ++h) {
      const __m256d c = grid_round4(_mm256_mul_pd(_mm256_cvtps_pd(halves[h]), down), g);
      const __m256d v = _mm256_mul_pd(c, up);
      const __m128 f = _mm256_cvtpd_ps(v);
      _mm_storeu_ps(out + i + 4 * h, f);
      exact_all = _mm256_and_pd(exact_all, _mm256_cmp_pd(_mm256_cvtps_pd(f), v, _CMP_EQ_OQ));
      if (ints) store_int8x4(ints + i + 4 * h, _mm256_mul_pd(c, to_int));
    }
  }
  if (_mm256_movemask_pd(exact_all) != 0xF) *exact = false;
}

// One NVFP4 block of 16 activations, as the reference (nvfp4_quant.cpp) and the scalar rule above:
// sf = E4M3(amax / 6 * g), out = E2M1(x * g / sf) * sf in double (x * g is exact: 24-bit by 24-bit
// mantissas; the quotient is one IEEE division, as in scalar code).
// code2 / mult (null: not wanted): the integer form of the block (FpActQuant::int_codes, E2M1: shift 1).
void nvfp4_block(const void* row, FloatKind kind, int64_t b, double gs, float* out, int8_t* code2, float* mult,
                 bool* finite, bool* exact) {
  const __m256 x0 = load8(row, kind, b), x1 = load8(row, kind, b + 8);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 ax = _mm256_max_ps(_mm256_and_ps(x0, abs_mask), _mm256_and_ps(x1, abs_mask));
  const __m256 bad = _mm256_or_ps(_mm256_cmp_ps(x0, x0, _CMP_UNORD_Q), _mm256_cmp_ps(x1, x1, _CMP_UNORD_Q));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, ax);
  float amax = 0;
  for (float v : lanes) amax = v > amax ? v : amax;
  if (_mm256_movemask_ps(bad) != 0 || !(amax <= 3.4028234663852886e38f)) *finite = false;
  const double sf = grid_round(static_cast<double>(amax) / 6.0 * gs, grid_of(FpElem::kE4M3));
  if (mult) *mult = static_cast<float>(sf / 4.0);  // sf * 2^-(1 + 1), an E4M3 value over 4: exact
  if (sf == 0) {
    _mm256_storeu_ps(out, _mm256_setzero_ps());
    _mm256_storeu_ps(out + 8, _mm256_setzero_ps());
    if (code2) std::memset(code2, 0, 16);
    return;
  }
  const Grid e2m1 = grid_of(FpElem::kE2M1);
  const __m256d g = _mm256_set1_pd(gs), s = _mm256_set1_pd(sf);
  __m256d exact_all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  const __m128 halves[4] = {_mm256_castps256_ps128(x0), _mm256_extractf128_ps(x0, 1), _mm256_castps256_ps128(x1),
                            _mm256_extractf128_ps(x1, 1)};
  for (int h = 0; h < 4; ++h) {
    const __m256d t = _mm256_div_pd(_mm256_mul_pd(_mm256_cvtps_pd(halves[h]), g), s);
    const __m256d e = grid_round4(t, e2m1);
    const __m256d v = _mm256_mul_pd(e, s);
    const __m128 f = _mm256_cvtpd_ps(v);
    if (code2) store_int8x4(code2 + 4 * h, _mm256_add_pd(e, e));  // 2 * E2M1 value: in [-12, 12]
    _mm_storeu_ps(out + 4 * h, f);
    exact_all = _mm256_and_pd(exact_all, _mm256_cmp_pd(_mm256_cvtps_pd(f), v, _CMP_EQ_OQ));
  }
  if (_mm256_movemask_pd(exact_all) != 0xF) *exact = false;
}

const void* row_ptr(const FpActQuant& q, int64_t r) {
  const size_t esize = q.x_kind == FloatKind::kF32 ? 4 : 2;
  return static_cast<const char*>(q.x) + static_cast<size_t>(r * q.ldx) * esize;
}

// max |x| over [b, e) of a row; sets *finite to false on Inf/NaN.
double amax_of(const void* row, FloatKind kind, int64_t b, int64_t e, bool* finite) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 flt_max = _mm256_set1_ps(3.4028234663852886e38f);
  __m256 ax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const __m256 a = _mm256_and_ps(load8(row, kind, i), abs_mask);
    ax = _mm256_max_ps(ax, a);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, flt_max, _CMP_NLE_UQ));  // Inf or NaN
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, ax);
  double m = 0;
  for (float v : lanes) m = v > m ? v : m;
  if (_mm256_movemask_ps(bad) != 0) *finite = false;
  for (; i < e; ++i) {
    const double v = std::fabs(static_cast<double>(load1(row, kind, i)));
    if (!(v <= HUGE_VAL) || v == HUGE_VAL) *finite = false;
    m = v > m ? v : m;
  }
  return m;
}

// out[i - b] = grid_round(x[i] / s, E4M3) for i in [b, e) (the division one IEEE operation in double), 8 at a
// time, the tail by the scalar rule; *finite false on Inf / NaN.
void e4m3_quotients(const void* row, FloatKind kind, int64_t b, int64_t e, double s, float* out, bool* finite) {
  const Grid g = grid_of(FpElem::kE4M3);
  const __m256d sv = _mm256_set1_pd(s);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 flt_max = _mm256_set1_ps(3.4028234663852886e38f);
  __m256 bad = _mm256_setzero_ps();
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const __m256 x = load8(row, kind, i);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), flt_max, _CMP_NLE_UQ));
    const __m256d lo = grid_round4(_mm256_div_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), sv), g);
    const __m256d hi = grid_round4(_mm256_div_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), sv), g);
    _mm_storeu_ps(out + i - b, _mm256_cvtpd_ps(lo));
    _mm_storeu_ps(out + i - b + 4, _mm256_cvtpd_ps(hi));
  }
  if (_mm256_movemask_ps(bad) != 0) *finite = false;
  for (; i < e; ++i) {
    const double v = load1(row, kind, i);
    *finite = *finite && std::isfinite(v);
    out[i - b] = static_cast<float>(grid_round(v / s, g));
  }
}

// ceil(log2(a / m)) exactly (mx_quant.cpp).
int ceil_log2_ratio(double a, double m) {
  int ka = 0, km = 0;
  const double fa = std::frexp(a, &ka);
  const double fm = std::frexp(m, &km);
  return ka - km + (fa > fm ? 1 : 0);
}

// Quark's "even" rule (mx_quant.cpp) on the f32 bits of amax (exact: amax is an input value).
int quark_even_exponent(double amax, const Grid& g) {
  const float a = static_cast<float>(amax);
  uint32_t bits;
  std::memcpy(&bits, &a, 4);
  const int field = static_cast<int>(((bits + (1u << (22 - g.mbits))) >> 23) & 0xFF);
  if (field == 0) return -127;
  if (field == 0xFF) return 127;
  return field - 127 - g.emax;
}

// The reference's FP8 per-token / per-tensor rule (fp8_quant.cpp), amax given.
constexpr double kMinScale = static_cast<double>(1.0f / (448.0f * 512.0f));
constexpr double kGroupAmaxFloor = static_cast<double>(1e-10f);

void prepare_row(const FpActQuant& q, int64_t r, double tensor_scale) {
  const void* row = row_ptr(q, r);
  float* out = q.act + r * q.k_pad;
  bool finite = true, exact = true;
  switch (q.mode) {
    case FpActMode::kDense: {
      int64_t i = 0;
      for (; i + 8 <= q.k; i += 8) _mm256_storeu_ps(out + i, load8(row, q.x_kind, i));
      for (; i < q.k; ++i) out[i] = load1(row, q.x_kind, i);
      q.row_scale[r] = 1.0f;
      break;
    }
    case FpActMode::kFp8Static:
    case FpActMode::kFp8DynTensor:
    case FpActMode::kFp8DynToken: {
      double s = tensor_scale;
      if (q.mode == FpActMode::kFp8DynToken) {
        const double amax = amax_of(row, q.x_kind, 0, q.k, &finite);
        s = to_f32(amax / 448.0);
        s = s > kMinScale ? s : kMinScale;
      }
      e4m3_quotients(row, q.x_kind, 0, q.k, s, out, &finite);
      q.row_scale[r] = static_cast<float>(s);
      break;
    }
    case FpActMode::kFp8Dyn1x128: {
      const int64_t blocks = (q.k + 127) / 128;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t e = b * 128 + 128 < q.k ? b * 128 + 128 : q.k;
        const double amax = amax_of(row, q.x_kind, b * 128, e, &finite);
        const double s = to_f32((amax > kGroupAmaxFloor ? amax : kGroupAmaxFloor) / 448.0);
        e4m3_quotients(row, q.x_kind, b * 128, e, s, out + b * 128, &finite);
        q.block_scale[r * blocks + b] = static_cast<float>(s);
      }
      q.row_scale[r] = 1.0f;
      break;
    }
    case FpActMode::kMxDyn: {
      const Grid g = grid_of(q.elem);
      for (int64_t b = 0; b < q.k; b += 32) {
        const double amax = amax_of(row, q.x_kind, b, b + 32, &finite);
        int e = amax == 0                             ? -127
                : q.mx_rule == FpMxRule::kQuarkEven ? quark_even_exponent(amax, g)
                                                    : ceil_log2_ratio(amax, g.max);
        e = e < -127 ? -127 : (e > 127 ? 127 : e);
        const int shift = fp_act_int_shift(q.elem);
        const bool ints = q.int_codes && shift >= 0;  // the multiplier is at least 2^-131: an exact f32
        if (ints) q.int_mult[r * (q.k_pad / 32) + b / 32] = static_cast<float>(std::ldexp(1.0, e - shift - 1));
        mx_block(row, q.x_kind, b, e, g, out + b, ints ? q.int_codes + r * q.k_pad + b : nullptr, shift, &exact);
      }
      q.row_scale[r] = 1.0f;
      break;
    }
    case FpActMode::kNvfp4Dyn: {
      const double gs = q.global_scale;
      for (int64_t b = 0; b < q.k; b += 16) {
        int8_t* code2 = q.int_codes ? q.int_codes + r * q.k_pad + b : nullptr;
        float* mult = q.int_mult ? q.int_mult + r * (q.k_pad / 16) + b / 16 : nullptr;
        nvfp4_block(row, q.x_kind, b, gs, out + b, code2, mult, &finite, &exact);
      }
      q.row_scale[r] = static_cast<float>(1.0 / gs);
      break;
    }
  }
  for (int64_t i = q.k; i < q.k_pad; ++i) out[i] = 0.0f;
  if (q.int_codes) {  // the padding columns: zero codes; groups wholly past k: zero multipliers
    const int64_t group = q.mode == FpActMode::kNvfp4Dyn ? 16 : 32;
    for (int64_t i = q.k; i < q.k_pad; ++i) q.int_codes[r * q.k_pad + i] = 0;
    for (int64_t b = (q.k + group - 1) / group; b < q.k_pad / group; ++b) q.int_mult[r * (q.k_pad / group) + b] = 0.0f;
  }
  if (!finite) q.bad_input[0] = 1;
  if (!exact) q.inexact[0] = 1;
}

}  // namespace

namespace {

// The largest |x| over the whole activation (per-tensor scales); flags Inf / NaN input.
double tensor_amax(const FpActQuant& q) {
  bool finite = true;
  double amax = 0;
  for (int64_t r = 0; r < q.m; ++r) {
    const double a = amax_of(row_ptr(q, r), q.x_kind, 0, q.k, &finite);
    amax = a > amax ? a : amax;
  }
  if (!finite) q.bad_input[0] = 1;
  return amax;
}

}  // namespace

void fp_prepare_activations_avx2(const FpActQuant& q) {
  double tensor_scale = static_cast<double>(q.static_scale);
  if (q.mode == FpActMode::kFp8DynTensor) {
    const double amax = tensor_amax(q);
    const double s = to_f32(amax / 448.0);
    tensor_scale = s > 0 ? s : kMinScale;
  }
  uint8_t bad = 0, inexact = 0;  // set by any row: __atomic builtins (no std::atomic code compiled here)
  FpActQuant base = q;
  if (q.mode == FpActMode::kNvfp4Dyn && q.dynamic_global) {
    const double amax = tensor_amax(q);
    // nvfp4_quant.cpp: g = f32(448 * 6 / amax), 1 for zeros, the largest f32 where the quotient overflows.
    double g = amax > 0 ? to_f32(448.0 * 6.0 / amax) : 1.0;
    if (!std::isfinite(g)) g = static_cast<double>(std::numeric_limits<float>::max());
    base.global_scale = static_cast<float>(g);
  }
  threads::parallel_for(q.m, q.threads, [&](int64_t r) {
    FpActQuant local = base;
    uint8_t b = 0, x = 0;
    local.bad_input = &b;
    local.inexact = &x;
    prepare_row(local, r, tensor_scale);
    if (b) __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
    if (x) __atomic_store_n(&inexact, 1, __ATOMIC_RELAXED);
  });
  if (bad) q.bad_input[0] = 1;
  if (inexact) q.inexact[0] = 1;
}

}  // namespace qlinear::x86
