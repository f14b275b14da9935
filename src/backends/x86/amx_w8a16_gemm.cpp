// x86_amx_bf16_*_w*a16: FP8 (E4M3, MXFP8) and FP4 (MXFP4) weights x BF16 activations on AMX-BF16 tiles
// (tdpbf16ps: 16 x 16 x 32 BF16 products per instruction, f32 accumulation).
//
// Per thread, for each block of 2 panels (32 output columns) of its share:
//   decode the block's codes to BF16 VNNI-2 rows (the B tile layout, amx_isa.hpp) in a per-thread scratch:
//     one M block (M <= 32): K in chunks of 256 (16 KiB, L1), each chunk multiplied at once, the four f32
//       accumulator tiles held across chunks;
//     several M blocks: the whole K (64 * K bytes, L2), decoded once and reused by every 32-row block;
//   per 32-row block: C0..C3 = 0, per 32-wide k step A0, A1, B0, B1 and 4 tdpbf16ps; the 32 x 32 f32 sums
//   then get the per-column scale and bias and are rounded to the output type while in L1.
// FP8 W8A8 and MXFP8 (fp8_records_gemm_amx): the same on fp_isa.hpp's E4M3 record panels, one vpermb regrouping four
// records into a quad before the decode, activations the quantized codes' exact values as BF16.
// Decode (AVX-512 VBMI): E4M3 byte -> the BF16 (hi, lo) bytes by two 128-entry vpermi2b tables (the sign bit
// is OR-ed back), E2M1 nibble -> (hi, lo) by 16-entry vpshufb tables; vpunpck{l,h}bw interleaves them into the
// two k-pair rows of a quad (the swizzle of w8a16_isa.hpp). MX: (e - 127) << 7 added to every nonzero word.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "backends/x86/amx_isa.hpp"
#include "backends/x86/amx_share.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

// What both entry points describe: the weight layout, scales, activations and output.
enum class Layout : uint8_t {
  kQuadE4M3,    // w8a16_isa.hpp's swizzled quads of E4M3 codes
  kQuadE2M1,    // the same quads, two E2M1 codes per byte
  kRecordE4M3,  // fp_isa.hpp's code panels: one 16-byte record (16 columns) per k
};

struct Job {
  const uint8_t* packed = nullptr;
  Layout layout = Layout::kQuadE4M3;
  int64_t n = 0, n_pad = 0, k_pad = 0;
  const uint8_t* mx_scale = nullptr;   // [n_pad/16][k_pad/32][16] E8M0 codes, folded; or null
  const float* col_scale = nullptr;    // [n_pad] or null (1)
  const float* row_scale = nullptr;    // [m] or null (1)
  const float* bias = nullptr;         // [n] or null
  const float* col_nan = nullptr;      // [n_pad] 0 or NaN, or null
  const uint16_t* act = nullptr;       // BF16 [round_up(m, 16), lda], zeros past k
  int64_t lda = 0;
  int64_t m = 0;
  void* out = nullptr;
  FloatKind out_kind = FloatKind::kBF16;
  int threads = 1;
};

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12 does not see that ldtilecfg reads cfg and may drop the stores above: make them observable.
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// BF16 bits of E4M3 magnitude code c (0..127; 127 is NaN, which such layers never reach: exact path).
constexpr uint16_t e4m3_bf16(int c) {
  const int e = c >> 3, m = c & 7;
  if (e > 0) return static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
  if (m == 0) return 0;
  const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m * 2^-9 = (m / 2^p) * 2^(p - 9)
  return static_cast<uint16_t>(((118 + p) << 7) | ((m - (1 << p)) << (7 - p)));
}

// BF16 bits of E2M1 code c (0..15, bit 3 the sign).
constexpr uint16_t e2m1_bf16(int c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const uint16_t s = (c & 8) ? 0x8000 : 0;
  if (e == 0) return m ? static_cast<uint16_t>(s | (126 << 7)) : s;
  return static_cast<uint16_t>(s | ((126 + e) << 7) | (m << 6));
}

struct Tables {
  alignas(64) uint8_t e4m3_hi[128], e4m3_lo[128], e2m1_hi[64], e2m1_lo[64];
  constexpr Tables() : e4m3_hi(), e4m3_lo(), e2m1_hi(), e2m1_lo() {
    for (int c = 0; c < 128; ++c) {
      e4m3_hi[c] = static_cast<uint8_t>(e4m3_bf16(c) >> 8);
      e4m3_lo[c] = static_cast<uint8_t>(e4m3_bf16(c) & 0xFF);
    }
    for (int i = 0; i < 64; ++i) {  // the 16 entries repeated in each 128-bit lane (vpshufb)
      e2m1_hi[i] = static_cast<uint8_t>(e2m1_bf16(i % 16) >> 8);
      e2m1_lo[i] = static_cast<uint8_t>(e2m1_bf16(i % 16) & 0xFF);
    }
  }
};
constexpr Tables kTables;

struct Decoder {
  __m512i h0 = _mm512_loadu_si512(kTables.e4m3_hi), h1 = _mm512_loadu_si512(kTables.e4m3_hi + 64);
  __m512i l0 = _mm512_loadu_si512(kTables.e4m3_lo), l1 = _mm512_loadu_si512(kTables.e4m3_lo + 64);
  __m512i f4h = _mm512_loadu_si512(kTables.e2m1_hi), f4l = _mm512_loadu_si512(kTables.e2m1_lo);
  __m512i m80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m256i m0f = _mm256_set1_epi8(0x0F);
  // Records -> quad swizzle: quad byte 16l + 8h + i is column 4l + i/2 at k offset 2h + i%2, which in four
  // records (16 bytes per k) is byte 16 (2h + i%2) + 4l + i/2.
  __m512i to_quad = [] {
    alignas(64) uint8_t idx[64];
    for (int l = 0; l < 4; ++l)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 8; ++i) idx[16 * l + 8 * h + i] = static_cast<uint8_t>(16 * (2 * h + i % 2) + 4 * l + i / 2);
    return _mm512_load_si512(idx);
  }();

  // Quad q (k = 4q .. 4q + 3) of panel p -> rows 2q (a) and 2q + 1 (b) of the panel's VNNI-2 B tile.
  void quad(const Job& g, int64_t p, int64_t q, __m512i& a, __m512i& b) const {
    __m512i hi, lo;
    if (g.layout == Layout::kQuadE2M1) {
      const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(g.packed + p * 8 * g.k_pad + q * 32));
      const __m256i lo4 = _mm256_and_si256(x, m0f);
      const __m256i hi4 = _mm256_and_si256(_mm256_srli_epi16(x, 4), m0f);
      const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(lo4), hi4, 1);
      hi = _mm512_shuffle_epi8(f4h, idx);
      lo = _mm512_shuffle_epi8(f4l, idx);
    } else {
      __m512i x = _mm512_load_si512(g.packed + p * 16 * g.k_pad + q * 64);  // both E4M3 layouts: 16 B per k
      if (g.layout == Layout::kRecordE4M3) x = _mm512_permutexvar_epi8(to_quad, x);
      hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(h0, x, h1), x, m80, 0xF8);  // | (x & 0x80)
      lo = _mm512_permutex2var_epi8(l0, x, l1);
    }
    a = _mm512_unpacklo_epi8(lo, hi);
    b = _mm512_unpackhi_epi8(lo, hi);
  }
};

// Word offsets (e - 127) << 7 of the 16 columns of one MX block, each repeated for the two k of a pair.
__m512i mx_offsets(const uint8_t* e16) {
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e16))));
  const __m512i dup = _mm512_setr_epi32(0x00000000, 0x00010001, 0x00020002, 0x00030003, 0x00040004, 0x00050005,
                                        0x00060006, 0x00070007, 0x00080008, 0x00090009, 0x000A000A, 0x000B000B,
                                        0x000C000C, 0x000D000D, 0x000E000E, 0x000F000F);
  return _mm512_slli_epi16(_mm512_sub_epi16(_mm512_permutexvar_epi16(dup, w), _mm512_set1_epi16(127)), 7);
}

__m512i add_exponent(__m512i w, __m512i off) {
  return _mm512_mask_add_epi16(w, _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x7FFF)), w, off);
}

// Quads [q0, q1) of panel p into dst[(q - q0) * 2 + {0, 1}][32 words].
void decode_panel(const Job& g, const Decoder& dec, int64_t p, int64_t q0, int64_t q1, uint16_t* dst) {
  const bool mx = g.mx_scale != nullptr;
  __m512i off = _mm512_setzero_si512();
  for (int64_t q = q0; q < q1; ++q) {
    if (mx && (q % 8 == 0 || q == q0)) off = mx_offsets(g.mx_scale + (p * (g.k_pad / 32) + q / 8) * 16);
    __m512i a, b;
    dec.quad(g, p, q, a, b);
    if (mx) {
      a = add_exponent(a, off);
      b = add_exponent(b, off);
    }
    _mm512_store_si512(dst + (q - q0) * 64, a);
    _mm512_store_si512(dst + (q - q0) * 64 + 32, b);
  }
}

constexpr int64_t kBlock = 32;        // rows and columns of one output block
constexpr int64_t kChunkK = 256;      // one-M-block path: k per decoded chunk
constexpr int64_t kOuterChunkK = 1024;  // K-outer path: k per decoded chunk
constexpr int64_t kActL2Bytes = int64_t{1} << 20;  // activation rows beyond this (half the L2): K outer

// Accumulates k in [0, kk) of one block: a (BF16 rows, stride lda elements), w0 / w1 (VNNI-2 rows of the
// two panels, 32 words each). Tiles 0..3 hold the sums across calls.
template <bool kTwoRows, bool kTwoCols>
void multiply(const uint16_t* a, int64_t lda, const uint16_t* w0, const uint16_t* w1, int64_t kk) {
  for (int64_t k = 0; k < kk; k += 32) {
    _tile_loadd(4, a + k, lda * 2);
    if (kTwoRows) _tile_loadd(5, a + 16 * lda + k, lda * 2);
    _tile_loadd(6, w0 + k * 16, 64);  // pair k/2 at word (k/2) * 32
    if (kTwoCols) _tile_loadd(7, w1 + k * 16, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (kTwoCols) _tile_dpbf16ps(1, 4, 7);
    if (kTwoRows) _tile_dpbf16ps(2, 5, 6);
    if (kTwoRows && kTwoCols) _tile_dpbf16ps(3, 5, 7);
  }
}

using Multiply = void (*)(const uint16_t*, int64_t, const uint16_t*, const uint16_t*, int64_t);

Multiply pick(bool two_rows, bool two_cols) {
  return two_rows ? (two_cols ? multiply<true, true> : multiply<true, false>)
                  : (two_cols ? multiply<false, true> : multiply<false, false>);
}

void zero_tiles() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// Tiles 0..3 to / from a 32 x 32 block of f32 sums at c (row stride ldc floats).
void store_tiles(float* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

void load_tiles(const float* c, int64_t ldc) {
  _tile_loadd(0, c, ldc * 4);
  _tile_loadd(1, c + 16, ldc * 4);
  _tile_loadd(2, c + 16 * ldc, ldc * 4);
  _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
}

// Sums c (row stride ldc) -> y = c * (row_scale[m] * col_scale[n]) + bias[n] (+ col_nan[n]) for rows m0..
// (rows) and columns n0.. (cols).
void epilogue(const Job& g, const float* c, int64_t ldc, int64_t m0, int64_t rows, int64_t n0, int64_t cols) {
  const float* col_scale = g.col_scale;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; j += 16) {
      const int64_t len = cols - j < 16 ? cols - j : 16;
      const __mmask16 mask = static_cast<__mmask16>((1u << len) - 1);
      __m512 y = _mm512_load_ps(c + r * ldc + j);
      const __m512 b = g.bias ? _mm512_maskz_loadu_ps(mask, g.bias + n0 + j) : _mm512_setzero_ps();
      if (g.row_scale != nullptr) {
        const __m512 rs = _mm512_set1_ps(g.row_scale[m0 + r]);
        const __m512 s = col_scale ? _mm512_mul_ps(rs, _mm512_maskz_loadu_ps(mask, col_scale + n0 + j)) : rs;
        y = _mm512_fmadd_ps(y, s, b);
      } else {
        y = col_scale ? _mm512_fmadd_ps(y, _mm512_maskz_loadu_ps(mask, col_scale + n0 + j), b) : _mm512_add_ps(y, b);
      }
      if (g.col_nan != nullptr) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, g.col_nan + n0 + j));
      const int64_t o = (m0 + r) * g.n + n0 + j;
      switch (g.out_kind) {
        case FloatKind::kF32: _mm512_mask_storeu_ps(static_cast<float*>(g.out) + o, mask, y); break;
        case FloatKind::kBF16:
          _mm256_mask_storeu_epi16(static_cast<uint16_t*>(g.out) + o, mask, (__m256i)_mm512_cvtneps_pbh(y));
          break;
        case FloatKind::kF16:
          _mm256_mask_storeu_epi16(static_cast<uint16_t*>(g.out) + o, mask,
                                   _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
          break;
      }
    }
  }
}

// Rows [m_begin, m_end) (m_begin a multiple of 16) x column blocks [b_begin, b_end); scratch holds 2 panels
// of K words (whole-K path) or of kChunkK (one-M-block path).
void run_range(const Job& g, uint16_t* scratch, float* c, int64_t m_begin, int64_t m_end, int64_t b_begin,
               int64_t b_end) {
  const Decoder dec;
  const int64_t panels = g.n_pad / 16, quads = g.k_pad / 4;
  const bool one_block = m_end - m_begin <= kBlock;
  for (int64_t blk = b_begin; blk < b_end; ++blk) {
    const int64_t p0 = blk * 2;
    const bool two_cols = p0 + 1 < panels;
    const int64_t n0 = p0 * 16;
    const int64_t cols = g.n - n0 < kBlock ? g.n - n0 : kBlock;
    if (one_block) {
      const int64_t rows = m_end - m_begin;
      const Multiply mul = pick(rows > 16, two_cols);
      uint16_t* w1 = scratch + kChunkK * 16;
      zero_tiles();
      for (int64_t q0 = 0; q0 < quads; q0 += kChunkK / 4) {
        const int64_t q1 = q0 + kChunkK / 4 < quads ? q0 + kChunkK / 4 : quads;
        decode_panel(g, dec, p0, q0, q1, scratch);
        if (two_cols) decode_panel(g, dec, p0 + 1, q0, q1, w1);
        mul(g.act + m_begin * g.lda + q0 * 4, g.lda, scratch, w1, (q1 - q0) * 4);
      }
      store_tiles(c, kBlock);
      epilogue(g, c, kBlock, m_begin, rows, n0, cols);
      continue;
    }
    uint16_t* w1 = scratch + g.k_pad * 16;
    decode_panel(g, dec, p0, 0, quads, scratch);
    if (two_cols) decode_panel(g, dec, p0 + 1, 0, quads, w1);
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlock) {
      const int64_t rows = m_end - m0 < kBlock ? m_end - m0 : kBlock;
      zero_tiles();
      pick(rows > 16, two_cols)(g.act + m0 * g.lda, g.lda, scratch, w1, g.k_pad);
      store_tiles(c, kBlock);
      epilogue(g, c, kBlock, m0, rows, n0, cols);
    }
  }
}

// Activations too large for L2 (many rows x long K): K outer, in chunks of kOuterChunkK, so that a chunk of
// the activation rows stays in L2 across every column block; each block's f32 sums live in `sums`
// ([round_up(rows, 32)][blocks * 32]) between chunks. scratch holds 2 panels of kOuterChunkK.
void run_k_outer(const Job& g, uint16_t* scratch, float* sums, int64_t m_begin, int64_t m_end, int64_t b_begin,
                 int64_t b_end) {
  const Decoder dec;
  const int64_t panels = g.n_pad / 16, quads = g.k_pad / 4;
  const int64_t ldsum = (b_end - b_begin) * kBlock;
  uint16_t* w1 = scratch + kOuterChunkK * 16;
  for (int64_t q0 = 0; q0 < quads; q0 += kOuterChunkK / 4) {
    const int64_t q1 = q0 + kOuterChunkK / 4 < quads ? q0 + kOuterChunkK / 4 : quads;
    for (int64_t blk = b_begin; blk < b_end; ++blk) {
      const int64_t p0 = blk * 2;
      const bool two_cols = p0 + 1 < panels;
      decode_panel(g, dec, p0, q0, q1, scratch);
      if (two_cols) decode_panel(g, dec, p0 + 1, q0, q1, w1);
      for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlock) {
        float* s = sums + (m0 - m_begin) * ldsum + (blk - b_begin) * kBlock;
        if (q0 == 0) {
          zero_tiles();
        } else {
          load_tiles(s, ldsum);
        }
        pick(m_end - m0 > 16, two_cols)(g.act + m0 * g.lda + q0 * 4, g.lda, scratch, w1, (q1 - q0) * 4);
        store_tiles(s, ldsum);
      }
    }
  }
  for (int64_t blk = b_begin; blk < b_end; ++blk) {
    const int64_t n0 = blk * kBlock;
    const int64_t cols = g.n - n0 < kBlock ? g.n - n0 : kBlock;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlock) {
      const int64_t rows = m_end - m0 < kBlock ? m_end - m0 : kBlock;
      epilogue(g, sums + (m0 - m_begin) * ldsum + (blk - b_begin) * kBlock, ldsum, m0, rows, n0, cols);
    }
  }
}

void run(const Job& g) {
  const int64_t blocks = (g.n_pad / 16 + 1) / 2;
  const int64_t work = g.m * g.n_pad * g.k_pad;
  const int n_threads = work < (int64_t{1} << 18) ? 1 : g.threads;
  // One item per thread's share (the pool may run several items on one thread; each configures its tiles).
  const int64_t nt = n_threads;
  threads::parallel_for(nt, n_threads, [&](int64_t t) {
    const AmxShare sh = amx_share(t, nt, g.m, blocks, kBlock);
    const int64_t m0 = sh.m0, m1 = sh.m1, b0 = sh.b0, b1 = sh.b1;
    if (!sh.empty()) {
      const bool k_outer = m1 - m0 > kBlock && (m1 - m0) * g.k_pad * 2 > kActL2Bytes;
      const int64_t k_words = m1 - m0 <= kBlock ? kChunkK : k_outer ? kOuterChunkK : g.k_pad;
      // The claiming thread's buffers (threads::scratch), kept across calls.
      uint16_t* scratch = static_cast<uint16_t*>(threads::scratch(0, 2 * k_words * 32));
      const int64_t c_floats = k_outer ? (m1 - m0 + kBlock - 1) / kBlock * kBlock * (b1 - b0) * kBlock : kBlock * kBlock;
      float* c = static_cast<float*>(threads::scratch(1, c_floats * 4));
      configure_tiles();
      if (k_outer) {
        run_k_outer(g, scratch, c, m0, m1, b0, b1);
      } else {
        run_range(g, scratch, c, m0, m1, b0, b1);
      }
      _tile_release();
    }
  });
}

}  // namespace

void w8a16_gemm_amx(const W8A16Gemm& w) {
  Job g;
  g.packed = w.packed;
  g.layout = w.elem == W8Elem::kE2M1 ? Layout::kQuadE2M1 : Layout::kQuadE4M3;
  g.n = w.n;
  g.n_pad = w.n_pad;
  g.k_pad = w.k_pad;
  g.mx_scale = w.mode == W8ScaleMode::kMx ? w.mx_scale : nullptr;
  g.col_scale = w.mode == W8ScaleMode::kPerColumn ? w.col_scale : nullptr;
  g.bias = w.bias;
  g.act = w.act;
  g.lda = w.lda;
  g.m = w.m;
  g.out = w.out;
  g.out_kind = w.out_kind;
  g.threads = w.threads;
  run(g);
}

bool fp8_records_gemm_amx(const FpGemm& f) {
  // f32 -> BF16 by dropping the low halves, which must be zero (exact); rows up to a multiple of 16 zero.
  const int64_t m_rows = (f.m + 15) / 16 * 16;
  uint16_t* act = static_cast<uint16_t*>(std::aligned_alloc(64, static_cast<size_t>(m_rows * f.k_pad * 2)));
  __m512i inexact = _mm512_setzero_si512();
  const int64_t total = f.m * f.k_pad;  // k_pad % 32 == 0
  for (int64_t i = 0; i < total; i += 16) {
    const __m512i v = _mm512_loadu_si512(f.act + i);
    inexact = _mm512_or_si512(inexact, _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(act + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
  }
  std::memset(act + total, 0, static_cast<size_t>((m_rows - f.m) * f.k_pad * 2));
  if (_mm512_test_epi32_mask(inexact, inexact) != 0) {
    std::free(act);
    return false;
  }
  Job g;
  g.packed = f.packed;
  g.layout = Layout::kRecordE4M3;
  g.n = f.n;
  g.n_pad = f.n_pad;
  g.k_pad = f.k_pad;
  g.mx_scale = f.group_scale == FpGroupScale::kE8M0 ? f.grp : nullptr;  // same [p][k/32][16] layout
  g.col_scale = f.col_scale;
  g.row_scale = f.row_scale;
  g.bias = f.bias;
  g.col_nan = f.col_nan;
  g.act = act;
  g.lda = f.k_pad;
  g.m = f.m;
  g.out = f.out;
  g.out_kind = f.out_kind;
  g.threads = f.threads;
  run(g);
  std::free(act);
  return true;
}

}  // namespace qlinear::x86
