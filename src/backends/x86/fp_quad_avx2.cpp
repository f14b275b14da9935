// x86_avx2_{mxfp4, nvfp4, mxfp6}: the FP engine (fp_gemm_avx2.cpp) on quad records, E2M1 and FP6 weights
// (layout and numerics: fp_isa.hpp). One K chunk of a work item at a time: 1-3 rows decode each record in
// registers and use it at once (several panels side by side at M = 1), more rows decode the chunk into an
// f32 tile that 6-row register tiles then run over. Either way a group's products are summed from zero
// in k order and added to the C tile as C = fma(partial, s, C), so rows do not depend on M.
#include <immintrin.h>

#include "backends/x86/fp_isa.hpp"

namespace qlinear::x86 {

namespace {

constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
template <FpElem E> constexpr int kRecordBytes = E == FpElem::kE2M1 ? 8 : 12;  // per k (4 k per record)
template <FpElem E> constexpr int kDecodeExp = kFpDecodeExp[static_cast<int>(E)];
constexpr int fused_panels(int64_t rows) { return rows == 1 ? kFpMaxFusedPanels : rows == 2 ? 2 : 1; }

// E2M1 and FP6 (fp_isa.hpp): quad records (4 k x 16 columns) decoded to the codes' values (times
// 2^-kDecodeExp), the group scale applied to each group's partial sum. The partial sums live in registers;
// C (the sum of the scaled groups) in the C tile, C = fma(partial, s, C) once per group. The fused and tiled
// paths do the same operations in the same order, so rows do not depend on M (as for the other formats).
template <FpElem E>
struct QuadDecoder;

template <>
struct QuadDecoder<FpElem::kE2M1> {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const __m256i hi16 = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  // Low and high byte of the BF16 value of code i (bit 3 the sign; -0 gives +0), in both 128-bit lanes.
  const __m256i t_lo = _mm256_setr_epi8(0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64, -128, -64,
                                        0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64, -128, -64);
  const __m256i t_hi = _mm256_setr_epi8(0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0, -65, -65, -65, -64, -64, -64, -64,
                                        0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0, -65, -65, -65, -64, -64, -64, -64);

  // The quad record's codes: v[0] those of k = 4q, 4q + 1; v[1] of 4q + 2, 4q + 3 (one nibble per byte).
  __attribute__((always_inline)) void codes(const uint8_t* rec, __m256i (&v)[2]) const {
    const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(rec));
    v[0] = _mm256_and_si256(x, lo4);
    v[1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);
  }
  // One code vector to w[t][h]: k = 4q + 2 * half + t, columns 8h..8h+7.
  __attribute__((always_inline)) void values(__m256i idx, __m256 (&w)[2][2]) const {
    const __m256i lo = _mm256_shuffle_epi8(t_lo, idx), hi = _mm256_shuffle_epi8(t_hi, idx);
    const __m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
    w[0][0] = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
    w[1][0] = _mm256_castsi256_ps(_mm256_and_si256(a, hi16));
    w[0][1] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
    w[1][1] = _mm256_castsi256_ps(_mm256_and_si256(b, hi16));
  }
};

template <FpElem E>  // E2M3, E3M2
struct QuadDecoder {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const __m256i m3 = _mm256_set1_epi8(0x03);
  // Top bits (code bit 4, bit 5 = the sign) to bit 4 and bit 7: the byte becomes s00mmmmm for decode.
  const __m256i place = _mm256_setr_epi8(0, 0x10, -128, -112, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0x10, -128, -112, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i top_shift0 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  const __m256i top_shift1 = _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6);

  // The quad record's 64 codes as s00mmmmm bytes: v[0] k = 4q, 4q + 1 (lane h: columns 8h.., bytes 0-7 the
  // first k, 8-15 the second), v[1] k = 4q + 2, 4q + 3. The top bits of both are one xmm, broadcast.
  __attribute__((always_inline)) void codes(const uint8_t* rec, __m256i (&v)[2]) const {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec));
    const __m256i tb = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 32)));
    const __m256i t0 = _mm256_and_si256(_mm256_srlv_epi32(tb, top_shift0), m3);
    const __m256i t1 = _mm256_and_si256(_mm256_srlv_epi32(tb, top_shift1), m3);
    v[0] = _mm256_or_si256(_mm256_and_si256(x, lo4), _mm256_shuffle_epi8(place, t0));
    v[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 4), lo4), _mm256_shuffle_epi8(place, t1));
  }
  // One code vector to w[t][h] = value * 2^-kDecodeExp (the FP16 bit pattern, as decode<E>).
  __attribute__((always_inline)) void values(__m256i c, __m256 (&w)[2][2]) const {
    constexpr int shift = E == FpElem::kE3M2 ? 8 : 7;
    __m256i lo = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(c)), shift);
    __m256i hi = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(c, 1)), shift);
    if constexpr (shift == 7) {
      lo = _mm256_and_si256(lo, _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
      hi = _mm256_and_si256(hi, _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
    }
    w[0][0] = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));
    w[1][0] = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));
    w[0][1] = _mm256_cvtph_ps(_mm256_castsi256_si128(hi));
    w[1][1] = _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1));
  }
};

// The group multipliers of 16 columns as f32: MX 2^(e - 127 + kDecodeExp) (normal: checked at process),
// NVFP4 the E4M3 value.
template <FpElem E>
__attribute__((always_inline)) inline void quad_group_scale(const FpGemm& g, const uint8_t* codes, __m256& lo, __m256& hi) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  static_assert(kDecodeExp<FpElem::kE2M1> == 0, "NVFP4's E4M3 scales below carry no decode exponent");
  if (g.group_scale == FpGroupScale::kE8M0) {
    const __m256i d0 = _mm256_cvtepu8_epi32(c), d1 = _mm256_cvtepu8_epi32(_mm_srli_si128(c, 8));
    const __m256i off = _mm256_set1_epi32(kDecodeExp<E>);
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(d0, off), 23));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(d1, off), 23));
    return;
  }
  // E4M3 bits placed as an f32 with the exponent 120 too small (subnormal codes land on f32 subnormals), times
  // 2^120: the code sign-extended and shifted so that eeee is the low end of f32's exponent field and mmm the
  // top of its mantissa; the mask keeps those and the sign (the E4M3 f32 route of fp_gemm_avx2.cpp).
  const __m256i keep = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
  const __m256 k = _mm256_set1_ps(0x1p120f);  // NVFP4: E2M1, kDecodeExp 0
  auto one = [&](__m128i bytes) {
    const __m256i b = _mm256_and_si256(_mm256_slli_epi32(_mm256_cvtepi8_epi32(bytes), 20), keep);
    return _mm256_mul_ps(_mm256_castsi256_ps(b), k);
  };
  lo = one(c);
  hi = one(_mm_srli_si128(c, 8));
}

// C tiles c[j][r][16] (+)= the scaled groups of records [k0, k0 + len) of panels p0.., MR rows a[r][k - k0],
// decoded in registers (PANELS panels side by side for more independent FMA chains at M = 1).
template <FpElem E, int MR, int PANELS>
void quad_fused_chunk(const FpGemm& g, int64_t p0, int64_t k0, int64_t len, const float* a, float* c, int64_t c_panel) {
  const QuadDecoder<E> dec;
  const uint8_t* rec[PANELS];
#pragma GCC unroll 4
  for (int j = 0; j < PANELS; ++j) rec[j] = g.packed + ((p0 + j) * g.k_pad + k0) * kRecordBytes<E>;
  const int64_t groups = g.k_pad / g.group, lda = g.lda;
  for (int64_t kb = 0; kb < len; kb += g.group) {
    __m256 acc[PANELS][MR][2];
#pragma GCC unroll 4
    for (int j = 0; j < PANELS; ++j) {
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[j][r][0] = acc[j][r][1] = _mm256_setzero_ps();
    }
    for (int64_t q = kb; q < kb + g.group; q += 4) {
#pragma GCC unroll 4
      for (int j = 0; j < PANELS; ++j) {
        __m256i v[2];
        dec.codes(rec[j] + q * kRecordBytes<E>, v);
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          __m256 w[2][2];
          dec.values(v[half], w);
#pragma GCC unroll 2
          for (int t = 0; t < 2; ++t) {
#pragma GCC unroll 4
            for (int r = 0; r < MR; ++r) {
              const __m256 av = _mm256_broadcast_ss(a + r * lda + q + 2 * half + t);
              acc[j][r][0] = _mm256_fmadd_ps(av, w[t][0], acc[j][r][0]);
              acc[j][r][1] = _mm256_fmadd_ps(av, w[t][1], acc[j][r][1]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < PANELS; ++j) {
      __m256 s0, s1;
      quad_group_scale<E>(g, g.grp + ((p0 + j) * groups + (k0 + kb) / g.group) * 16, s0, s1);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        float* cr = c + j * c_panel + r * 16;
        _mm256_store_ps(cr, _mm256_fmadd_ps(acc[j][r][0], s0, _mm256_load_ps(cr)));
        _mm256_store_ps(cr + 8, _mm256_fmadd_ps(acc[j][r][1], s1, _mm256_load_ps(cr + 8)));
      }
    }
  }
}

template <FpElem E, int ROWS>
void quad_run_fused(const FpGemm& g, int64_t p0, int panels, int64_t k0, int64_t len, const float* a, float* c) {
  constexpr int kPanels = fused_panels(ROWS);
  constexpr int64_t cp = ROWS * 16;
  int j = 0;
  if constexpr (kPanels > 1) {
    for (; j + kPanels <= panels; j += kPanels) quad_fused_chunk<E, ROWS, kPanels>(g, p0 + j, k0, len, a, c + j * cp, cp);
  }
  for (; j < panels; ++j) quad_fused_chunk<E, ROWS, 1>(g, p0 + j, k0, len, a, c + j * cp, cp);
}

// Records [k0, k0 + len) of panel p as values buf[len][16], their groups' multipliers sc[len / group][16].
template <FpElem E>
void quad_decode_tile(const FpGemm& g, int64_t p, int64_t k0, int64_t len, float* buf, float* sc) {
  const QuadDecoder<E> dec;
  const uint8_t* rec = g.packed + (p * g.k_pad + k0) * kRecordBytes<E>;
  for (int64_t q = 0; q < len; q += 4) {
    __m256i v[2];
    dec.codes(rec + q * kRecordBytes<E>, v);
    for (int half = 0; half < 2; ++half) {
      __m256 w[2][2];
      dec.values(v[half], w);
      for (int t = 0; t < 2; ++t) {
        _mm256_store_ps(buf + (q + 2 * half + t) * 16, w[t][0]);
        _mm256_store_ps(buf + (q + 2 * half + t) * 16 + 8, w[t][1]);
      }
    }
  }
  const int64_t groups = g.k_pad / g.group;
  for (int64_t b = 0; b < len / g.group; ++b) {
    __m256 lo, hi;
    quad_group_scale<E>(g, g.grp + (p * groups + k0 / g.group + b) * 16, lo, hi);
    _mm256_store_ps(sc + b * 16, lo);
    _mm256_store_ps(sc + b * 16 + 8, hi);
  }
}

// c[r][0..15] += the scaled groups of a[r] . buf, MR rows (the operations of quad_fused_chunk).
template <int MR>
void grouped_ukernel(const float* a, int64_t lda, const float* buf, int64_t len, int64_t group, const float* sc, float* c) {
  for (int64_t kb = 0; kb < len; kb += group) {
    __m256 acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = kb; k < kb + group; ++k) {
      const __m256 w0 = _mm256_load_ps(buf + k * 16), w1 = _mm256_load_ps(buf + k * 16 + 8);
      for (int r = 0; r < MR; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
        acc[r][0] = _mm256_fmadd_ps(av, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, w1, acc[r][1]);
      }
    }
    const __m256 s0 = _mm256_load_ps(sc + kb / group * 16), s1 = _mm256_load_ps(sc + kb / group * 16 + 8);
    for (int r = 0; r < MR; ++r) {
      _mm256_store_ps(c + r * 16, _mm256_fmadd_ps(acc[r][0], s0, _mm256_load_ps(c + r * 16)));
      _mm256_store_ps(c + r * 16 + 8, _mm256_fmadd_ps(acc[r][1], s1, _mm256_load_ps(c + r * 16 + 8)));
    }
  }
}

void grouped_run_rows(int mr, const float* a, int64_t lda, const float* buf, int64_t len, int64_t group,
                      const float* sc, float* c) {
  switch (mr) {
    case 6: grouped_ukernel<6>(a, lda, buf, len, group, sc, c); break;
    case 5: grouped_ukernel<5>(a, lda, buf, len, group, sc, c); break;
    case 4: grouped_ukernel<4>(a, lda, buf, len, group, sc, c); break;
    case 3: grouped_ukernel<3>(a, lda, buf, len, group, sc, c); break;
    case 2: grouped_ukernel<2>(a, lda, buf, len, group, sc, c); break;
    default: grouped_ukernel<1>(a, lda, buf, len, group, sc, c); break;
  }
}

// E2M1 weights with E2M1 or E2M3 activations (W4A4, W4A6; FpGemm::act_pairs): each group's sum is exact in
// integers. A weight code times 2 is an integer in [-12, 12] (an E2M1 activation's times 2 too, an E2M3
// one's times 8 is in [-60, 60]): one table lookup gives the weights' (signed), vpsignb moves their signs onto
// the activations, and vpmaddubsw sums two products per column (|w| unsigned times signed a) in 16 bits --
// 64 products in 6 vector ops where f32 needs 24. A group's sum (at most 32 * 12 * 60 < 2^15) is converted
// once and added as C = fma(sum * act_mult, weight multiplier, C): sum * act_mult is exact (at most 15 bits
// times a power of two or an E4M3 value), so a group contributes the exact product the reference sums, and
// each row's operations do not depend on the other rows (M).
struct E2M1IntDecoder {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  // 2 * the value of code i (bit 3 the sign), in both 128-bit lanes.
  const __m256i twice = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
};

// Rows [m0, m0 + MR) of panels [p0, p0 + PANELS) over records [k0, k0 + len) into c[j][r][16] (panel
// stride c_panel). In a record's code vector (QuadDecoder<kE2M1>::codes) bytes 2i and 2i + 1 are one
// column's two k, so vpmaddubsw's 16 words are columns 0-3, 8-11 (low lane) and 4-7, 12-15 (high lane);
// vpermq puts them in order once per group. Panels run group by group side by side: their streams stay
// in step (one panel's chunk alone is 2 KiB, too short for the hardware prefetcher to lock on).
template <int MR, int PANELS>
void quad_int_rows(const FpGemm& g, int64_t p0, int64_t m0, int64_t k0, int64_t len, float* c, int64_t c_panel) {
  const E2M1IntDecoder dec;
  constexpr int64_t kRec = kRecordBytes<FpElem::kE2M1>;
  const int64_t groups = g.k_pad / g.group, half_k = g.k_pad / 2, g0 = k0 / g.group;
  const uint8_t* rec[PANELS];
#pragma GCC unroll 4
  for (int j = 0; j < PANELS; ++j) rec[j] = g.packed + ((p0 + j) * g.k_pad + k0) * kRec;
  const uint32_t* ap[MR];
  const float* am[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    ap[r] = g.act_pairs + (m0 + r) * half_k + k0 / 2;
    am[r] = g.act_mult + (m0 + r) * groups + g0;
  }
  for (int64_t kb = 0, gi = 0; kb < len; kb += g.group, ++gi) {
    __m256i acc[PANELS][MR];
#pragma GCC unroll 4
    for (int j = 0; j < PANELS; ++j) {
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) acc[j][r] = _mm256_setzero_si256();
    }
    for (int64_t q = kb; q < kb + g.group; q += 4) {
#pragma GCC unroll 4
      for (int j = 0; j < PANELS; ++j) {
        const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(rec[j] + q * kRec));
        const __m256i w0 = _mm256_shuffle_epi8(dec.twice, _mm256_and_si256(x, dec.lo4));  // k = q, q + 1
        const __m256i w1 = _mm256_shuffle_epi8(dec.twice, _mm256_and_si256(_mm256_srli_epi16(x, 4), dec.lo4));
        const __m256i u0 = _mm256_abs_epi8(w0), u1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
          const __m256i a0 = _mm256_set1_epi32(static_cast<int>(ap[r][q / 2]));
          const __m256i a1 = _mm256_set1_epi32(static_cast<int>(ap[r][q / 2 + 1]));
          const __m256i s0 = _mm256_maddubs_epi16(u0, _mm256_sign_epi8(a0, w0));
          const __m256i s1 = _mm256_maddubs_epi16(u1, _mm256_sign_epi8(a1, w1));
          acc[j][r] = _mm256_add_epi16(acc[j][r], _mm256_add_epi16(s0, s1));
        }
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < PANELS; ++j) {
      __m256 w0, w1;
      quad_group_scale<FpElem::kE2M1>(g, g.grp + ((p0 + j) * groups + g0 + gi) * 16, w0, w1);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256i sum = _mm256_permute4x64_epi64(acc[j][r], 0xD8);  // columns 0-3, 4-7, 8-11, 12-15
        const __m256 m = _mm256_broadcast_ss(am[r] + gi);
        const __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(sum))), m);
        const __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(sum, 1))), m);
        float* cr = c + j * c_panel + r * 16;
        _mm256_store_ps(cr, _mm256_fmadd_ps(f0, w0, _mm256_load_ps(cr)));
        _mm256_store_ps(cr + 8, _mm256_fmadd_ps(f1, w1, _mm256_load_ps(cr + 8)));
      }
    }
  }
}

template <int MR>
void quad_int_tile(const FpGemm& g, int64_t p0, int panels, int64_t m0, int64_t k0, int64_t len, float* c,
                   int64_t c_panel) {
  constexpr int kPanels = fused_panels(MR);
  int j = 0;
  if constexpr (kPanels > 1) {
    for (; j + kPanels <= panels; j += kPanels) quad_int_rows<MR, kPanels>(g, p0 + j, m0, k0, len, c + j * c_panel, c_panel);
  }
  for (; j < panels; ++j) quad_int_rows<MR, 1>(g, p0 + j, m0, k0, len, c + j * c_panel, c_panel);
}

// Panels [p0, p0 + panels) of rows [m_begin, m_end) (several panels: at most kFpFusedMaxRows rows), C tiles
// c[panel][rows][16], in tiles of at most kFpTileRows rows.
void quad_int_chunk(const FpGemm& g, int64_t p0, int panels, int64_t m_begin, int64_t m_end, int64_t k0, int64_t len,
                    float* c) {
  const int64_t rows = m_end - m_begin, cp = rows * 16;
  for (int64_t m0 = m_begin; m0 < m_end; m0 += kFpTileRows) {
    float* ct = c + (m0 - m_begin) * 16;
    switch (min64(kFpTileRows, m_end - m0)) {
      case 6: quad_int_tile<6>(g, p0, panels, m0, k0, len, ct, cp); break;
      case 5: quad_int_tile<5>(g, p0, panels, m0, k0, len, ct, cp); break;
      case 4: quad_int_tile<4>(g, p0, panels, m0, k0, len, ct, cp); break;
      case 3: quad_int_tile<3>(g, p0, panels, m0, k0, len, ct, cp); break;
      case 2: quad_int_tile<2>(g, p0, panels, m0, k0, len, ct, cp); break;
      default: quad_int_tile<1>(g, p0, panels, m0, k0, len, ct, cp); break;
    }
  }
}

template <FpElem E>
void quad_chunk(const FpGemm& g, int64_t p0, int panels, int64_t m_begin, int64_t m_end, int64_t k0, int64_t len,
                float* buf, float* c) {
  if constexpr (E == FpElem::kE2M1) {
    if (g.act_pairs) return quad_int_chunk(g, p0, panels, m_begin, m_end, k0, len, c);
  }
  const int64_t rows = m_end - m_begin;
  const float* a = g.act + m_begin * g.lda + k0;
  switch (rows) {
    case 1: return quad_run_fused<E, 1>(g, p0, panels, k0, len, a, c);
    case 2: return quad_run_fused<E, 2>(g, p0, panels, k0, len, a, c);
    case 3: return quad_run_fused<E, 3>(g, p0, panels, k0, len, a, c);
    default: break;
  }
  alignas(32) float sc[kFpChunk];  // [group][16] multipliers
  quad_decode_tile<E>(g, p0, k0, len, buf, sc);
  for (int64_t m0 = m_begin; m0 < m_end; m0 += kFpTileRows) {
    const int mr = static_cast<int>(min64(kFpTileRows, m_end - m0));
    grouped_run_rows(mr, g.act + m0 * g.lda + k0, g.lda, buf, len, g.group, sc, c + (m0 - m_begin) * 16);
  }
}

}  // namespace

void fp_quad_chunk_avx2(const FpGemm& g, int64_t p0, int panels, int64_t m_begin, int64_t m_end, int64_t k0,
                        int64_t len, float* buf, float* c) {
  static_assert(kFpFusedMaxRows == 3, "quad_chunk writes out the fused row counts");
  switch (g.elem) {
    case FpElem::kE2M1: return quad_chunk<FpElem::kE2M1>(g, p0, panels, m_begin, m_end, k0, len, buf, c);
    case FpElem::kE2M3: return quad_chunk<FpElem::kE2M3>(g, p0, panels, m_begin, m_end, k0, len, buf, c);
    case FpElem::kE3M2: return quad_chunk<FpElem::kE3M2>(g, p0, panels, m_begin, m_end, k0, len, buf, c);
    case FpElem::kE4M3: break;  // per-k records: fp_gemm_avx2.cpp
  }
}

}  // namespace qlinear::x86
