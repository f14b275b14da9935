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
// 128-bit lane yields a and b (lane l holds words 8l .. 8l + 7: columns 4l .. 4l + 3).
//
// Layouts (the byte offset of quad q of panel p):
//   kQuadE4M3   w8a16_isa.hpp's panels, already in quad order                     p * 16 * k_pad + q * 64
//   kQuadE2M1   the same, two E2M1 codes per byte (low nibbles, then high)          p * 8 * k_pad + q * 32
//   kRecordE4M3 fp_isa.hpp's code panels: a 16-byte record (byte j: column j) per k p * 16 * k_pad + q * 64
//   kRecordE2M1 8-byte records: byte i holds column i (low nibble) and i + 8 (high), stored code ^ 0xF
//                                                                                   p * 8 * k_pad + q * 32
//   kRecordE2M3 / kRecordE3M2  12-byte records: bytes 0..7 low nibbles (byte i: column 2i low, 2i + 1 high),
//               bytes 8..11 the top two bits (byte b, bits 2s..2s+1: column 4s + b)   p * 12 * k_pad + q * 48
// The record layouts are regathered into quad order by one vpermb per source field; vpmultishiftqb then moves
// each code's bits to the bottom of its byte (a nibble's shift, or a 2-bit field's shift, differs by column).
// Lookups: E4M3 -> two 128-entry vpermi2b tables (the sign OR-ed back); E2M1 in kQuadE2M1 -> 16-entry vpshufb
// tables; record FP4 / FP6 codes -> 64-entry vpermb tables (vpermb reads the low 6 bits, so the 4-bit FP4
// table is repeated four times and bits 6..7 of an FP6 byte need not be cleared).
#include <immintrin.h>

#include <cstdint>

namespace qlinear::x86 {
namespace {

enum class Layout : uint8_t { kQuadE4M3, kQuadE2M1, kRecordE4M3, kRecordE2M1, kRecordE2M3, kRecordE3M2 };

// Bytes per k of one panel (16 columns): where quad q of panel p starts.
constexpr int64_t layout_bytes_per_k(Layout l) {
  return l == Layout::kQuadE2M1 || l == Layout::kRecordE2M1 ? 8 : (l == Layout::kRecordE2M3 || l == Layout::kRecordE3M2) ? 12 : 16;
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
  alignas(64) uint8_t e2m1_hi[64], e2m1_lo[64];    // kQuadE2M1: code i % 16 (vpshufb, per lane)
  alignas(64) uint8_t rec_e2m1_hi[64], rec_e2m1_lo[64];  // kRecordE2M1: stored (i % 16) = code ^ 0xF
  alignas(64) uint8_t e2m3_hi[64], e2m3_lo[64], e3m2_hi[64], e3m2_lo[64];
  constexpr DecodeTables()
      : e4m3_hi(), e4m3_lo(), e2m1_hi(), e2m1_lo(), rec_e2m1_hi(), rec_e2m1_lo(), e2m3_hi(), e2m3_lo(), e3m2_hi(),
        e3m2_lo() {
    for (int c = 0; c < 128; ++c) {
      e4m3_hi[c] = static_cast<uint8_t>(float_code_bf16(c, 4, 3) >> 8);
      e4m3_lo[c] = static_cast<uint8_t>(float_code_bf16(c, 4, 3) & 0xFF);
    }
    for (int i = 0; i < 64; ++i) {
      const uint16_t f4 = float_code_bf16(i % 16, 2, 1), r4 = float_code_bf16((i % 16) ^ 0xF, 2, 1);
      const uint16_t f6a = float_code_bf16(i, 2, 3), f6b = float_code_bf16(i, 3, 2);
      e2m1_hi[i] = static_cast<uint8_t>(f4 >> 8);
      e2m1_lo[i] = static_cast<uint8_t>(f4 & 0xFF);
      rec_e2m1_hi[i] = static_cast<uint8_t>(r4 >> 8);
      rec_e2m1_lo[i] = static_cast<uint8_t>(r4 & 0xFF);
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

// vpermb / vpmultishiftqb controls that bring one record layout into quad order. For quad byte Q = 16l + 8h + i:
// column c = 4l + i/2, record kk = 2h + i%2.
struct RecordGather {
  __m512i e2m1_idx, e2m1_shift;    // byte kk*8 + c%8, nibble c/8
  __m512i fp6_nib_idx, fp6_nib_shift;  // byte kk*12 + c/2, nibble c%2
  __m512i fp6_top_idx, fp6_top_shift;  // byte kk*12 + 8 + c%4, bits 2(c/4), moved to bits 4..5
  __m512i e4m3_idx;                // byte kk*16 + c
  RecordGather() {
    alignas(64) uint8_t t[7][64];
    for (int q = 0; q < 64; ++q) {
      const int l = q / 16, h = (q / 8) % 2, i = q % 8;
      const int c = 4 * l + i / 2, kk = 2 * h + i % 2;
      const int base = 8 * (q % 8);  // the byte's own bit offset in its qword
      t[0][q] = static_cast<uint8_t>(kk * 8 + c % 8);
      t[1][q] = static_cast<uint8_t>(base + 4 * (c / 8));
      t[2][q] = static_cast<uint8_t>(kk * 12 + c / 2);
      t[3][q] = static_cast<uint8_t>(base + 4 * (c % 2));
      t[4][q] = static_cast<uint8_t>(kk * 12 + 8 + c % 4);
      t[5][q] = static_cast<uint8_t>((base + 2 * (c / 4) + 60) % 64);  // bit 2(c/4) lands at bit 4
      t[6][q] = static_cast<uint8_t>(kk * 16 + c);
    }
    e2m1_idx = _mm512_load_si512(t[0]);
    e2m1_shift = _mm512_load_si512(t[1]);
    fp6_nib_idx = _mm512_load_si512(t[2]);
    fp6_nib_shift = _mm512_load_si512(t[3]);
    fp6_top_idx = _mm512_load_si512(t[4]);
    fp6_top_shift = _mm512_load_si512(t[5]);
    e4m3_idx = _mm512_load_si512(t[6]);
  }
};

// Decodes quads of one layout; constructed once per thread item (tables in registers / L1).
class QuadDecoder {
 public:
  explicit QuadDecoder(Layout layout) : layout_(layout) {
    const DecodeTables& t = kDecodeTables;
    switch (layout) {
      case Layout::kQuadE2M1:
        hi0_ = _mm512_load_si512(t.e2m1_hi);
        lo0_ = _mm512_load_si512(t.e2m1_lo);
        break;
      case Layout::kRecordE2M1:
        hi0_ = _mm512_load_si512(t.rec_e2m1_hi);
        lo0_ = _mm512_load_si512(t.rec_e2m1_lo);
        break;
      case Layout::kRecordE2M3:
        hi0_ = _mm512_load_si512(t.e2m3_hi);
        lo0_ = _mm512_load_si512(t.e2m3_lo);
        break;
      case Layout::kRecordE3M2:
        hi0_ = _mm512_load_si512(t.e3m2_hi);
        lo0_ = _mm512_load_si512(t.e3m2_lo);
        break;
      default:
        hi0_ = _mm512_load_si512(t.e4m3_hi);
        hi1_ = _mm512_load_si512(t.e4m3_hi + 64);
        lo0_ = _mm512_load_si512(t.e4m3_lo);
        lo1_ = _mm512_load_si512(t.e4m3_lo + 64);
        break;
    }
  }

  // Quad at `src` (the layout's bytes of 4 k) -> rows a (k pair 2q) and b (2q + 1).
  void quad(const uint8_t* src, __m512i& a, __m512i& b) const {
    __m512i hi, lo;
    switch (layout_) {
      case Layout::kQuadE2M1: {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
        const __m256i m0f = _mm256_set1_epi8(0x0F);
        const __m256i lo4 = _mm256_and_si256(x, m0f), hi4 = _mm256_and_si256(_mm256_srli_epi16(x, 4), m0f);
        const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(lo4), hi4, 1);
        hi = _mm512_shuffle_epi8(hi0_, idx);
        lo = _mm512_shuffle_epi8(lo0_, idx);
        break;
      }
      case Layout::kRecordE2M1: {
        const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
        const __m512i codes =
            _mm512_multishift_epi64_epi8(gather_.e2m1_shift, _mm512_permutexvar_epi8(gather_.e2m1_idx, x));
        hi = _mm512_permutexvar_epi8(codes, hi0_);
        lo = _mm512_permutexvar_epi8(codes, lo0_);
        break;
      }
      case Layout::kRecordE2M3:
      case Layout::kRecordE3M2: {
        const __m512i x = _mm512_maskz_loadu_epi8(0x0000FFFFFFFFFFFFull, src);  // 48 bytes
        const __m512i nib =
            _mm512_multishift_epi64_epi8(gather_.fp6_nib_shift, _mm512_permutexvar_epi8(gather_.fp6_nib_idx, x));
        const __m512i top =
            _mm512_multishift_epi64_epi8(gather_.fp6_top_shift, _mm512_permutexvar_epi8(gather_.fp6_top_idx, x));
        const __m512i codes = _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), nib, top, 0xCA);  // nib : top
        hi = _mm512_permutexvar_epi8(codes, hi0_);
        lo = _mm512_permutexvar_epi8(codes, lo0_);
        break;
      }
      default: {  // E4M3, 16 bytes per k
        __m512i x = _mm512_loadu_si512(src);
        if (layout_ == Layout::kRecordE4M3) x = _mm512_permutexvar_epi8(gather_.e4m3_idx, x);
        const __m512i m80 = _mm512_set1_epi8(static_cast<char>(0x80));
        hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0_, x, hi1_), x, m80, 0xF8);  // | (x & 0x80)
        lo = _mm512_permutex2var_epi8(lo0_, x, lo1_);
        break;
      }
    }
    a = _mm512_unpacklo_epi8(lo, hi);
    b = _mm512_unpackhi_epi8(lo, hi);
  }

  // 16 E4M3 codes (one scale per column, NVFP4's block scales) -> f32 for the words of a B-tile row: s_lo
  // lane w = scale of column w / 2 (words 0..15), s_hi lane w = scale of column 8 + w / 2 (words 16..31).
  void e4m3_scales(const uint8_t* codes16, __m512& s_lo, __m512& s_hi) const {
    const __m512i x = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes16)));
    const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0_e4m3(), x, hi1_e4m3()), x,
                                                _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
    const __m512i l = _mm512_permutex2var_epi8(lo0_e4m3(), x, lo1_e4m3());
    const __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);  // lane 0: columns 0..7, 8..15
    // The scale word to the high half of each dword (an f32 with zero low half); even words zeroed.
    s_lo = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi16(0xAAAAAAAAu, w0, scale_idx_lo_, w1));
    s_hi = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi16(0xAAAAAAAAu, w0, scale_idx_hi_, w1));
  }

 private:
  static __m512i hi0_e4m3() { return _mm512_load_si512(kDecodeTables.e4m3_hi); }
  static __m512i hi1_e4m3() { return _mm512_load_si512(kDecodeTables.e4m3_hi + 64); }
  static __m512i lo0_e4m3() { return _mm512_load_si512(kDecodeTables.e4m3_lo); }
  static __m512i lo1_e4m3() { return _mm512_load_si512(kDecodeTables.e4m3_lo + 64); }
  // Odd word 2w + 1 <- column w / 2 (lo) or 8 + w / 2 (hi): word c of w0 for c < 8, word 32 + c - 8 of w1.
  static __m512i scale_idx(int first_col) {
    alignas(64) uint16_t idx[32] = {};
    for (int w = 0; w < 16; ++w) {
      const int c = first_col + w / 2;
      idx[2 * w + 1] = static_cast<uint16_t>(c < 8 ? c : 32 + c - 8);
    }
    return _mm512_load_si512(idx);
  }

  Layout layout_;
  __m512i hi0_, hi1_ = _mm512_setzero_si512(), lo0_, lo1_ = _mm512_setzero_si512();
  RecordGather gather_;
  __m512i scale_idx_lo_ = scale_idx(0), scale_idx_hi_ = scale_idx(8);
};

}  // namespace
}  // namespace qlinear::x86
