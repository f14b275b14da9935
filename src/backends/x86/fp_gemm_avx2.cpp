// The AVX2 + FMA engine of the FP8 / MX / NVFP4 kernels (layout and numerics: fp_isa.hpp).
//
// Per thread: a range of panels (16 output columns) x a range of rows. For each panel and each K chunk the
// panel's codes are decoded once into an f32 tile buf[kc][16] (16 KiB, L1), and every row block of the
// range runs over it: an MR x 16 register tile (MR <= 6: 12 accumulators, 2 weights, 1 broadcast), one
// FMA per weight and row. The chunk's partial sums go into the thread's C tile [rows][16], scaled there
// when the chunk is a 128x128 weight block. Small M therefore streams every weight once and decodes it
// once; each output's arithmetic does not depend on how rows and panels are split, so results are the
// same at any thread count. Items of at most 3 rows skip the tile and decode in registers (fused_chunk,
// quad_fused_chunk), with the same operations in the same order; an item of 1 or 2 rows covers 4 or 2
// panels, run side by side for more independent FMA chains. FP4 and FP6 (quad records) keep each group's
// partial sum in registers and add it to C times the group's scale (fp_isa.hpp).
#include <immintrin.h>
#include <cstring>

#include "backends/x86/fp_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int kMr = kFpTileRows;

// Local helpers instead of std::min / std::vector: their COMDAT copies compiled here would carry VEX code
// (int8_isa.hpp NOTES).
int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
constexpr int64_t kChunk = kFpChunk;  // K per decoded tile (128 with block scales)

// Everything that depends on the element format is a template on it, so that the inner loops hold no
// branch on the format and every shift count and table is a constant (a runtime Decoder cost M = 1 about
// a third of its time in reloaded masks and shifts by register).
template <FpElem E> constexpr int kRecordBytes = E == FpElem::kE4M3 ? 16 : (E == FpElem::kE2M1 ? 8 : 12);
template <FpElem E> constexpr int kDecodeExp = kFpDecodeExp[static_cast<int>(E)];

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

// The multipliers of 16 columns for one group of E4M3 records (quad records scale their groups' sums instead).
struct Mult {
  __m256 lo, hi;
};

// How an E4M3 record becomes f32. kF16: the code as an FP16 bit pattern widened by F16C (value * 2^-8), for
// MX layers with scales above 2^7, whose multipliers 2^(8 + e - 127) stay normal where the other route's
// would not. kF32: the code's bits placed straight into an f32 (value * 2^-120; E4M3 subnormals land on f32
// subnormals, exactly): sign-extend, shift, mask. It serves layers without group scales (one multiplier,
// 2^120) and MXFP8 layers whose scales are at most 2^7 (FpGemm::e4m3_f32_groups; multipliers 2^(e - 7)).
// On Zen 3 a record with its two FMAs costs 5.3 cycles by F16C and 4.2 this way (vcvtph2ps issues one per
// cycle there, in the multiplies' slots), which is what M = 1 is bound by.
enum class E4m3Route : uint8_t { kF16, kF32 };

// Two f32 vectors (columns 0-7, 8-15) of one E4M3 record: value(code) * 2^-(decode exponent) * mult (exact,
// fp_isa.hpp).
template <FpElem E, E4m3Route R = E4m3Route::kF16>
__attribute__((always_inline)) inline void decode(const uint8_t* rec, const Mult& m, __m256& out_lo, __m256& out_hi) {
  static_assert(E == FpElem::kE4M3, "FP6 and FP4 are quad records (QuadDecoder)");
  if constexpr (R == E4m3Route::kF32) {
    // s eeee mmm sign-extended to 32 bits, shifted so that eeee is the low end of f32's exponent field and
    // mmm the top of its mantissa; the mask keeps those and the sign (bit 31) and clears the sign's copies.
    const __m256i keep = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
    const __m256i lo = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec)));
    const __m256i hi = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + 8)));
    out_lo = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(lo, 20), keep)), m.lo);
    out_hi = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(hi, 20), keep)), m.hi);
    return;
  }
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec));
  // The code as an FP16 bit pattern: sign to bit 15, the magnitude bits under it so that the code's exponent
  // field is the low end of FP16's (sign-extended bytes shifted left; E4M3 and E2M3 then clear bit 14, where
  // the sign also lands). FP16 subnormals are the code's subnormals, so the value is exact times
  // 2^-kDecodeExp (FP16's exponent bias 15 less the code's: E4M3 7, E3M2 3, E2M3 1). F16C widens 8 at a time.
  constexpr int shift = E == FpElem::kE3M2 ? 8 : 7;  // E4M3 s eeee mmm, E2M3 s00 ee mmm; E3M2 s00 eee mm
  __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(c), shift);
  if constexpr (shift == 7) h = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
  const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  const __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  out_lo = _mm256_mul_ps(lo, m.lo);
  out_hi = _mm256_mul_ps(hi, m.hi);
}

// The multipliers of layers without group scales (the E4M3 F32 route's 2^120; other scales in the epilogue).
Mult constant_mult() {
  const __m256 v = _mm256_set1_ps(pow2(kFpE4m3F32DecodeExp));
  return {v, v};
}

// Multipliers of 16 columns from their scale codes: 2^(the route's decode exponent) times the group scale.
template <FpElem E, E4m3Route R = E4m3Route::kF16>
Mult group_mult(const FpGemm& g, const uint8_t* codes) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m256i d0 = _mm256_cvtepu8_epi32(c), d1 = _mm256_cvtepu8_epi32(_mm_srli_si128(c, 8));
  Mult m;
  if (g.group_scale == FpGroupScale::kE8M0) {  // f32 exponent field code + kDecodeExp (checked at process)
    const __m256i off = _mm256_set1_epi32(R == E4m3Route::kF32 ? kFpE4m3F32DecodeExp : kDecodeExp<E>);
    m.lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(d0, off), 23));
    m.hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(d1, off), 23));
  } else {
    // E4M3 group scales (float trick, 2^120): NVFP4 is E2M1, whose groups quad_group_scale scales.
    const __m256i mag = _mm256_set1_epi32(0x7F), sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    const __m256 k = _mm256_set1_ps(pow2(120 + kDecodeExp<E>));
    auto one = [&](__m256i d) {
      const __m256i b = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(d, mag), 20),
                                        _mm256_and_si256(_mm256_slli_epi32(d, 24), sign));
      return _mm256_mul_ps(_mm256_castsi256_ps(b), k);
    };
    m.lo = one(d0);
    m.hi = one(d1);
  }
  return m;
}

// Calls f.operator()<route>(k, mult) for records [k0, k0 + len) of panel p, with the multipliers of their groups.
template <FpElem E, class F>
void for_each_record(const FpGemm& g, int64_t p, int64_t k0, int64_t len, F&& f) {
  if (g.group_scale == FpGroupScale::kNone) {
    const Mult m = constant_mult();
    for (int64_t k = 0; k < len; ++k) f.template operator()<E4m3Route::kF32>(k, m);
    return;
  }
  const int64_t groups = g.k_pad / g.group;
  auto one_group = [&]<E4m3Route R>(int64_t k) {
    const Mult m = group_mult<E, R>(g, g.grp + (p * groups + (k0 + k) / g.group) * 16);
    for (int64_t i = k; i < k + g.group; ++i) f.template operator()<R>(i, m);
  };
  for (int64_t k = 0; k < len; k += g.group) {
    if (g.e4m3_f32_groups) {
      one_group.template operator()<E4m3Route::kF32>(k);
    } else {
      one_group.template operator()<E4m3Route::kF16>(k);
    }
  }
}

// Decodes records [k0, k0 + len) of panel p into buf[len][16].
template <FpElem E>
void decode_tile(const FpGemm& g, int64_t p, int64_t k0, int64_t len, float* buf) {
  const uint8_t* rec = g.packed + (p * g.k_pad + k0) * kRecordBytes<E>;
  for_each_record<E>(g, p, k0, len, [&]<E4m3Route R>(int64_t k, const Mult& m) {
    __m256 lo, hi;
    decode<E, R>(rec + k * kRecordBytes<E>, m, lo, hi);
    _mm256_store_ps(buf + k * 16, lo);
    _mm256_store_ps(buf + k * 16 + 8, hi);
  });
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
// decode's integer work then overlaps the rows' FMA chains, and the codes stream without a store/reload.
// With one row a panel gives only two FMA chains, each waiting on its own latency, so PANELS panels run
// side by side (their records interleaved): more independent chains, each column's sum still in the same
// order. The same operations in the same order as decode_tile + ukernel: outputs are bit-identical to the
// tiled path, so a row's result does not depend on M or on the thread count.
constexpr int kFusedMaxRows = kFpFusedMaxRows;
constexpr int kMaxFusedPanels = kFpMaxFusedPanels;
constexpr int fused_panels(int64_t rows) { return rows == 1 ? kMaxFusedPanels : rows == 2 ? 2 : 1; }

// One step of fused_chunk: record k of every panel into the accumulators. Plain unrolled loops, no lambda:
// GCC keeps acc in registers only so (with a capturing lambda it spilled them on every step).
template <FpElem E, E4m3Route R, int MR, int PANELS>
__attribute__((always_inline)) inline void fused_step(const uint8_t* const (&rec)[PANELS], int64_t k,
                                                      const float* a, int64_t lda, const Mult (&m)[PANELS],
                                                      __m256 (&acc)[PANELS][MR][2]) {
  __m256 av[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) av[r] = _mm256_broadcast_ss(a + r * lda + k);
#pragma GCC unroll 4
  for (int j = 0; j < PANELS; ++j) {
    __m256 w0, w1;
    decode<E, R>(rec[j] + k * kRecordBytes<E>, m[j], w0, w1);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      acc[j][r][0] = _mm256_fmadd_ps(av[r], w0, acc[j][r][0]);
      acc[j][r][1] = _mm256_fmadd_ps(av[r], w1, acc[j][r][1]);
    }
  }
}

// The grouped records [k0, k0 + len) of panels p0.. into acc by route R: each group's multipliers, then its
// records.
template <FpElem E, E4m3Route R, int MR, int PANELS>
__attribute__((always_inline)) inline void fused_groups(const FpGemm& g, const uint8_t* const (&rec)[PANELS], int64_t p0,
                                                        int64_t k0, int64_t len, const float* a,
                                                        __m256 (&acc)[PANELS][MR][2]) {
  Mult m[PANELS];
  const int64_t groups = g.k_pad / g.group;
  for (int64_t k = 0; k < len; k += g.group) {
#pragma GCC unroll 4
    for (int j = 0; j < PANELS; ++j) m[j] = group_mult<E, R>(g, g.grp + ((p0 + j) * groups + (k0 + k) / g.group) * 16);
    for (int64_t i = k; i < k + g.group; ++i) fused_step<E, R, MR, PANELS>(rec, i, a, g.lda, m, acc);
  }
}

template <FpElem E, int MR, int PANELS, bool kScaled>
void fused_chunk(const FpGemm& g, int64_t p0, int64_t k0, int64_t len, const float* a, float* c, int64_t c_panel,
                 const float* s) {
  const uint8_t* rec[PANELS];
  __m256 acc[PANELS][MR][2];
#pragma GCC unroll 4
  for (int j = 0; j < PANELS; ++j) {
    rec[j] = g.packed + ((p0 + j) * g.k_pad + k0) * kRecordBytes<E>;
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) acc[j][r][0] = acc[j][r][1] = _mm256_setzero_ps();
  }
  if (g.group_scale == FpGroupScale::kNone) {
    Mult m[PANELS];
#pragma GCC unroll 4
    for (int j = 0; j < PANELS; ++j) m[j] = constant_mult();
    for (int64_t k = 0; k < len; ++k) fused_step<E, E4m3Route::kF32, MR, PANELS>(rec, k, a, g.lda, m, acc);
  } else if (g.e4m3_f32_groups) {
    fused_groups<E, E4m3Route::kF32, MR, PANELS>(g, rec, p0, k0, len, a, acc);
  } else {
    fused_groups<E, E4m3Route::kF16, MR, PANELS>(g, rec, p0, k0, len, a, acc);
  }
#pragma GCC unroll 4
  for (int j = 0; j < PANELS; ++j) add_partials<MR, kScaled>(acc[j], c + j * c_panel, s + j * kMr);
}

// Panels [p0, p0 + panels) of ROWS rows in the register path: fused_panels(ROWS) at a time, the rest singly.
template <FpElem E, int ROWS, bool kScaled>
void run_fused(const FpGemm& g, int64_t p0, int panels, int64_t k0, int64_t len, const float* a, float* c,
               const float* s) {
  constexpr int kPanels = fused_panels(ROWS);
  constexpr int64_t cp = ROWS * 16;  // C tile of one panel
  int j = 0;
  if constexpr (kPanels > 1) {
    for (; j + kPanels <= panels; j += kPanels) {
      fused_chunk<E, ROWS, kPanels, kScaled>(g, p0 + j, k0, len, a, c + j * cp, cp, s + j * kMr);
    }
  }
  for (; j < panels; ++j) fused_chunk<E, ROWS, 1, kScaled>(g, p0 + j, k0, len, a, c + j * cp, cp, s + j * kMr);
}

// s[r] = the 128x128 weight block's scale for panel p and K block k0 / 128, times row m0 + r's 1x128
// activation scale where there is one, for `rows` rows.
void block_scales(const FpGemm& g, int64_t p, int64_t m0, int64_t rows, int64_t k0, float* s) {
  const int64_t kb = k0 / 128;
  const float ws = g.block_scale[p * g.block_cols + kb];
  for (int64_t r = 0; r < rows; ++r) s[r] = g.act_block_scale ? g.act_block_scale[(m0 + r) * g.block_cols + kb] * ws : ws;
}

void epilogue(const FpGemm& g, const float* c, int64_t m0, int64_t rows, int64_t n0);

// One work item: rows [m_begin, m_end) of panels [p0, p0 + panels), C tiles c[panel][rows][16]. Items of
// more than kFusedMaxRows rows have one panel.
template <FpElem E, bool kScaled>
void run_item(const FpGemm& g, int64_t p0, int panels, int64_t m_begin, int64_t m_end, float* buf, float* c) {
  const int64_t rows = m_end - m_begin;
  std::memset(c, 0, static_cast<size_t>(panels * rows * 16) * sizeof(float));
  const int64_t chunk = kScaled ? 128 : kChunk;
  float s[kMaxFusedPanels * kMr];  // [panel][row] block scales
  for (int64_t k0 = 0; k0 < g.k_pad; k0 += chunk) {
    const int64_t len = min64(chunk, g.k_pad - k0);
    if constexpr (E != FpElem::kE4M3) {  // quad records (fp_quad_avx2.cpp)
      fp_quad_chunk_avx2(g, p0, panels, m_begin, m_end, k0, len, buf, c);
    } else {
      if (rows <= kFusedMaxRows) {  // decoded in registers
        if (kScaled) {
          for (int j = 0; j < panels; ++j) block_scales(g, p0 + j, m_begin, rows, k0, s + j * kMr);
        }
        const float* a = g.act + m_begin * g.lda + k0;
        if (rows == 1) run_fused<E, 1, kScaled>(g, p0, panels, k0, len, a, c, s);
        else if (rows == 2) run_fused<E, 2, kScaled>(g, p0, panels, k0, len, a, c, s);
        else run_fused<E, 3, kScaled>(g, p0, panels, k0, len, a, c, s);
        continue;
      }
      decode_tile<E>(g, p0, k0, len, buf);
      for (int64_t m0 = m_begin; m0 < m_end; m0 += kMr) {
        const int mr = static_cast<int>(min64(kMr, m_end - m0));
        if (kScaled) block_scales(g, p0, m0, mr, k0, s);
        run_rows<kScaled>(mr, g.act + m0 * g.lda + k0, g.lda, buf, len, c + (m0 - m_begin) * 16, s);
      }
    }
  }
  for (int j = 0; j < panels; ++j) epilogue(g, c + j * rows * 16, m_begin, rows, (p0 + j) * 16);
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

template <FpElem E, bool kScaled>
void run_gemm(const FpGemm& g) {
  const int64_t panels = g.n_pad / 16;
  const int nt = g.threads;  // from the cost model (fp_common.cpp)
  // Rows split only when the panels alone cannot feed every thread.
  int64_t mblocks = 1;
  if (panels < 2 * nt && g.m > kMr * nt) {
    mblocks = min64((2 * nt + panels - 1) / panels, (g.m + kMr - 1) / kMr);
  }
  const int64_t mb = ((g.m + mblocks - 1) / mblocks + kMr - 1) / kMr * kMr;
  mblocks = (g.m + mb - 1) / mb;
  // An item covers `per_item` panels: several for the register path of 1-2 rows (fused_panels).
  const int per_item = g.m <= kFusedMaxRows ? fused_panels(g.m) : 1;
  const int64_t groups = (panels + per_item - 1) / per_item;
  // The decoded tile, then the C tiles: mb rows of one panel, or up to kMaxFusedPanels panels of few rows.
  const int64_t bytes = (kChunk * 16 + kMaxFusedPanels * mb * 16) * 4;
  threads::parallel_for(groups * mblocks, nt, [&](int64_t item) {
    float* buf = static_cast<float*>(threads::scratch(0, bytes));
    float* c = buf + kChunk * 16;
    const int64_t pg = item / mblocks, mbk = item % mblocks;
    const int64_t m0 = mbk * mb, m1 = min64(g.m, m0 + mb);
    const int64_t p0 = pg * per_item;
    if (m0 < m1) run_item<E, kScaled>(g, p0, static_cast<int>(min64(per_item, panels - p0)), m0, m1, buf, c);
  });
}

}  // namespace

void fp_gemm_avx2(const FpGemm& g) {
  const bool blocks = g.block_scale != nullptr;  // 128x128 FP8 blocks: E4M3 only
  switch (g.elem) {
    case FpElem::kE4M3: return blocks ? run_gemm<FpElem::kE4M3, true>(g) : run_gemm<FpElem::kE4M3, false>(g);
    case FpElem::kE3M2: return run_gemm<FpElem::kE3M2, false>(g);
    case FpElem::kE2M3: return run_gemm<FpElem::kE2M3, false>(g);
    case FpElem::kE2M1: return run_gemm<FpElem::kE2M1, false>(g);
  }
}

}  // namespace qlinear::x86
