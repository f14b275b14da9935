// INT8 activation quantization and the INT8 epilogue, AVX2 + FMA + F16C (shared by the AVX-512 VNNI and
// the AVX2 kernels: every AVX-512 machine has AVX2, and both steps are a small part of the time).
//
// Quantization mirrors src/quant/int8_quant.cpp bit for bit. The reference divides in double:
//   q = clamp(RNE(double(x) / s), -128, 127)            (symmetric)
//   q = clamp(RNE(double(x) / s) + zp, -128, 127)       (asymmetric)
// The fast path multiplies by an f32 reciprocal instead, t = x * f32(1/s), whose relative error is below
// 2^-22; RNE(t) equals RNE(x/s) (and RNE of the double quotient) unless t lies within |t| * 2^-22 of a
// half-integer. Lanes that come within (|t| + 1) * 2^-18 of one are recomputed with the reference's double
// division (about one element in 4000 on random data), so the codes are identical, not merely close.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/x86/act_load_avx2.hpp"
#include "backends/x86/int8_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

using avx2::bf16_bits_to_f32;
using avx2::load1;
using avx2::load8;

double to_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

double clamp_d(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The reference's code for one element (the definition the fast path must reproduce).
int32_t exact_code(float x, double s, double zp) {
  return static_cast<int32_t>(clamp_d(std::nearbyint(static_cast<double>(x) / s) + zp, -128.0, 127.0));
}

struct RowParams {
  double s = 1.0;   // the f32 scale, widened
  double zp = 0.0;  // integer zero point
  bool finite = true;  // dynamic keys: the row held no Inf or NaN (the reference refuses such input)
};

RowParams row_params(const Int8ActQuant& q, const void* row) {
  RowParams p;
  if (!q.dynamic) {
    p.s = static_cast<double>(q.static_scale);
    p.zp = q.symmetric ? 0.0 : static_cast<double>(q.static_zp);
    return p;
  }
  int64_t i = 0;
  if (q.symmetric) {
    // Four independent max chains: one chain is bound by vmaxps's 4-cycle latency (0.5 cycles per element).
    __m256 vmax[4], nan[4];
    for (int j = 0; j < 4; ++j) vmax[j] = nan[j] = _mm256_setzero_ps();
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (; i + 32 <= q.k; i += 32) {
      for (int j = 0; j < 4; ++j) {
        const __m256 v = load8(row, q.x_kind, i + 8 * j);
        nan[j] = _mm256_or_ps(nan[j], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        vmax[j] = _mm256_max_ps(vmax[j], _mm256_and_ps(v, abs_mask));
      }
    }
    for (; i + 8 <= q.k; i += 8) {
      const __m256 v = load8(row, q.x_kind, i);
      nan[0] = _mm256_or_ps(nan[0], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      vmax[0] = _mm256_max_ps(vmax[0], _mm256_and_ps(v, abs_mask));
    }
    const __m256 vmax01 = _mm256_max_ps(vmax[0], vmax[1]), vmax23 = _mm256_max_ps(vmax[2], vmax[3]);
    const __m256 nan_any = _mm256_or_ps(_mm256_or_ps(nan[0], nan[1]), _mm256_or_ps(nan[2], nan[3]));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(vmax01, vmax23));
    float amax = 0.0f;
    for (float v : lanes) amax = v > amax ? v : amax;
    p.finite = _mm256_movemask_ps(nan_any) == 0;
    for (; i < q.k; ++i) {
      const float v = std::fabs(load1(row, q.x_kind, i));
      p.finite = p.finite && !std::isnan(v);
      amax = v > amax ? v : amax;
    }
    p.finite = p.finite && std::isfinite(amax);
    const double s = to_f32(static_cast<double>(amax) / 127.0);  // int8_quant.cpp: s = amax / 127 (f32)
    p.s = s > 0 ? s : 1.0;
    return p;
  }
  // Asymmetric dynamic per-token: [lo, hi] of the row (widened to include 0 only for a constant row).
  float lo = load1(row, q.x_kind, 0), hi = lo;
  __m256 vlo = _mm256_set1_ps(lo), vhi = vlo, nan = _mm256_setzero_ps();
  for (; i + 8 <= q.k; i += 8) {
    const __m256 v = load8(row, q.x_kind, i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vlo = _mm256_min_ps(vlo, v);
    vhi = _mm256_max_ps(vhi, v);
  }
  p.finite = _mm256_movemask_ps(nan) == 0;
  alignas(32) float l8[8], h8[8];
  _mm256_store_ps(l8, vlo);
  _mm256_store_ps(h8, vhi);
  for (int j = 0; j < 8; ++j) {
    lo = l8[j] < lo ? l8[j] : lo;
    hi = h8[j] > hi ? h8[j] : hi;
  }
  for (; i < q.k; ++i) {
    const float v = load1(row, q.x_kind, i);
    p.finite = p.finite && !std::isnan(v);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  p.finite = p.finite && std::isfinite(lo) && std::isfinite(hi);
  if (!p.finite) return p;
  double dlo = lo, dhi = hi;
  if (dhi == dlo) {
    dlo = dlo < 0 ? dlo : 0.0;
    dhi = dhi > 0 ? dhi : 0.0;
  }
  double s = to_f32((dhi - dlo) / 255.0);
  if (s == 0) s = 1.0;
  p.s = s;
  p.zp = clamp_d(std::nearbyint(-128.0 - dlo / s), -2147483648.0, 2147483647.0);
  return p;
}

void quantize_row(const Int8ActQuant& q, int64_t r) {
  const size_t esize = q.x_kind == FloatKind::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(q.x) + static_cast<size_t>(r * q.ldx) * esize;
  // Codes k .. k + 63 at out + (k / 64) * chunk: the row order (chunk 64), or the AMX tile order.
  uint8_t* out = q.amx_tiles ? q.codes + r / 16 * 16 * q.k_pad + r % 16 * 64 : q.codes + r * q.k_pad;
  const int64_t chunk = q.amx_tiles ? 1024 : 64;
  const auto at = [&](int64_t k) { return out + (k >> 6) * chunk + (k & 63); };
  const RowParams p = row_params(q, row);
  if (!p.finite) q.bad_row[r] = 1;
  q.scale[r] = static_cast<float>(p.s);
  q.zp[r] = static_cast<int32_t>(p.zp);
  const uint8_t flip = q.offset128 ? 0x80 : 0x00;

  int64_t i = 0;
  // The fast path needs a finite f32 reciprocal and a zero point small enough that RNE(t) clamped to
  // +-2^22 still decides the clamp to [-128, 127]; other rows (never seen with real scales) go scalar.
  const bool fast = p.finite && p.s >= 0x1p-100 && p.s <= 0x1p100 && std::fabs(p.zp) <= 0x1p20;
  if (fast) {
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / p.s));
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), tol = _mm256_set1_ps(0x1p-18f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 big = _mm256_set1_ps(0x1p22f);
    const __m256i zp = _mm256_set1_epi32(static_cast<int32_t>(p.zp));
    const __m256i lo = _mm256_set1_epi32(-128), hi = _mm256_set1_epi32(127);
    const __m256i fix_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; i + 32 <= q.k; i += 32) {
      __m256i c[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 x = load8(row, q.x_kind, i + 8 * j);
        const __m256 t = _mm256_mul_ps(x, inv);
        __m256 rn = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 dist = _mm256_and_ps(_mm256_sub_ps(t, rn), abs_mask);  // distance to nearest integer
        const __m256 margin = _mm256_mul_ps(_mm256_add_ps(_mm256_and_ps(t, abs_mask), one), tol);
        const int near_half = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(half, dist), margin, _CMP_LE_OQ));
        rn = _mm256_min_ps(_mm256_max_ps(rn, _mm256_sub_ps(_mm256_setzero_ps(), big)), big);
        __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(rn), zp);
        v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
        if (near_half != 0) {
          alignas(32) int32_t lanes[8];
          _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
          for (int l = 0; l < 8; ++l) {
            if (near_half >> l & 1) lanes[l] = exact_code(load1(row, q.x_kind, i + 8 * j + l), p.s, p.zp);
          }
          v = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
        }
        c[j] = v;
      }
      // Values are in [-128, 127], so the saturating packs are exact; they interleave 128-bit lanes.
      const __m256i w01 = _mm256_packs_epi32(c[0], c[1]);
      const __m256i w23 = _mm256_packs_epi32(c[2], c[3]);
      __m256i b = _mm256_packs_epi16(w01, w23);
      b = _mm256_permutevar8x32_epi32(b, fix_order);
      b = _mm256_xor_si256(b, _mm256_set1_epi8(static_cast<char>(flip)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(i)), b);  // i % 32 == 0: inside one chunk
    }
  }
  for (; i < q.k; ++i) *at(i) = static_cast<uint8_t>(exact_code(load1(row, q.x_kind, i), p.s, p.zp)) ^ flip;
  for (int64_t j = q.k; j < q.k_pad; ++j) *at(j) = flip;  // code 0: the padded weights are 0 anyway
}

uint16_t f32_to_bf16_rne(float y) {
  uint32_t u;
  std::memcpy(&u, &y, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// 8 f32 to bf16 with round-to-nearest-even (finite and infinite inputs; sums of finite terms are never NaN).
__m128i f32x8_to_bf16(__m256 y) {
  __m256i u = _mm256_castps_si256(y);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  u = _mm256_srli_epi32(u, 16);
  const __m256i packed = _mm256_packus_epi32(u, u);  // [a0..3 a0..3 | a4..7 a4..7]
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

void store1(void* out, FloatKind kind, int64_t i, float y) {
  switch (kind) {
    case FloatKind::kF32: static_cast<float*>(out)[i] = y; break;
    case FloatKind::kBF16: static_cast<uint16_t*>(out)[i] = f32_to_bf16_rne(y); break;
    case FloatKind::kF16: static_cast<uint16_t*>(out)[i] = _cvtss_sh(y, _MM_FROUND_TO_NEAREST_INT); break;
  }
}

void store8(void* out, FloatKind kind, int64_t i, __m256 y) {
  switch (kind) {
    case FloatKind::kF32: _mm256_storeu_ps(static_cast<float*>(out) + i, y); break;
    case FloatKind::kBF16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i), f32x8_to_bf16(y));
      break;
    case FloatKind::kF16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i),
                       _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT));
      break;
  }
}

}  // namespace

void int8_quantize_activations_avx2(const Int8ActQuant& q) {
  threads::parallel_for(q.m, q.threads, [&](int64_t r) { quantize_row(q, r); });
}

void int8_epilogue_avx2(const Int8Epilogue& e, const int32_t* acc, int64_t ldacc, int64_t m0, int64_t rows,
                        int64_t n0, int64_t cols) {
  const size_t osize = e.out_kind == FloatKind::kF32 ? 4 : 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t m = m0 + r;
    const int32_t* a = acc + r * ldacc;
    void* out = static_cast<char*>(e.out) + static_cast<size_t>(m * e.n + n0) * osize;
    const float sx = e.a_scale[m];
    const int64_t corr = static_cast<int64_t>(e.offset) + e.a_zp[m];
    // (offset + zp) * colsum fits int32 for every column: exact in wrapping int32 arithmetic.
    const bool small = (corr < 0 ? -corr : corr) * static_cast<int64_t>(e.colsum_absmax) < (int64_t{1} << 31);
    int64_t j = 0;
    if (small) {
      const __m256i c = _mm256_set1_epi32(static_cast<int32_t>(corr));
      const __m256 vsx = _mm256_set1_ps(sx);
      for (; j + 8 <= cols; j += 8) {
        const __m256i cs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e.colsum + n0 + j));
        const __m256i v = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j)),
                                           _mm256_mullo_epi32(c, cs));
        const __m256 s = _mm256_mul_ps(vsx, _mm256_loadu_ps(e.w_scale + n0 + j));
        const __m256 b = e.bias ? _mm256_loadu_ps(e.bias + n0 + j) : _mm256_setzero_ps();
        store8(out, e.out_kind, j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, b));
      }
    }
    for (; j < cols; ++j) {
      const int64_t v = static_cast<int64_t>(a[j]) - corr * e.colsum[n0 + j];
      const float s = sx * e.w_scale[n0 + j];
      const float b = e.bias ? e.bias[n0 + j] : 0.0f;
      store1(out, e.out_kind, j, std::fma(static_cast<float>(v), s, b));
    }
  }
}

}  // namespace qlinear::x86
