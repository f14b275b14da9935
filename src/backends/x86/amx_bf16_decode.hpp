#pragma once
// Weight codes -> BF16 VNNI-2 rows for the AMX-BF16 kernels (amx_w8a16_gemm.cpp): every code of these formats
// is a BF16 value, so the decode is exact. Internal linkage, AVX-512 BW/VBMI/BF16 intrinsics: included only by
// the AMX translation units (compiled with their flags).
//
// The unit is a quad: k = 4q .. 4q + 3 of one panel's 16 columns (64 codes), turned into two B-tile rows
// (a: k pair 2q, b: k pair 2q + 1; word 2j + t = W[j][k of the pair + t], 32 words each). Every layout is
// first brought to "quad order" (one byte per code):
//
//   quad byte 16l + 8h + i  (lane l < 4, half h < 2, i < 8)  =  code of column 4l + i/2 at k = 4q + 2h + i%2
//
// then two byte lookups give each code's BF16 (hi, lo) bytes, and vpunpck{l,h}bw of (lo, hi) inside each
// 128-bit lane yields a and b (lane l holds words 8l .. 8l + 7: columns 4l .. 4l + 3). kQuadE2M1 is quad order
// a nibble per code: its 32 bytes broadcast to both halves of a register, the upper half shifted down a nibble,
// give one code per byte, looked up by vpshufb (a 16-entry table per 128-bit lane: the whole code with its
// sign). kRecordE2M1 skips the byte stage: each row's 32 words are gathered from the packed bytes by one vpermb
// (word w of a is quad byte w + 8 (w / 8), of b that + 8), the nibble shifted down by vpsrlvw and looked up as
// a word by vpermw.
//
// Layouts (the byte offset of quad q of panel p):
//   kQuadE4M3   w8a16_isa.hpp's panels, already in quad order                     p * 16 * k_pad + q * 64
//   kQuadE2M1   the same, two E2M1 codes per byte (low nibbles, then high)          p * 8 * k_pad + q * 32
//   kRecordE4M3 fp_isa.hpp's code panels: a 16-byte record (byte j: column j) per k p * 16 * k_pad + q * 64
//   kRecordE2M1 fp_isa.hpp's FP4 quad records (32 bytes per 4 k; codes stored as they are)
//                                                                                   p * 8 * k_pad + q * 32
//   kRecordE2M3 / kRecordE3M2  fp_isa.hpp's FP6 quad records (48 bytes per 4 k: low nibbles in bytes 0..31,
//               the top two bits in bytes 32..47)                                   p * 12 * k_pad + q * 48
// The record layouts are regathered into quad order by one vpermb per source field; shifts (FP6: a word shift
// for the high nibbles, a dword rotation for the top bits) or vpmultishiftqb (NVFP4) then move each code's bits
// into place (a nibble's shift, or a 2-bit field's shift, differs by column).
// Lookups: E4M3 -> two 128-entry vpermi2b tables (the sign OR-ed back); E2M1 -> two vpshufb tables (hi and lo
// bytes of the 16 codes' BF16, repeated in each 128-bit lane), or one 32-word vpermw table (the 16 values twice:
// bit 4 of the index may hold the other nibble's bit); FP6 codes -> 64-entry vpermb tables
// (vpermb reads the low 6 bits, so bits 6..7 of an FP6 byte need not be cleared); NVFP4 (kRecordE2M1Nv, on
// tiles) -> one 64-entry vpermb table by (the column's E4M3 block-scale mantissa, code magnitude), the code's
// sign OR-ed in and the scale's exponent added after (the M = 1 stream decodes its codes as kRecordE2M1 and
// scales each block's sum).
#include <immintrin.h>

#include <cstdint>

#include "backends/x86/amx_bf16_job.hpp"  // Layout

namespace qlinear::x86 {
namespace {

// Bytes per k of one panel (16 columns): where quad q of panel p starts.
constexpr int64_t layout_bytes_per_k(Layout l) {
  switch (l) {
    case Layout::kQuadE2M1:
    case Layout::kRecordE2M1:
    case Layout::kRecordE2M1Nv: return 8;
    case Layout::kRecordE2M3:
    case Layout::kRecordE3M2: return 12;
    default: return 16;
  }
}

// BF16 bits of +-sig * 2^exp2 (sig < 256, exact), or of 0.
constexpr uint16_t bf16_bits(bool neg, int sig, int exp2) {
  if (sig == 0) return neg ? 0x8000 : 0;
  int top = 0;
  while ((sig >> (top + 1)) != 0) ++top;  // sig = 1.f * 2^top
  const int frac = (sig - (1 << top)) << (7 - top);
  return static_cast<uint16_t>((neg ? 0x8000 : 0) | ((exp2 + top + 127) << 7) | frac);
}

// BF16 bits of a float code with `e_bits` exponent bits, `m_bits` mantissa bits and a sign above them
// (OCP E4M3 magnitudes up to 126, E2M1, E2M3, E3M2; bias 2^(e_bits - 1) - 1).
constexpr uint16_t float_code_bf16(int code, int e_bits, int m_bits) {
  const bool neg = ((code >> (e_bits + m_bits)) & 1) != 0;
  const int e = (code >> m_bits) & ((1 << e_bits) - 1), m = code & ((1 << m_bits) - 1);
  const int bias = (1 << (e_bits - 1)) - 1;
  if (e == 0) return bf16_bits(neg, m, 1 - bias - m_bits);
  return bf16_bits(neg, (1 << m_bits) | m, e - bias - m_bits);
}

struct DecodeTables {
  alignas(64) uint8_t e4m3_hi[128], e4m3_lo[128];  // magnitude codes 0..127
  alignas(64) uint8_t e2m3_hi[64], e2m3_lo[64], e3m2_hi[64], e3m2_lo[64];
  alignas(64) uint8_t e2m1_hi[64], e2m1_lo[64];  // BF16 bytes of E2M1 code i % 16 (vpshufb: per 128-bit lane)
  alignas(64) uint16_t e2m1_words[32];  // BF16 of E2M1 code i % 16 (vpermw reads 5 index bits)
  // NVFP4, by index (m << 3) | c (c: an E2M1 code's magnitude bits, m = a block scale's 3 mantissa bits): the
  // BF16 bytes of value(c) * (1 + m / 8) (exact: at most 6 significant bits, normal). One vpermb each.
  alignas(64) uint8_t nv_hi[64], nv_lo[64];
  // By E4M3 block-scale magnitude code: its mantissa bits m << 3 and the BF16 exponent offset e << 7 (as an int16's
  // two bytes) with s = (1 + m / 8) * 2^e (subnormal scales normalized; 0 for a zero scale, masked separately).
  alignas(64) uint8_t sc_m[128], sc_e_hi[128], sc_e_lo[128];
  constexpr DecodeTables()
      : e4m3_hi(), e4m3_lo(), e2m3_hi(), e2m3_lo(), e3m2_hi(), e3m2_lo(), e2m1_hi(), e2m1_lo(), e2m1_words(),
        nv_hi(), nv_lo(), sc_m(), sc_e_hi(), sc_e_lo() {
    for (int c = 0; c < 128; ++c) {
      e4m3_hi[c] = static_cast<uint8_t>(float_code_bf16(c, 4, 3) >> 8);
      e4m3_lo[c] = static_cast<uint8_t>(float_code_bf16(c, 4, 3) & 0xFF);
      // E4M3 scale: normal (8 | m) * 2^(e - 10), subnormal m * 2^-9 normalized to 3 fraction bits.
      const int e = c >> 3, m = c & 7;
      int sig = e == 0 ? m : (8 | m), ex = e == 0 ? -9 : e - 10;
      while (sig != 0 && sig < 8) {
        sig <<= 1;
        --ex;
      }
      const int off = sig == 0 ? 0 : (ex + 3) * 128;  // (1 + (sig - 8) / 8) * 2^(ex + 3)
      sc_m[c] = static_cast<uint8_t>(sig == 0 ? 0 : (sig - 8) << 3);
      sc_e_hi[c] = static_cast<uint8_t>((off >> 8) & 0xFF);
      sc_e_lo[c] = static_cast<uint8_t>(off & 0xFF);
    }
    for (int c = 0; c < 64; ++c) {
      // value(magnitude code) = v2 / 2 with v2 in {0, 1, 2, 3, 4, 6, 8, 12}; times (8 + ms) / 8
      const int ms = c >> 3, v2[8] = {0, 1, 2, 3, 4, 6, 8, 12};
      const uint16_t w = bf16_bits(false, v2[c & 7] * (8 + ms), -4);
      nv_hi[c] = static_cast<uint8_t>(w >> 8);
      nv_lo[c] = static_cast<uint8_t>(w & 0xFF);
    }
    for (int i = 0; i < 64; ++i) {
      const uint16_t f6a = float_code_bf16(i, 2, 3), f6b = float_code_bf16(i, 3, 2);
      e2m1_hi[i] = static_cast<uint8_t>(float_code_bf16(i % 16, 2, 1) >> 8);
      e2m1_lo[i] = static_cast<uint8_t>(float_code_bf16(i % 16, 2, 1) & 0xFF);
      if (i < 32) e2m1_words[i] = float_code_bf16(i % 16, 2, 1);
      e2m3_hi[i] = static_cast<uint8_t>(f6a >> 8);
      e2m3_lo[i] = static_cast<uint8_t>(f6a & 0xFF);
      e3m2_hi[i] = static_cast<uint8_t>(f6b >> 8);
      e3m2_lo[i] = static_cast<uint8_t>(f6b & 0xFF);
    }
  }
};
inline constexpr DecodeTables kDecodeTables;

static_assert(float_code_bf16(0x7E, 4, 3) == 0x43E0, "E4M3 448");
static_assert(float_code_bf16(0x01, 4, 3) == 0x3B00, "E4M3 2^-9");
static_assert(float_code_bf16(0x7, 2, 1) == 0x40C0 && float_code_bf16(0x9, 2, 1) == 0xBF00, "E2M1 6, -0.5");
static_assert(float_code_bf16(0x1F, 2, 3) == 0x40F0 && float_code_bf16(0x01, 2, 3) == 0x3E00, "E2M3 7.5, 0.125");
static_assert(float_code_bf16(0x1F, 3, 2) == 0x41E0 && float_code_bf16(0x21, 3, 2) == 0xBD80, "E3M2 28, -1/16");
static_assert(kDecodeTables.nv_hi[(0 << 3) | 0x7] == 0x40 && kDecodeTables.nv_lo[(0 << 3) | 0x7] == 0xC0, "6");
static_assert(kDecodeTables.nv_hi[(7 << 3) | 0x7] == 0x41 && kDecodeTables.nv_lo[(7 << 3) | 0x7] == 0x34,
              "6 * 1.875 = 11.25");
static_assert(kDecodeTables.nv_hi[(3 << 3) | 0x0] == 0x00 && kDecodeTables.nv_lo[(3 << 3) | 0x0] == 0x00, "0");
static_assert(kDecodeTables.sc_m[0x7E] == (6 << 3) && kDecodeTables.sc_e_hi[0x7E] == 0x04 && kDecodeTables.sc_e_lo[0x7E] == 0x00,
              "448 = 1.75 * 2^8");
static_assert(kDecodeTables.sc_m[0x03] == (4 << 3) && kDecodeTables.sc_e_hi[0x03] == 0xFC && kDecodeTables.sc_e_lo[0x03] == 0x00,
              "3 * 2^-9 = 1.5 * 2^-8");

// vpermb / vpmultishiftqb controls that bring the record layouts into quad order. For quad byte Q = 16l + 8h + i:
// column c = 4l + i/2, record kk = 2h + i%2.
struct GatherTables {
  alignas(64) uint8_t e2m1_idx[64], e2m1_shift[64];        // quad-record byte and nibble of (c, kk)
  // FP6: the source bytes of each quad byte's low nibble and top two bits (vpermb); then the bytes whose nibble
  // is the high one shift right by 4 as whole words (bytes 16l + 8 .. 16l + 15 hold k % 4 >= 2), and the top bits
  // rotate to bits 4..5 by a dword count (a dword's four quad bytes share k / 2 and c / 8, hence the offset).
  alignas(64) uint8_t fp6_nib_idx[64], fp6_top_idx[64];
  alignas(64) uint32_t fp6_top_rotate[16];
  alignas(64) uint8_t e4m3_idx[64];                        // byte kk*16 + c
  // kRecordE2M1 straight to words: for row r (0: a, 1: b), word w's source byte (at byte 2w of a vpermb index;
  // odd bytes are zeroed by the mask) and the shift that brings its nibble to bits 0..3 (the other nibble may
  // stay in bits 4..7: the word table repeats at 16).
  alignas(64) uint8_t rec_byte[2][64];
  alignas(64) uint16_t rec_shift[2][32];
  alignas(64) uint16_t scale_idx[32];  // NVFP4 scales: word 2j + t <- column j (j < 8: word j, else 32 + j - 8)
  alignas(64) uint8_t column[64];      // NVFP4 scales: quad byte Q <- column c
  constexpr GatherTables()
      : e2m1_idx(), e2m1_shift(), fp6_nib_idx(), fp6_top_idx(), fp6_top_rotate(), e4m3_idx(), rec_byte(),
        rec_shift(), scale_idx(), column() {
    for (int q = 0; q < 64; ++q) {
      const int l = q / 16, h = (q / 8) % 2, i = q % 8;
      const int c = 4 * l + i / 2, kk = 2 * h + i % 2;
      const int base = 8 * (q % 8);  // the byte's own bit offset in its qword
      // fp_isa.hpp's quad records: nibble of (c, kk) low for kk < 2, high for kk >= 2.
      e2m1_idx[q] = static_cast<uint8_t>(16 * ((c % 8) / 4) + 8 * (c / 8) + 2 * (c % 4) + kk % 2);
      e2m1_shift[q] = static_cast<uint8_t>(base + 4 * (kk / 2));
      fp6_nib_idx[q] = static_cast<uint8_t>(16 * (c / 8) + 8 * (kk % 2) + c % 8);
      fp6_top_idx[q] = static_cast<uint8_t>(32 + 8 * (kk % 2) + c % 8);
      // the top two bits sit at bit 2 (2 (kk / 2) + c / 8) of their byte and land at bit 4
      if (q % 4 == 0) fp6_top_rotate[q / 4] = static_cast<uint32_t>((32 + 4 - 2 * (2 * (kk / 2) + c / 8)) % 32);
      e4m3_idx[q] = static_cast<uint8_t>(kk * 16 + c);
      column[q] = static_cast<uint8_t>(c);
    }
    for (int w = 0; w < 32; ++w) scale_idx[w] = static_cast<uint16_t>(w / 2 < 8 ? w / 2 : 32 + w / 2 - 8);
    // Row a's word w is quad byte Q = w + 8 (w / 8) (vpunpcklbw takes the low 8 bytes of each 16-byte lane),
    // row b's Q + 8.
    for (int r = 0; r < 2; ++r) {
      for (int w = 0; w < 32; ++w) {
        const int q = w + 8 * (w / 8) + 8 * r;
        rec_byte[r][2 * w] = e2m1_idx[q];
        rec_shift[r][w] = static_cast<uint16_t>(e2m1_shift[q] - 8 * (q % 8));
      }
    }
  }
};
inline constexpr GatherTables kGather;

// Decodes quads of layout L. A local object per decoded run, so that its tables stay in registers.
template <Layout L>
class QuadDecoder {
  static constexpr bool kE4M3 = L == Layout::kQuadE4M3 || L == Layout::kRecordE4M3;
  static constexpr bool kTable128 = kE4M3;

 public:
  QuadDecoder() {
    const DecodeTables& t = kDecodeTables;
    if constexpr (L == Layout::kQuadE2M1 || L == Layout::kRecordE2M1) {
      if constexpr (L == Layout::kQuadE2M1) {
        hi0_ = _mm512_load_si512(t.e2m1_hi);
        lo0_ = _mm512_load_si512(t.e2m1_lo);
      } else {
        hi0_ = _mm512_load_si512(t.e2m1_words);  // the word table (lo0_ unused)
        lo0_ = _mm512_setzero_si512();
        byte_a_ = _mm512_load_si512(kGather.rec_byte[0]);
        byte_b_ = _mm512_load_si512(kGather.rec_byte[1]);
        shift_a_ = _mm512_load_si512(kGather.rec_shift[0]);
        shift_b_ = _mm512_load_si512(kGather.rec_shift[1]);
      }
    } else {
      const uint8_t* hi = L == Layout::kRecordE2M3     ? t.e2m3_hi
                          : L == Layout::kRecordE3M2   ? t.e3m2_hi
                          : L == Layout::kRecordE2M1Nv ? t.nv_hi
                                                       : t.e4m3_hi;
      const uint8_t* lo = L == Layout::kRecordE2M3     ? t.e2m3_lo
                          : L == Layout::kRecordE3M2   ? t.e3m2_lo
                          : L == Layout::kRecordE2M1Nv ? t.nv_lo
                                                       : t.e4m3_lo;
      hi0_ = _mm512_load_si512(hi);
      lo0_ = _mm512_load_si512(lo);
      if constexpr (kTable128) {
        hi1_ = _mm512_load_si512(hi + 64);
        lo1_ = _mm512_load_si512(lo + 64);
      }
    }
  }

  // Quad at `src` (the layout's bytes of 4 k) -> rows a (k pair 2q) and b (2q + 1).
  void quad(const uint8_t* src, __m512i& a, __m512i& b) const {
    __m512i hi, lo;
    if constexpr (L == Layout::kQuadE2M1) {
      // Quad byte Q's code into the low nibble of byte Q (Q < 32: the low nibble of packed byte Q, else the high
      // nibble of byte Q - 32; the high nibble cleared: vpshufb reads bits 0..3 and zeroes a byte whose bit 7 is
      // set), then both BF16 bytes by vpshufb. On the 2-core Xeon, one thread over L2, the M = 1 stream's 64
      // codes took 5.7-6.0 TSC cycles against 6.2-6.9 with the word gathers below (vpermw alone issues about
      // one per 1.5 cycles there); kRecordE2M1's extra vpermb made the same decode slower than its gathers.
      __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
      x = _mm512_and_si512(_mm512_mask_srli_epi16(x, 0xFFFF0000u, x, 4), _mm512_set1_epi8(0x0F));
      hi = _mm512_shuffle_epi8(hi0_, x);
      lo = _mm512_shuffle_epi8(lo0_, x);
    } else if constexpr (L == Layout::kRecordE2M1) {
      // Each row's words gathered straight from the 32 bytes (vpermb, odd bytes zeroed), the nibble shifted to
      // the bottom (vpsrlvw), looked up as a word (vpermw): 4 shuffles per 64 codes instead of 5-6.
      const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
      constexpr __mmask64 kEven = 0x5555555555555555ull;
      a = _mm512_permutexvar_epi16(_mm512_srlv_epi16(_mm512_maskz_permutexvar_epi8(kEven, byte_a_, x), shift_a_), hi0_);
      b = _mm512_permutexvar_epi16(_mm512_srlv_epi16(_mm512_maskz_permutexvar_epi8(kEven, byte_b_, x), shift_b_), hi0_);
      return;
    } else if constexpr (L == Layout::kRecordE2M1Nv) {  // index (scale mantissa << 3) | magnitude, then the sign
      const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
      const __m512i codes = _mm512_multishift_epi64_epi8(ld(kGather.e2m1_shift), _mm512_permutexvar_epi8(ld(kGather.e2m1_idx), x));
      const __m512i idx = _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x07), codes, nv_m_, 0xEA);  // (codes & 7) | m
      const __m512i sign = _mm512_slli_epi16(codes, 4);  // each byte's bit 3 (the code's sign) to its bit 7
      hi = _mm512_ternarylogic_epi32(_mm512_permutexvar_epi8(idx, hi0_), sign, _mm512_set1_epi8(static_cast<char>(0x80)),
                                     0xF8);  // | (sign & 0x80)
      lo = _mm512_permutexvar_epi8(idx, lo0_);
    } else if constexpr (L == Layout::kRecordE2M3 || L == Layout::kRecordE3M2) {
      // Both fields gathered by vpermb, then moved by shifts (vpsrlw, vprolvd) rather than vpmultishiftqb: two
      // shuffle-port instructions fewer per 64 codes. On the 2-core Xeon, one thread over L2, the M = 1 stream's
      // 64 codes took 8.0 TSC cycles against 9.4 with vpmultishiftqb.
      const __m512i x = _mm512_maskz_loadu_epi8(0x0000FFFFFFFFFFFFull, src);  // 48 bytes
      __m512i nib = _mm512_permutexvar_epi8(ld(kGather.fp6_nib_idx), x);
      nib = _mm512_mask_srli_epi16(nib, 0xF0F0F0F0u, nib, 4);
      const __m512i top =
          _mm512_rolv_epi32(_mm512_permutexvar_epi8(ld(kGather.fp6_top_idx), x), ld(kGather.fp6_top_rotate));
      // nib : top; bits 6..7 keep whatever the rotation brought (vpermb reads the low 6 bits)
      const __m512i codes = _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), nib, top, 0xCA);
      hi = _mm512_permutexvar_epi8(codes, hi0_);
      lo = _mm512_permutexvar_epi8(codes, lo0_);
    } else {  // E4M3, 16 bytes per k
      __m512i x = _mm512_loadu_si512(src);
      if constexpr (L == Layout::kRecordE4M3) x = _mm512_permutexvar_epi8(ld(kGather.e4m3_idx), x);
      const __m512i m80 = _mm512_set1_epi8(static_cast<char>(0x80));
      hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0_, x, hi1_), x, m80, 0xF8);  // | (x & 0x80)
      lo = _mm512_permutex2var_epi8(lo0_, x, lo1_);
    }
    a = _mm512_unpacklo_epi8(lo, hi);
    b = _mm512_unpackhi_epi8(lo, hi);
  }

  // NVFP4 (kRecordE2M1Nv): the block scales s = (1 + m / 8) * 2^e of the next 16 k (4 quads) of a panel. The
  // quads then look up value(code) * (1 + m / 8) by (m, code), and nvfp4() adds e << 7 to the exponent of every
  // nonzero word (exact: normal BF16 values), flips the sign for a negative scale (adding 0x8000; the carry out of
  // bit 15 is dropped) and zeroes the columns whose scale is zero.
  struct NvScale {
    __m512i off;        // word 2j + t: column j's (e << 7) + (negative ? 0x8000 : 0)
    __mmask32 nonzero;  // words of columns whose scale is not zero
  };
  NvScale nv_scale(const uint8_t* codes16) {
    const DecodeTables& t = kDecodeTables;
    const __m512i x = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes16)));
    nv_m_ = _mm512_permutexvar_epi8(ld(kGather.column),
                                    _mm512_permutex2var_epi8(ld(t.sc_m), x, ld(t.sc_m + 64)));
    const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(ld(t.sc_e_hi), x, ld(t.sc_e_hi + 64)), x,
                                                _mm512_set1_epi8(static_cast<char>(0x80)), 0x78);  // ^ (x & 0x80)
    const __m512i l = _mm512_permutex2var_epi8(ld(t.sc_e_lo), x, ld(t.sc_e_lo + 64));
    NvScale r;
    // lane 0 of unpacklo: columns 0..7, of unpackhi: 8..15; word 2j + t <- column j
    r.off = _mm512_permutex2var_epi16(_mm512_unpacklo_epi8(l, h), ld(kGather.scale_idx), _mm512_unpackhi_epi8(l, h));
    uint32_t m = _mm512_test_epi8_mask(x, _mm512_set1_epi8(0x7F)) & 0xFFFFu;  // column j -> bits 2j, 2j + 1
    m = (m | (m << 8)) & 0x00FF00FFu;
    m = (m | (m << 4)) & 0x0F0F0F0Fu;
    m = (m | (m << 2)) & 0x33333333u;
    m = (m | (m << 1)) & 0x55555555u;
    r.nonzero = static_cast<__mmask32>(m | (m << 1));
    return r;
  }
  static __m512i nvfp4(__m512i w, const NvScale& sc) {
    const __mmask32 nz = _mm512_mask_test_epi16_mask(sc.nonzero, w, _mm512_set1_epi16(0x7FFF));
    return _mm512_maskz_add_epi16(nz, w, sc.off);
  }

 private:
  // A 64-byte table (constant: the compiler keeps it in a register across the decode loop).
  static __m512i ld(const void* table) { return _mm512_load_si512(table); }

  __m512i hi0_, hi1_ = _mm512_setzero_si512(), lo0_, lo1_ = _mm512_setzero_si512();
  __m512i byte_a_ = _mm512_setzero_si512(), byte_b_ = _mm512_setzero_si512();    // kRecordE2M1: word gathers
  __m512i shift_a_ = _mm512_setzero_si512(), shift_b_ = _mm512_setzero_si512();
  __m512i nv_m_ = _mm512_setzero_si512();  // NVFP4: quad byte Q <- (mantissa bits of column c(Q)'s scale) << 3
};

// How far ahead of the quad being decoded the decode loops prefetch the weights (and 256 bytes ahead, their
// group scales). The decode is ~10 vector instructions per 64 codes, so the reorder window alone keeps only
// ~1.5 KiB of loads in flight: without prefetch a stream larger than the caches waits on every new 4 KiB page
// (the hardware prefetchers stop at page boundaries). Measured on a 2-core Xeon, FP8 28672 x 4096 at M = 1,
// one thread: 17.5 ms per call without, 9 ms with (1-4 KiB ahead within the noise of a shared machine).
constexpr int64_t kDecodePrefetchBytes = 2048;

// The M = 1 streams' weight prefetches (amx_bf16_stream.cpp, amx_int_stream.cpp, where the numbers are): NV
// panels of `bytes` each, walked in steps of kLineQuads quads that cover whole 64-byte lines, one prefetch per
// line kDecodePrefetchBytes ahead. With next_group, prefetches past a panel's end go to the same panel of the
// next group (panel v's overrun lands in panel v + 1, the next group's panel v is NV - 1 further); without it,
// none go past the end.
template <int64_t kBytesPerK, int NV>
struct PanelLinePrefetch {
  static constexpr int64_t kLineQuads = 64 % (4 * kBytesPerK) == 0 ? 64 / (4 * kBytesPerK) : 4;  // E2M1 2, FP6 4
  static constexpr int kLines = static_cast<int>(kLineQuads * 4 * kBytesPerK / 64);
  int64_t bytes, skip, end;
  PanelLinePrefetch(int64_t panel_bytes, bool next_group)
      : bytes(panel_bytes), skip(next_group ? (NV - 1) * panel_bytes : 0), end(next_group ? INT64_MAX : panel_bytes) {}
  // The lines of the step that starts at quad q.
  void step(const uint8_t* const (&src)[NV], int64_t q) const {
    for (int l = 0; l < kLines; ++l) {
      const int64_t at = q * 4 * kBytesPerK + kDecodePrefetchBytes + 64 * l;
      if (at >= end) continue;
      const int64_t off = at < bytes ? at : at + skip;
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(src[v] + off), _MM_HINT_T0);
    }
  }
};

// MX: word offsets (e - 127) << 7 of the 16 columns of one block (E8M0 codes e16), each repeated for the two k
// of a pair; add_exponent adds them to every nonzero word (exact: process keeps the folded values normal).
inline __m512i mx_offsets(const uint8_t* e16) {
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e16));
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(e));
  const __m512i dup = _mm512_setr_epi32(0x00000000, 0x00010001, 0x00020002, 0x00030003, 0x00040004, 0x00050005,
                                        0x00060006, 0x00070007, 0x00080008, 0x00090009, 0x000A000A, 0x000B000B,
                                        0x000C000C, 0x000D000D, 0x000E000E, 0x000F000F);
  return _mm512_slli_epi16(_mm512_sub_epi16(_mm512_permutexvar_epi16(dup, w), _mm512_set1_epi16(127)), 7);
}

// MX: the f32 scales 2^(e - 127) of the 16 columns of one block (E8M0 codes e16; code 0 gives 0, which only
// an all-zero block can carry: process keeps every folded value normal).
inline __m512 mx_scale_f32(const uint8_t* e16) {
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e16));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(e), 23));
}

// NVFP4: the f32 values of the 16 columns' E4M3 block scales (codes e16, sign included): a normal code's bits
// moved into an f32 with the exponent rebased (+120); a subnormal one (exponent field 0, m * 2^-9) computed as
// (1 + m/8) * 2^-6 - 2^-6, exactly. Code 0x7F reads as 480, as the tile path's tables have it.
inline __m512 e4m3_scale_f32(const uint8_t* e16) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e16)));
  const __m512i mag = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x7F)), 20);
  const __mmask16 sub = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(8 << 20));
  __m512 v = _mm512_castsi512_ps(_mm512_add_epi32(mag, _mm512_set1_epi32(120 << 23)));
  v = _mm512_mask_sub_ps(v, sub, _mm512_castsi512_ps(_mm512_add_epi32(mag, _mm512_set1_epi32(121 << 23))),
                         _mm512_set1_ps(0x1p-6f));
  return _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(v), _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24)));
}

inline __m512i add_exponent(__m512i w, __m512i off) {
  return _mm512_mask_add_epi16(w, _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x7FFF)), w, off);
}

}  // namespace
}  // namespace qlinear::x86
