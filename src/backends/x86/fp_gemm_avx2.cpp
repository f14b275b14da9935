// The AVX2 + FMA engine of the FP8 / MX / NVFP4 kernels (layout and numerics: fp_isa.hpp).
//
// Per thread: a range of panels (16 output columns) x a range of rows. For each panel and each K chunk the
// panel's codes are decoded once into an f32 tile buf[kc][16] (16 KiB, L1), and every row block of the
// range runs over it: an MR x 16 register tile (MR <= 6: 12 accumulators, 2 weights, 1 broadcast), one
// FMA per weight and row. The chunk's partial sums go into the thread's C tile [rows][16], scaled there
// when the chunk is a 128x128 weight block. Small M therefore streams every weight once and decodes it
// once; each output's arithmetic does not depend on how rows and panels are split, so results are the
// same at any thread count. Items of at most 3 rows skip the tile and decode in registers (fused_chunk),
// with the same operations in the same order.
#include <immintrin.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "backends/x86/fp_isa.hpp"

namespace qlinear::x86 {

namespace {

constexpr int kMr = 6;

// Local helpers instead of std::min / std::vector: their COMDAT copies compiled here would carry VEX code
// (int8_isa.hpp NOTES).
int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
constexpr int64_t kChunk = 256;  // K per decoded tile (128 with block scales)

int record_bytes(FpElem e) { return e == FpElem::kE4M3 ? 16 : (e == FpElem::kE2M1 ? 8 : 12); }
bool is_lut(FpElem e) { return e == FpElem::kE2M1 || e == FpElem::kE2M3; }
int exp_bias(FpElem e) { return e == FpElem::kE4M3 ? 7 : e == FpElem::kE3M2 ? 3 : 1; }
int lut_shift(FpElem e) { return e == FpElem::kE2M1 ? 1 : 3; }  // table entries are value * 2^p

float pow2(int e) {  // 2^e for e in [-149, 127]
  if (e >= -126) {
    const uint32_t b = static_cast<uint32_t>(e + 127) << 23;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  const uint32_t b = 1u << (e + 149);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The biased-exponent offset that turns an E8M0 code into the decode multiplier's f32 exponent field:
// float trick 2^(127 - bias) * 2^(code - 127), table 2^-p * 2^(code - 127).
int e8m0_offset(FpElem e) { return is_lut(e) ? -lut_shift(e) : 127 - exp_bias(e); }

// 16 codes of one record as bytes (FP6: 6-bit codes, FP4: 4-bit codes).
__m128i load_codes(const uint8_t* rec, FpElem e) {
  if (e == FpElem::kE4M3) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec));
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec));
  const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b8, lo4), _mm_and_si128(_mm_srli_epi16(b8, 4), lo4));
  if (e == FpElem::kE2M1) return nib;
  int32_t top;
  std::memcpy(&top, rec + 8, 4);
  // Dword q (columns 4q..4q+3) shifted right by 2q puts byte b's bits 2q..2q+1 at bits 0..1 of byte b.
  __m128i t = _mm_srlv_epi32(_mm_set1_epi32(top), _mm_setr_epi32(0, 2, 4, 6));
  t = _mm_and_si128(t, _mm_set1_epi8(0x03));
  return _mm_or_si128(nib, _mm_slli_epi16(t, 4));  // values <= 3 << 4: no carry across bytes
}

struct Decoder {
  FpElem elem;
  __m128i t0, t1;     // tables (E2M1: t0; E2M3: magnitudes 0..15, 16..31)
  __m256i mag_mask, sign_bit;
  int mag_shift = 0, sign_shift = 0;

  explicit Decoder(FpElem e) : elem(e) {
    if (e == FpElem::kE2M1) {
      t0 = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    } else if (e == FpElem::kE2M3) {
      t0 = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      t1 = _mm_setr_epi8(16, 18, 20, 22, 24, 26, 28, 30, 32, 36, 40, 44, 48, 52, 56, 60);
    } else {
      const int mbits = e == FpElem::kE4M3 ? 3 : 2, sign = e == FpElem::kE4M3 ? 7 : 5;
      mag_mask = _mm256_set1_epi32((1 << sign) - 1);
      sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
      mag_shift = 23 - mbits;
      sign_shift = 31 - sign;
    }
  }

  // Two f32 vectors (columns 0-7, 8-15): value(code) * mult (table formats: value * 2^p * mult).
  void decode(__m128i c, __m256 mult_lo, __m256 mult_hi, float* dst) const {
    __m256 lo, hi;
    decode_regs(c, mult_lo, mult_hi, lo, hi);
    _mm256_store_ps(dst, lo);
    _mm256_store_ps(dst + 8, hi);
  }

  void decode_regs(__m128i c, __m256 mult_lo, __m256 mult_hi, __m256& out_lo, __m256& out_hi) const {
    __m256 lo, hi;
    if (elem == FpElem::kE2M1 || elem == FpElem::kE2M3) {
      __m128i v;
      if (elem == FpElem::kE2M1) {
        v = _mm_shuffle_epi8(t0, c);
      } else {
        const __m128i mag = _mm_and_si128(c, _mm_set1_epi8(0x1F));
        const __m128i big = _mm_cmpgt_epi8(mag, _mm_set1_epi8(15));
        v = _mm_blendv_epi8(_mm_shuffle_epi8(t0, mag), _mm_shuffle_epi8(t1, mag), big);
        v = _mm_sign_epi8(v, _mm_slli_epi16(c, 2));  // bit 5 (sign) to bit 7; c = 0 only when v = 0
      }
      lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
      hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
    } else {
      const __m256i d0 = _mm256_cvtepu8_epi32(c), d1 = _mm256_cvtepu8_epi32(_mm_srli_si128(c, 8));
      const __m256i b0 = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(d0, mag_mask), mag_shift),
                                         _mm256_and_si256(_mm256_slli_epi32(d0, sign_shift), sign_bit));
      const __m256i b1 = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(d1, mag_mask), mag_shift),
                                         _mm256_and_si256(_mm256_slli_epi32(d1, sign_shift), sign_bit));
      lo = _mm256_castsi256_ps(b0);
      hi = _mm256_castsi256_ps(b1);
    }
    out_lo = _mm256_mul_ps(lo, mult_lo);
    out_hi = _mm256_mul_ps(hi, mult_hi);
  }
};

// Multipliers of 16 columns from their scale codes.
void group_mult(const FpGemm& g, const uint8_t* codes, __m256& lo, __m256& hi) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m256i d0 = _mm256_cvtepu8_epi32(c), d1 = _mm256_cvtepu8_epi32(_mm_srli_si128(c, 8));
  if (g.group_scale == FpGroupScale::kE8M0) {
    const __m256i off = _mm256_set1_epi32(e8m0_offset(g.elem));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(d0, off), 23));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(d1, off), 23));
    return;
  }
  // NVFP4: E4M3 scale (float trick, 2^120) times the E2M1 table's 2^-1.
  const __m256i mag = _mm256_set1_epi32(0x7F), sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256 k = _mm256_set1_ps(pow2(119));
  auto one = [&](__m256i d) {
    const __m256i b = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(d, mag), 20),
                                      _mm256_and_si256(_mm256_slli_epi32(d, 24), sign));
    return _mm256_mul_ps(_mm256_castsi256_ps(b), k);
  };
  lo = one(d0);
  hi = one(d1);
}

// Decodes records [k0, k0 + len) of panel p into buf[len][16].
void decode_tile(const FpGemm& g, const Decoder& dec, int64_t p, int64_t k0, int64_t len, float* buf) {
  const int rb = record_bytes(g.elem);
  const uint8_t* rec = g.packed + p * g.k_pad * rb + k0 * rb;
  if (g.group_scale == FpGroupScale::kNone) {
    const __m256 m = _mm256_set1_ps(is_lut(g.elem) ? pow2(-lut_shift(g.elem)) : pow2(127 - exp_bias(g.elem)));
    for (int64_t k = 0; k < len; ++k) dec.decode(load_codes(rec + k * rb, g.elem), m, m, buf + k * 16);
    return;
  }
  const int64_t groups = g.k_pad / g.group;
  for (int64_t k = 0; k < len; k += g.group) {
    __m256 lo, hi;
    group_mult(g, g.grp + (p * groups + (k0 + k) / g.group) * 16, lo, hi);
    for (int64_t i = k; i < k + g.group; ++i) dec.decode(load_codes(rec + i * rb, g.elem), lo, hi, buf + i * 16);
  }
}

// c[r][0..15] += acc[r] (* s[r]): a chunk's partial sums into the C tile (scaled for 128x128 blocks).
template <int MR, bool kScaled>
void add_partials(const __m256 (&acc)[MR][2], float* c, const float* s) {
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * 16;
    if (kScaled) {
      const __m256 sv = _mm256_set1_ps(s[r]);
      _mm256_store_ps(cr, _mm256_fmadd_ps(acc[r][0], sv, _mm256_load_ps(cr)));
      _mm256_store_ps(cr + 8, _mm256_fmadd_ps(acc[r][1], sv, _mm256_load_ps(cr + 8)));
    } else {
      _mm256_store_ps(cr, _mm256_add_ps(acc[r][0], _mm256_load_ps(cr)));
      _mm256_store_ps(cr + 8, _mm256_add_ps(acc[r][1], _mm256_load_ps(cr + 8)));
    }
  }
}

// c[r][0..15] (+)= (a[r] . buf) (* s[r]) for MR rows.
template <int MR, bool kScaled>
void ukernel(const float* a, int64_t lda, const float* buf, int64_t len, float* c, const float* s) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < len; ++k) {
    const __m256 w0 = _mm256_load_ps(buf + k * 16), w1 = _mm256_load_ps(buf + k * 16 + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(av, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, w1, acc[r][1]);
    }
  }
  add_partials<MR, kScaled>(acc, c, s);
}

template <bool kScaled>
void run_rows(int mr, const float* a, int64_t lda, const float* buf, int64_t len, float* c, const float* s) {
  switch (mr) {
    case 6: ukernel<6, kScaled>(a, lda, buf, len, c, s); break;
    case 5: ukernel<5, kScaled>(a, lda, buf, len, c, s); break;
    case 4: ukernel<4, kScaled>(a, lda, buf, len, c, s); break;
    case 3: ukernel<3, kScaled>(a, lda, buf, len, c, s); break;
    case 2: ukernel<2, kScaled>(a, lda, buf, len, c, s); break;
    default: ukernel<1, kScaled>(a, lda, buf, len, c, s); break;
  }
}

// Small M (at most kFusedMaxRows rows): each record decoded into registers and used at once, no tile. The
// decode's integer work then overlaps the rows' FMA chains (with one row, two chains of FMAs would otherwise
// wait on each other's latency after a tile pass), and the codes stream without a store/reload. The same
// operations in the same order as decode_tile + ukernel: outputs are bit-identical to the tiled path, so
// a row's result does not depend on M or on the thread count.
constexpr int kFusedMaxRows = 3;

template <int MR, bool kScaled>
void fused_chunk(const FpGemm& g, const Decoder& dec, int64_t p, int64_t k0, int64_t len, const float* a, int64_t lda,
                 float* c, const float* s) {
  const int rb = record_bytes(g.elem);
  const uint8_t* rec = g.packed + p * g.k_pad * rb + k0 * rb;
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  auto step = [&](int64_t k, __m256 ml, __m256 mh) {
    __m256 w0, w1;
    dec.decode_regs(load_codes(rec + k * rb, g.elem), ml, mh, w0, w1);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(av, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, w1, acc[r][1]);
    }
  };
  if (g.group_scale == FpGroupScale::kNone) {
    const __m256 m = _mm256_set1_ps(is_lut(g.elem) ? pow2(-lut_shift(g.elem)) : pow2(127 - exp_bias(g.elem)));
    for (int64_t k = 0; k < len; ++k) step(k, m, m);
  } else {
    const int64_t groups = g.k_pad / g.group;
    for (int64_t k = 0; k < len; k += g.group) {
      __m256 lo, hi;
      group_mult(g, g.grp + (p * groups + (k0 + k) / g.group) * 16, lo, hi);
      for (int64_t i = k; i < k + g.group; ++i) step(i, lo, hi);
    }
  }
  add_partials<MR, kScaled>(acc, c, s);
}

template <bool kScaled>
void run_fused(int mr, const FpGemm& g, const Decoder& dec, int64_t p, int64_t k0, int64_t len, const float* a,
               float* c, const float* s) {
  switch (mr) {
    case 3: fused_chunk<3, kScaled>(g, dec, p, k0, len, a, g.lda, c, s); break;
    case 2: fused_chunk<2, kScaled>(g, dec, p, k0, len, a, g.lda, c, s); break;
    default: fused_chunk<1, kScaled>(g, dec, p, k0, len, a, g.lda, c, s); break;
  }
}

uint16_t f32_to_bf16_rne(float y) {
  uint32_t u;
  std::memcpy(&u, &y, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// 8 f32 to bf16, round to nearest even (NaN stays NaN: arithmetic NaNs are quiet, their payload is high).
__m128i f32x8_to_bf16(__m256 y) {
  __m256i u = _mm256_castps_si256(y);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(u, u), 0x08));
}

void store_row(void* out, FloatKind kind, const float* y, int64_t cols) {
  if (cols == 16) {
    for (int h = 0; h < 2; ++h) {
      const __m256 v = _mm256_loadu_ps(y + 8 * h);
      switch (kind) {
        case FloatKind::kF32: _mm256_storeu_ps(static_cast<float*>(out) + 8 * h, v); break;
        case FloatKind::kBF16:
          _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + 8 * h), f32x8_to_bf16(v));
          break;
        case FloatKind::kF16:
          _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + 8 * h),
                           _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
          break;
      }
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j) {
    switch (kind) {
      case FloatKind::kF32: static_cast<float*>(out)[j] = y[j]; break;
      case FloatKind::kBF16: static_cast<uint16_t*>(out)[j] = f32_to_bf16_rne(y[j]); break;
      case FloatKind::kF16: static_cast<uint16_t*>(out)[j] = _cvtss_sh(y[j], _MM_FROUND_TO_NEAREST_INT); break;
    }
  }
}

void epilogue(const FpGemm& g, const float* c, int64_t m0, int64_t rows, int64_t n0) {
  const int64_t cols = min64(16, g.n - n0);
  const size_t osize = g.out_kind == FloatKind::kF32 ? 4 : 2;
  alignas(32) float cs[16], add[16], y[16];
  for (int j = 0; j < 16; ++j) {
    const bool in = j < cols;
    cs[j] = g.col_scale ? g.col_scale[n0 + j] : 1.0f;
    add[j] = (in && g.bias ? g.bias[n0 + j] : 0.0f) + (g.col_nan ? g.col_nan[n0 + j] : 0.0f);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const __m256 rs = _mm256_set1_ps(g.row_scale ? g.row_scale[m0 + r] : 1.0f);
    for (int h = 0; h < 2; ++h) {
      const __m256 s = _mm256_mul_ps(rs, _mm256_load_ps(cs + 8 * h));
      _mm256_store_ps(y + 8 * h, _mm256_fmadd_ps(_mm256_load_ps(c + r * 16 + 8 * h), s, _mm256_load_ps(add + 8 * h)));
    }
    store_row(static_cast<char*>(g.out) + static_cast<size_t>((m0 + r) * g.n + n0) * osize, g.out_kind, y, cols);
  }
}

void run_item(const FpGemm& g, const Decoder& dec, int64_t p, int64_t m_begin, int64_t m_end, float* buf,
              float* c) {
  const int64_t rows = m_end - m_begin;
  std::memset(c, 0, static_cast<size_t>(rows * 16) * sizeof(float));
  const bool blocks = g.block_scale != nullptr;
  const int64_t chunk = blocks ? 128 : kChunk;
  float s[kMr];
  const bool fused = rows <= kFusedMaxRows;  // one row block, decoded in registers
  for (int64_t k0 = 0; k0 < g.k_pad; k0 += chunk) {
    const int64_t len = min64(chunk, g.k_pad - k0);
    if (!fused) decode_tile(g, dec, p, k0, len, buf);
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kMr) {
      const int mr = static_cast<int>(min64(kMr, m_end - m0));
      const float* a = g.act + m0 * g.lda + k0;
      float* cr = c + (m0 - m_begin) * 16;
      if (blocks) {
        const int64_t kb = k0 / 128;
        const float ws = g.block_scale[(p * 16 / 128) * g.block_cols + kb];
        for (int r = 0; r < mr; ++r) {
          s[r] = g.act_block_scale ? g.act_block_scale[(m0 + r) * g.block_cols + kb] * ws : ws;
        }
      }
      if (fused && blocks) run_fused<true>(mr, g, dec, p, k0, len, a, cr, s);
      else if (fused) run_fused<false>(mr, g, dec, p, k0, len, a, cr, s);
      else if (blocks) run_rows<true>(mr, a, g.lda, buf, len, cr, s);
      else run_rows<false>(mr, a, g.lda, buf, len, cr, s);
    }
  }
  epilogue(g, c, m_begin, rows, p * 16);
}

}  // namespace

void fp_gemm_avx2(const FpGemm& g) {
  const int64_t panels = g.n_pad / 16;
  const int64_t work = g.m * g.n_pad * g.k_pad;
  const int nt = work < (int64_t{1} << 18) ? 1 : g.threads;
  // Rows split only when the panels alone cannot feed every thread.
  int64_t mblocks = 1;
  if (panels < 2 * nt && g.m > kMr * nt) {
    mblocks = min64((2 * nt + panels - 1) / panels, (g.m + kMr - 1) / kMr);
  }
  const int64_t mb = ((g.m + mblocks - 1) / mblocks + kMr - 1) / kMr * kMr;
  mblocks = (g.m + mb - 1) / mb;
  const Decoder dec(g.elem);
#pragma omp parallel num_threads(nt)
  {
    const size_t bytes = static_cast<size_t>((kChunk * 16 + mb * 16) * 4 + 63) / 64 * 64;
    float* buf = static_cast<float*>(std::aligned_alloc(64, bytes));
    float* c = buf + kChunk * 16;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < panels * mblocks; ++item) {
      const int64_t p = item / mblocks, mbk = item % mblocks;
      const int64_t m0 = mbk * mb, m1 = min64(g.m, m0 + mb);
      if (m0 < m1) run_item(g, dec, p, m0, m1, buf, c);
    }
    std::free(buf);
  }
}

}  // namespace qlinear::x86
