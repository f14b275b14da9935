// Activations of the AMX-BF16 FP kernels (x86_amx_bf16_{fp8_scaled_mm, mxfp8, mxfp6, mxfp4, nvfp4}, and of their
// AVX-512 BF16 variants x86_avx512bf16_*: this code issues no AMX instruction) straight to the BF16 rows the A tiles
// read: dense BF16 rows copied, or quantized bit-identically to the reference quantizers and handed on as exact
// BF16 values: MX (E8M0 per 1x32, elements E4M3 / E3M2 / E2M3 / E2M1; src/quant/mx_quant.cpp) as code * 2^e,
// NVFP4 (nvfp4_quant.cpp) as code * sf with 1/g per row, FP8 per tensor / per token / per 1x128 group
// (fp8_quant.cpp) as the code with s per row or group. AVX-512 f32 here; fp_act_avx2.cpp (four doubles at a
// time) still runs pre-quantized input and K off the 16-element steps.
//
// NVFP4 and FP8 divide in double exactly as the reference does (x * g / sf, x / s: IEEE division is correctly
// rounded, so the quotients are the same bits) and round to the element grid in double by the same (|t| + C) - C
// as below; their values (E2M1 * E4M3, E4M3) always are normal BF16 values.
//
// Why f32 gives the reference's bits: the input is an f32 (BF16 / F16 widen exactly); t = x * 2^-e is exact
// unless it leaves f32's normal range: above it t is +-Inf and saturates, as the reference's double t does;
// below it |t| < 2^-126 encodes to 0 in every element format either way. The element grid at |t| in
// [2^E, 2^(E+1)), E = max(floor(log2 |t|), emin), is 2^(E - mbits); (|t| + C) - C with C = 2^(E - mbits + 23)
// rounds |t| to it, ties to even, because the sum lies in [C, 2C) where the f32 ulp is that step. Saturation
// at the format's max as the reference does (above max, and after rounding). The shared exponent comes from
// the block's f32 amax with the reference's own integer rules (Quark's "even", or ceil(log2(amax / max))).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/x86/amx_isa.hpp"
#include "core/threads.hpp"

// GCC 12 reports the intrinsics' "undefined" pass-through operands as maybe uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace qlinear::x86 {

namespace {

struct Grid {
  int emin, mbits;
  float max;
  int emax;  // floor(log2(max))
};

Grid grid_of(FpElem e) {
  switch (e) {
    case FpElem::kE3M2: return {-2, 2, 28.0f, 4};
    case FpElem::kE2M3: return {0, 3, 7.5f, 2};
    case FpElem::kE2M1: return {0, 1, 6.0f, 2};
    default: return {-6, 3, 448.0f, 8};
  }
}

// The reference's shared exponent of a block with f32 amax a (mx_quant.cpp), clamped to [-127, 127].
int shared_exponent(float a, const Grid& g, FpMxRule rule) {
  if (a == 0.0f) return -127;
  int e = 0;
  if (rule == FpMxRule::kQuarkEven) {
    uint32_t bits;
    std::memcpy(&bits, &a, 4);
    const int field = static_cast<int>(((bits + (1u << (22 - g.mbits))) >> 23) & 0xFF);
    if (field == 0) return -127;
    if (field == 0xFF) return 127;
    e = field - 127 - g.emax;
  } else {  // ceil(log2(a / max)), exactly
    int ka = 0, km = 0;
    const double fa = std::frexp(static_cast<double>(a), &ka), fm = std::frexp(static_cast<double>(g.max), &km);
    e = ka - km + (fa > fm ? 1 : 0);
  }
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// 16 elements of a row as f32.
__m512 load16(const void* row, FloatKind kind, int64_t i) {
  switch (kind) {
    case FloatKind::kF32: return _mm512_loadu_ps(static_cast<const float*>(row) + i);
    case FloatKind::kBF16: {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default:
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + i)));
  }
}

struct Rounder {
  __m512i emin, bias_minus_m;  // emin; 127 + 23 - mbits
  __m512i emax;
  __m512 max;
  explicit Rounder(const Grid& g)
      : emin(_mm512_set1_epi32(g.emin)), bias_minus_m(_mm512_set1_epi32(127 + 23 - g.mbits)),
        emax(_mm512_set1_epi32(g.emax)), max(_mm512_set1_ps(g.max)) {}

  // encode(elem, t) decoded, for t finite or +-Inf (see the top of the file).
  __m512 round(__m512 t) const {
    const __m512i bits = _mm512_castps_si512(t);
    const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
    __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(mag, 23), _mm512_set1_epi32(127));
    e = _mm512_min_epi32(_mm512_max_epi32(e, emin), emax);  // above emax: saturates below
    const __m512 c = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, bias_minus_m), 23));
    const __m512 r = _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(mag), c), c), max);
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(r), _mm512_andnot_si512(_mm512_set1_epi32(0x7FFFFFFF), bits)));
  }
};

struct RowResult {
  bool finite = true, exact = true;
};

// One row: 32-element blocks, each scaled, rounded, scaled back and stored as BF16.
RowResult mx_row(const FpActQuant& q, const void* row, uint16_t* out, const Grid& g, const Rounder& rnd) {
  RowResult res;
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  __mmask16 nonfinite = 0, inexact = 0;
  for (int64_t b = 0; b < q.k; b += 32) {
    const __m512 x0 = load16(row, q.x_kind, b), x1 = load16(row, q.x_kind, b + 16);
    nonfinite |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x0), exp_mask), exp_mask);
    nonfinite |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x1), exp_mask), exp_mask);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const int e = shared_exponent(amax, g, q.mx_rule);
    const __m512 down = _mm512_set1_ps(static_cast<float>(-e)), up = _mm512_set1_ps(static_cast<float>(e));
    for (int h = 0; h < 2; ++h) {
      const __m512 r = rnd.round(_mm512_scalef_ps(h == 0 ? x0 : x1, down));
      const __m512 v = _mm512_scalef_ps(r, up);
      // A nonzero value that is not a normal f32 (underflow, or Inf) is not exactly a BF16 tile input.
      const __m512i ve = _mm512_and_si512(_mm512_castps_si512(v), exp_mask);
      const __mmask16 nz = _mm512_cmpneq_ps_mask(r, _mm512_setzero_ps());
      inexact |= _mm512_mask_cmpeq_epi32_mask(nz, ve, _mm512_setzero_si512()) |
                 _mm512_mask_cmpeq_epi32_mask(nz, ve, exp_mask);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b + 16 * h), (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
  res.finite = nonfinite == 0;
  res.exact = inexact == 0;
  return res;
}

// encode(elem, t) decoded in double for t finite (the same rounding as Rounder::round, with C = 2^(E - mbits + 52)).
__m512d round_grid_pd(__m512d t, const Grid& g) {
  const __m512i bits = _mm512_castpd_si512(t);
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll));
  __m512i e = _mm512_sub_epi64(_mm512_srli_epi64(mag, 52), _mm512_set1_epi64(1023));
  e = _mm512_min_epi64(_mm512_max_epi64(e, _mm512_set1_epi64(g.emin)), _mm512_set1_epi64(g.emax));
  const __m512d c = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(e, _mm512_set1_epi64(1023 + 52 - g.mbits)), 52));
  const __m512d r = _mm512_min_pd(_mm512_sub_pd(_mm512_add_pd(_mm512_castsi512_pd(mag), c), c),
                                  _mm512_set1_pd(static_cast<double>(g.max)));
  return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(r), _mm512_andnot_si512(_mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll), bits)));
}

// The same rounding for one double (the NVFP4 block scales).
double round_grid(double t, const Grid& g) {
  return _mm512_cvtsd_f64(round_grid_pd(_mm512_set1_pd(t), g));
}

// 16 elements (x: f32) -> round_grid((x * mul) / div) * back, as BF16 words; all in double.
__m256i scaled_round16(__m512 x, double mul, double div, double back, const Grid& g) {
  const __m512d m = _mm512_set1_pd(mul), d = _mm512_set1_pd(div), b = _mm512_set1_pd(back);
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  const __m512d vlo = _mm512_mul_pd(round_grid_pd(_mm512_div_pd(_mm512_mul_pd(lo, m), d), g), b);
  const __m512d vhi = _mm512_mul_pd(round_grid_pd(_mm512_div_pd(_mm512_mul_pd(hi, m), d), g), b);
  const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(vlo)), _mm512_cvtpd_ps(vhi), 1);
  return (__m256i)_mm512_cvtneps_pbh(v);
}

__mmask16 nonfinite16(__m512 x) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exp_mask), exp_mask);
}

// max |x| over elements [b, b + n) of a row, n a multiple of 16.
float amax_of(const void* row, FloatKind kind, int64_t b, int64_t n, __mmask16* nonfinite) {
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = b; i < b + n; i += 16) {
    const __m512 x = load16(row, kind, i);
    *nonfinite |= nonfinite16(x);
    m = _mm512_max_ps(m, _mm512_abs_ps(x));
  }
  return _mm512_reduce_max_ps(m);
}

constexpr double kMinScale = static_cast<double>(1.0f / (448.0f * 512.0f));  // fp8_quant.cpp
double to_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

// NVFP4 row (16-element blocks, g given): sf = E4M3(amax / 6 * g), codes E2M1(x * g / sf), values code * sf.
bool nvfp4_row(const void* row, FloatKind kind, int64_t k, double gs, uint16_t* out) {
  const Grid e4m3 = grid_of(FpElem::kE4M3), e2m1 = grid_of(FpElem::kE2M1);
  __mmask16 nonfinite = 0;
  for (int64_t b = 0; b < k; b += 16) {
    const __m512 x = load16(row, kind, b);
    nonfinite |= nonfinite16(x);
    const double amax = static_cast<double>(_mm512_reduce_max_ps(_mm512_abs_ps(x)));
    const double sf = round_grid(amax / 6.0 * gs, e4m3);
    const __m256i w = sf == 0 ? _mm256_setzero_si256() : scaled_round16(x, gs, sf, sf, e2m1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b), w);
  }
  return nonfinite == 0;
}

// Elements [begin, end) of an FP8 row with scale s: codes E4M3(x / s), values the codes.
bool fp8_row(const void* row, FloatKind kind, int64_t begin, int64_t end, double s, uint16_t* out) {
  const Grid e4m3 = grid_of(FpElem::kE4M3);
  __mmask16 nonfinite = 0;
  for (int64_t b = begin; b < end; b += 16) {
    const __m512 x = load16(row, kind, b);
    nonfinite |= nonfinite16(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b), scaled_round16(x, 1.0, s, 1.0, e4m3));
  }
  return nonfinite == 0;
}

// fp8_quant.cpp's 1xG rule: torch.clamp(min=1e-10) on an f32 amax compares against the f32 value of 1e-10.
constexpr double kGroupAmaxFloor = static_cast<double>(1e-10f);

// FP8 row in 1x128 groups (the last one K's remainder, a multiple of 16): per group s = f32(max(amax, 1e-10f) /
// 448) to scale[group], codes E4M3(x / s), values the codes.
bool fp8_group_row(const void* row, FloatKind kind, int64_t k, float* scale, uint16_t* out) {
  bool ok = true;
  for (int64_t b = 0; b < k; b += 128) {
    const int64_t end = b + 128 < k ? b + 128 : k;
    __mmask16 nonfinite = 0;
    const double amax = static_cast<double>(amax_of(row, kind, b, end - b, &nonfinite));
    const double s = to_f32((amax > kGroupAmaxFloor ? amax : kGroupAmaxFloor) / 448.0);
    ok = fp8_row(row, kind, b, end, s, out) && nonfinite == 0 && ok;
    scale[b / 128] = static_cast<float>(s);
  }
  return ok;
}

}  // namespace

bool amx_prepare_bf16_activations(const FpActQuant& q, uint16_t* act) {
  const bool dense = q.mode == FpActMode::kDense && q.x_kind == FloatKind::kBF16;
  const bool nvfp4 = q.mode == FpActMode::kNvfp4Dyn, mx = q.mode == FpActMode::kMxDyn;
  const bool fp8 = q.mode == FpActMode::kFp8Static || q.mode == FpActMode::kFp8DynToken ||
                   q.mode == FpActMode::kFp8DynTensor || q.mode == FpActMode::kFp8Dyn1x128;
  if (!dense && !nvfp4 && !mx && !fp8) return false;
  if (q.k % (nvfp4 || fp8 ? 16 : 32) != 0) return false;  // (NVFP4: K % 16 by contract; the others: a tail)
  const size_t esize = q.x_kind == FloatKind::kF32 ? 4 : 2;
  auto row_of = [&](int64_t r) { return static_cast<const void*>(static_cast<const char*>(q.x) + static_cast<size_t>(r * q.ldx) * esize); };
  __mmask16 nonfinite = 0;
  // Per-tensor quantities, over every row first (fp_act_avx2.cpp's order of operations).
  double tensor = static_cast<double>(q.static_scale), gs = static_cast<double>(q.global_scale);
  if (q.mode == FpActMode::kFp8DynTensor || (nvfp4 && q.dynamic_global)) {
    float amax = 0.0f;
    for (int64_t r = 0; r < q.m; ++r) amax = std::max(amax, amax_of(row_of(r), q.x_kind, 0, q.k, &nonfinite));
    if (nonfinite != 0) return false;
    if (nvfp4) {  // nvfp4_quant.cpp: g = f32(448 * 6 / amax), 1 for zeros, the largest f32 where it overflows
      gs = amax > 0 ? to_f32(448.0 * 6.0 / static_cast<double>(amax)) : 1.0;
      if (!std::isfinite(gs)) gs = static_cast<double>(std::numeric_limits<float>::max());
    } else {
      const double s = to_f32(static_cast<double>(amax) / 448.0);
      tensor = s > 0 ? s : kMinScale;
    }
  }
  const Grid g = grid_of(q.elem);
  uint8_t failed = 0;  // any row: __atomic builtins (no std::atomic code compiled here)
  // ~1 ns per element on one core for dense and MX rows, ~3 for the double-precision modes.
  const int threads = threads::threads_for(0, q.m * q.k * (dense ? 1 : mx ? 2 : 4), 1.0);
  threads::parallel_for(q.m, threads, [&](int64_t r) {
    const void* row = row_of(r);
    uint16_t* out = act + r * q.k_pad;
    std::memset(out + q.k, 0, static_cast<size_t>(q.k_pad - q.k) * 2);
    bool ok = true;
    if (dense) {
      std::memcpy(out, row, static_cast<size_t>(q.k) * 2);
    } else if (mx) {
      const RowResult res = mx_row(q, row, out, g, Rounder(g));
      ok = res.finite && res.exact;
    } else if (nvfp4) {
      ok = nvfp4_row(row, q.x_kind, q.k, gs, out);
      q.row_scale[r] = static_cast<float>(1.0 / gs);
    } else if (q.mode == FpActMode::kFp8Dyn1x128) {
      ok = fp8_group_row(row, q.x_kind, q.k, q.block_scale + r * ((q.k + 127) / 128), out);
      q.row_scale[r] = 1.0f;
    } else {
      double s = tensor;
      if (q.mode == FpActMode::kFp8DynToken) {
        __mmask16 nf = 0;
        s = to_f32(static_cast<double>(amax_of(row, q.x_kind, 0, q.k, &nf)) / 448.0);
        s = s > kMinScale ? s : kMinScale;
        ok = nf == 0;
      }
      ok = fp8_row(row, q.x_kind, 0, q.k, s, out) && ok;
      q.row_scale[r] = static_cast<float>(s);
    }
    if (!ok) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
  });
  // The tiles read whole 16-row blocks; the stream below kAmxBf16MinM reads its one row (at M = 1 the zeroing
  // of 15 rows, 430 KB at K = 14336, took ~5 us of the call's ~20 us serial part).
  const int64_t m_rows = amx_bf16_act_rows(q.m);
  std::memset(act + q.m * q.k_pad, 0, static_cast<size_t>((m_rows - q.m) * q.k_pad * 2));
  return failed == 0;
}

}  // namespace qlinear::x86
