// The AMX-BF16 GEMM of every FP8 / MX / NVFP4 weight format (tdpbf16ps: 16 x 16 x 32 BF16 products per
// instruction, f32 accumulation): x86_amx_bf16_{fp8,mxfp8}_w8a16, x86_amx_bf16_mxfp4_w4a16 (w8a16_isa.hpp's
// quad panels, BF16 activations) and x86_amx_bf16_{fp8_scaled_mm, mxfp8, mxfp6, mxfp4, nvfp4} (fp_isa.hpp's
// code panels; activations BF16, or quantized as the reference does and handed over as their exact values).
//
// M below kAmxBf16MinM streams the weights through vdpbf16ps instead (amx_bf16_stream.cpp, same decoders).
// Per thread, for each block of 2 panels (32 output columns) of its share:
//   decode the block's codes to BF16 VNNI-2 rows (the B tile layout, amx_isa.hpp; amx_bf16_decode.hpp) in a
//   per-thread scratch:
//     one M block (M <= 32): a software pipeline over 32-k steps, each step decoded into a ring (16 KiB, L1)
//       and multiplied 2 steps later, the f32 accumulator tiles held across steps; up to 16 rows, two blocks
//       (4 panels, 64 columns) at once;
//     several M blocks: the whole K (64 * K bytes, L2), decoded once and reused by every 32-row block;
//   per 32-row block: C0..C3 = 0, per 32-wide k step A0, A1, B0, B1 and 4 tdpbf16ps; the 32 x 32 f32 sums
//   then get the per-row / per-column scales and bias and are rounded to the output type while in L1.
// Group scales in the decode: MX E8M0 adds (e - 127) << 7 to every nonzero word (exact: process keeps the
// folded values normal); NVFP4's E4M3 per 1x16 multiplies the words in f32 (exact: <= 6 significant bits).
// Activations: every quantized code of these formats times its E8M0 / E4M3 group scale is a BF16 value too,
// so every product is exact and the result differs from the reference only by the f32 summation order.
#include <immintrin.h>

// GCC 12 reports the intrinsics' own "undefined" pass-through operands (_mm512_undefined_*) as maybe
// uninitialized once they are inlined here; every vector in this file is written before it is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdlib>
#include <cstring>

#include "backends/x86/amx_bf16_decode.hpp"
#include "backends/x86/amx_bf16_job.hpp"
#include "backends/x86/amx_isa.hpp"
#include "backends/x86/amx_share.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

using Job = Bf16Job;

template <Layout L>
void decode_panel(const Job& g, int64_t p, int64_t q0, int64_t q1, uint16_t* dst) {
  constexpr int64_t bpk = layout_bytes_per_k(L);
  QuadDecoder<L> dec;
  const uint8_t* src = g.packed + p * bpk * g.k_pad;
  if constexpr (L == Layout::kRecordE2M1Nv) {  // NVFP4: E4M3 scale per 16 k (4 quads) and column
    typename QuadDecoder<L>::NvScale sc{};
    for (int64_t q = q0; q < q1; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(src + q * 4 * bpk + kDecodePrefetchBytes), _MM_HINT_T0);
      if (q % 4 == 0 || q == q0) {
        const uint8_t* codes = g.nv_scale + (p * (g.k_pad / 16) + q / 4) * 16;
        _mm_prefetch(reinterpret_cast<const char*>(codes + 256), _MM_HINT_T0);
        sc = dec.nv_scale(codes);
      }
      __m512i a, b;
      dec.quad(src + q * 4 * bpk, a, b);
      _mm512_store_si512(dst + (q - q0) * 64, QuadDecoder<L>::nvfp4(a, sc));
      _mm512_store_si512(dst + (q - q0) * 64 + 32, QuadDecoder<L>::nvfp4(b, sc));
    }
  } else {
    const bool mx = g.mx_scale != nullptr;
    __m512i off = _mm512_setzero_si512();
    for (int64_t q = q0; q < q1; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(src + q * 4 * bpk + kDecodePrefetchBytes), _MM_HINT_T0);
      if (mx && (q % 8 == 0 || q == q0)) {
        const uint8_t* codes = g.mx_scale + (p * (g.k_pad / 32) + q / 8) * 16;
        _mm_prefetch(reinterpret_cast<const char*>(codes + 256), _MM_HINT_T0);
        off = mx_offsets(codes);
      }
      __m512i a, b;
      dec.quad(src + q * 4 * bpk, a, b);
      if (mx) {
        a = add_exponent(a, off);
        b = add_exponent(b, off);
      }
      _mm512_store_si512(dst + (q - q0) * 64, a);
      _mm512_store_si512(dst + (q - q0) * 64 + 32, b);
    }
  }
}

}  // namespace

DecodePanel bf16_job_decoder(Layout l) {
  switch (l) {
    case Layout::kQuadE4M3: return decode_panel<Layout::kQuadE4M3>;
    case Layout::kQuadE2M1: return decode_panel<Layout::kQuadE2M1>;
    case Layout::kRecordE4M3: return decode_panel<Layout::kRecordE4M3>;
    case Layout::kRecordE2M1: return decode_panel<Layout::kRecordE2M1>;
    case Layout::kRecordE2M3: return decode_panel<Layout::kRecordE2M3>;
    case Layout::kRecordE3M2: return decode_panel<Layout::kRecordE3M2>;
    case Layout::kRecordE2M1Nv: break;
  }
  return decode_panel<Layout::kRecordE2M1Nv>;
}

namespace {

constexpr int64_t kBlock = 32;        // rows and columns of one output block
constexpr int64_t kRingWords = 8192;  // one-M-block path: the ring of decoded 32-k steps (16 KiB: L1)
constexpr int64_t kLagSteps = 2;      // one-M-block path: a step's tiles run this many steps after its decode
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

// The tiles of one 32-k step: activation rows a (stride lda elements), the panels' B rows at w (512 words each).
// Four panels (rows <= 16): C0..C3 = tmm0..3, A = tmm4, B = tmm5..7, and tmm5 again for the fourth panel once C0's
// tdpbf16ps has read it (the tile registers are not renamed: that load waits for it).
template <int kPanels, bool kTwoRows>
void step_tiles(const uint16_t* a, int64_t lda, const uint16_t* w) {
  if constexpr (kPanels == 4) {
    static_assert(!kTwoRows, "four panels use all four accumulators on one row tile");
    _tile_loadd(4, a, lda * 2);
    _tile_loadd(5, w, 64);
    _tile_loadd(6, w + 512, 64);
    _tile_loadd(7, w + 1024, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, w + 1536, 64);
    _tile_dpbf16ps(3, 4, 5);
  } else {
    multiply<kTwoRows, kPanels == 2>(a, lda, w, w + 512, 32);
  }
}

// One block of rows (a: its first activation row) x kPanels panels from p0, over the whole K, into tiles 0..3:
// a software pipeline over 32-k steps. Step s is decoded into ring slot s % ring ([panel][16 pairs][32 words]),
// then the tiles of step s - kLagSteps are issued. In program order the decode's AVX-512 work and its prefetches
// sit between the tile instructions, so the out-of-order core overlaps the two and the weight streams keep their
// loads in flight while the tiles run (decoding 256 k, then multiplying, left the memory idle during the tiles);
// the lag keeps the tile loads off stores still in the store buffer. Four panels are four weight streams per core.
template <int kPanels, bool kTwoRows>
void pipelined_block(const Job& g, DecodePanel decode, uint16_t* ring, int64_t p0, const uint16_t* a) {
  constexpr int64_t slot = kPanels * 512;
  constexpr int64_t slots = kRingWords / slot;
  static_assert(kLagSteps < slots, "a slot is decoded again only after its tiles were issued");
  const int64_t steps = g.k_pad / 32;
  zero_tiles();
  for (int64_t s = 0; s < steps + kLagSteps; ++s) {
    if (s < steps) {
      uint16_t* w = ring + (s % slots) * slot;
      for (int v = 0; v < kPanels; ++v) decode(g, p0 + v, s * 8, s * 8 + 8, w + v * 512);
    }
    if (s >= kLagSteps) {
      const int64_t t = s - kLagSteps;
      step_tiles<kPanels, kTwoRows>(a + t * 32, g.lda, ring + (t % slots) * slot);
    }
  }
}

// Rows [m_begin, m_end) (m_begin a multiple of 16) x column blocks [b_begin, b_end); scratch holds 2 panels
// of K words (whole-K path) or the ring of decoded steps (one-M-block path).
void run_range(const Job& g, uint16_t* scratch, float* c, int64_t m_begin, int64_t m_end, int64_t b_begin,
               int64_t b_end) {
  const DecodePanel decode = bf16_job_decoder(g.layout);
  const int64_t panels = g.n_pad / 16, quads = g.k_pad / 4;
  const bool one_block = m_end - m_begin <= kBlock;
  for (int64_t blk = b_begin; blk < b_end; ++blk) {
    const int64_t p0 = blk * 2;
    const bool two_cols = p0 + 1 < panels;
    const int64_t n0 = p0 * 16;
    const int64_t cols = g.n - n0 < kBlock ? g.n - n0 : kBlock;
    if (one_block) {
      const int64_t rows = m_end - m_begin;
      const uint16_t* a = g.act + m_begin * g.lda;
      if (rows <= 16 && blk + 1 < b_end && p0 + 3 < panels) {  // two blocks at once: 64 columns
        pipelined_block<4, false>(g, decode, scratch, p0, a);
        _tile_stored(0, c, 64 * 4);  // 16 rows x 64 columns of f32 sums, row stride 64
        _tile_stored(1, c + 16, 64 * 4);
        _tile_stored(2, c + 32, 64 * 4);
        _tile_stored(3, c + 48, 64 * 4);
        bf16_job_epilogue(g, c, 64, m_begin, rows, n0, g.n - n0 < 64 ? g.n - n0 : 64);
        ++blk;
        continue;
      }
      if (two_cols) {
        rows > 16 ? pipelined_block<2, true>(g, decode, scratch, p0, a) : pipelined_block<2, false>(g, decode, scratch, p0, a);
      } else {
        rows > 16 ? pipelined_block<1, true>(g, decode, scratch, p0, a) : pipelined_block<1, false>(g, decode, scratch, p0, a);
      }
      store_tiles(c, kBlock);
      bf16_job_epilogue(g, c, kBlock, m_begin, rows, n0, cols);
      continue;
    }
    uint16_t* w1 = scratch + g.k_pad * 16;
    decode(g, p0, 0, quads, scratch);
    if (two_cols) decode(g, p0 + 1, 0, quads, w1);
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlock) {
      const int64_t rows = m_end - m0 < kBlock ? m_end - m0 : kBlock;
      zero_tiles();
      pick(rows > 16, two_cols)(g.act + m0 * g.lda, g.lda, scratch, w1, g.k_pad);
      store_tiles(c, kBlock);
      bf16_job_epilogue(g, c, kBlock, m0, rows, n0, cols);
    }
  }
}

// Activations too large for L2 (many rows x long K): K outer, in chunks of kOuterChunkK, so that a chunk of
// the activation rows stays in L2 across every column block; each block's f32 sums live in `sums`
// ([round_up(rows, 32)][blocks * 32]) between chunks. scratch holds 2 panels of kOuterChunkK.
void run_k_outer(const Job& g, uint16_t* scratch, float* sums, int64_t m_begin, int64_t m_end, int64_t b_begin,
                 int64_t b_end) {
  const DecodePanel decode = bf16_job_decoder(g.layout);
  const int64_t panels = g.n_pad / 16, quads = g.k_pad / 4;
  const int64_t ldsum = (b_end - b_begin) * kBlock;
  uint16_t* w1 = scratch + kOuterChunkK * 16;
  for (int64_t q0 = 0; q0 < quads; q0 += kOuterChunkK / 4) {
    const int64_t q1 = q0 + kOuterChunkK / 4 < quads ? q0 + kOuterChunkK / 4 : quads;
    for (int64_t blk = b_begin; blk < b_end; ++blk) {
      const int64_t p0 = blk * 2;
      const bool two_cols = p0 + 1 < panels;
      decode(g, p0, q0, q1, scratch);
      if (two_cols) decode(g, p0 + 1, q0, q1, w1);
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
      bf16_job_epilogue(g, sums + (m0 - m_begin) * ldsum + (blk - b_begin) * kBlock, ldsum, m0, rows, n0, cols);
    }
  }
}

thread_local int64_t tl_gemms = 0;

void run(const Job& g) {
  // A 16-row tile would waste its rows.
  if (g.m < kAmxBf16MinM) {
    bf16_job_stream(g);
    return;
  }
  ++tl_gemms;
  const int64_t blocks = (g.n_pad / 16 + 1) / 2;
  const int64_t work = g.m * g.n_pad * g.k_pad;
  const int n_threads = work < (int64_t{1} << 18) ? 1 : g.threads;
  // Items claimed by the calling thread and the pool (each configures its tiles). With enough column blocks,
  // four items per thread: the caller starts at once, so a worker that wakes late (another process on its core)
  // still finds items left; with one item per thread the caller did the whole call whenever the worker woke
  // after it had finished its own half (measured: no two-thread speed-up at load 5-10 on 2 cores). Row splits
  // (few column blocks) keep one item per thread: each decodes every block of its rows.
  const int64_t fine = 4 * static_cast<int64_t>(n_threads);
  const int64_t nt = n_threads > 1 && blocks >= 2 * fine ? fine : n_threads;
  threads::parallel_for(nt, n_threads, [&](int64_t t) {
    const AmxShare sh = amx_share(t, nt, g.m, blocks, kBlock);
    const int64_t m0 = sh.m0, m1 = sh.m1, b0 = sh.b0, b1 = sh.b1;
    if (!sh.empty()) {
      const bool k_outer = m1 - m0 > kBlock && (m1 - m0) * g.k_pad * 2 > kActL2Bytes;
      const int64_t k_words = m1 - m0 <= kBlock ? kRingWords / 32 : k_outer ? kOuterChunkK : g.k_pad;
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

void bf16_job_epilogue(const Bf16Job& g, const float* c, int64_t ldc, int64_t m0, int64_t rows, int64_t n0,
                       int64_t cols) {
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

int64_t amx_bf16_gemms_on_this_thread() { return tl_gemms; }

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

bool fp_records_gemm_bf16(const FpGemm& f, Bf16Mma mma) {
  // f32 -> BF16 by dropping the low halves, which must be zero (exact), and no value a BF16 subnormal
  // (tdpbf16ps reads those as zero); rows up to a multiple of 16 zero.
  const int64_t m_rows = (f.m + 15) / 16 * 16;
  uint16_t* act = static_cast<uint16_t*>(std::aligned_alloc(64, static_cast<size_t>(m_rows * f.k_pad * 2)));
  __m512i inexact = _mm512_setzero_si512();
  __mmask16 subnormal = 0;
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000), mag_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const int64_t total = f.m * f.k_pad;  // k_pad % 32 == 0
  for (int64_t i = 0; i < total; i += 16) {
    const __m512i v = _mm512_loadu_si512(f.act + i);
    inexact = _mm512_or_si512(inexact, _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)));
    subnormal |= _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(v, exp_mask), v, mag_mask);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(act + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
  }
  std::memset(act + total, 0, static_cast<size_t>((m_rows - f.m) * f.k_pad * 2));
  if (_mm512_test_epi32_mask(inexact, inexact) != 0 || subnormal != 0) {
    std::free(act);
    return false;
  }
  fp_records_gemm_bf16_rows(f, act, mma);
  std::free(act);
  return true;
}

void fp_records_gemm_bf16_rows(const FpGemm& f, const uint16_t* act, Bf16Mma mma) {
  Job g;
  g.packed = f.packed;
  switch (f.elem) {
    case FpElem::kE2M1: g.layout = f.group_scale == FpGroupScale::kE4M3 ? Layout::kRecordE2M1Nv : Layout::kRecordE2M1; break;
    case FpElem::kE2M3: g.layout = Layout::kRecordE2M3; break;
    case FpElem::kE3M2: g.layout = Layout::kRecordE3M2; break;
    default: g.layout = Layout::kRecordE4M3; break;
  }
  g.n = f.n;
  g.n_pad = f.n_pad;
  g.k_pad = f.k_pad;
  g.mx_scale = f.group_scale == FpGroupScale::kE8M0 ? f.grp : nullptr;  // same [p][k/32][16] layout
  g.nv_scale = f.group_scale == FpGroupScale::kE4M3 ? f.grp : nullptr;  // [p][k/16][16]
  g.block_scale = f.block_scale;
  g.act_block_scale = f.act_block_scale;
  g.block_cols = f.block_cols;
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
  if (mma == Bf16Mma::kAmxTiles && g.block_scale == nullptr) {  // the tile paths keep whole-K sums: no 128x128 blocks
    run(g);
  } else {
    bf16_job_gemm_avx512(g);
  }
}

}  // namespace qlinear::x86
