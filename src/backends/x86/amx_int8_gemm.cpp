// x86_amx_int8: the INT8 GEMM on AMX-INT8 tiles (tdpbusd: 16 x 16 x 64 u8 x s8 -> s32 per instruction).
//
// Per thread, for each block of 2 panels (32 output columns) of its share:
//   for each 32-row block of activations:
//     C0..C3 = 0; for each 64-wide k step: load A0, A1 (16 rows x 64 codes), B0, B1 (the two panels'
//     16 groups of 4 k, 1 KiB each, straight from the VNNI panels), 4 tdpbusd
//     store the 32 x 32 int32 sums, int8_epilogue_avx2 (scales, zero point, bias, rounding) while in L1.
// The weight block (32 x K bytes) stays in L2 across the row blocks, so each weight byte comes from DRAM
// once per call. Layout and numerics: amx_isa.hpp.
#include <immintrin.h>

#include <cstring>

#include "backends/x86/amx_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

// Palette 1 tile configuration (Intel SDM, LDTILECFG), 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// All 8 tiles as 16 rows x 64 bytes.
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

constexpr int64_t kBlockCols = 32;
constexpr int64_t kBlockRows = 32;

// One 32 x 32 block (or 16-row / 16-column part of it) of int32 sums into c[32][32].
template <bool kTwoRows, bool kTwoCols>
void block(const uint8_t* a, int64_t lda, const int8_t* w0, const int8_t* w1, int64_t k_pad, int32_t* c) {
  _tile_zero(0);
  if (kTwoCols) _tile_zero(1);
  if (kTwoRows) _tile_zero(2);
  if (kTwoRows && kTwoCols) _tile_zero(3);
  for (int64_t k = 0; k < k_pad; k += 64) {
    _tile_loadd(4, a + k, lda);
    if (kTwoRows) _tile_loadd(5, a + 16 * lda + k, lda);
    _tile_loadd(6, w0 + k * 16, 64);  // group k/4 of the panel at byte (k/4) * 64
    if (kTwoCols) _tile_loadd(7, w1 + k * 16, 64);
    _tile_dpbusd(0, 4, 6);
    if (kTwoCols) _tile_dpbusd(1, 4, 7);
    if (kTwoRows) _tile_dpbusd(2, 5, 6);
    if (kTwoRows && kTwoCols) _tile_dpbusd(3, 5, 7);
  }
  constexpr int64_t ldc = kBlockCols * 4;
  _tile_stored(0, c, ldc);
  if (kTwoCols) _tile_stored(1, c + 16, ldc);
  if (kTwoRows) _tile_stored(2, c + 16 * kBlockCols, ldc);
  if (kTwoRows && kTwoCols) _tile_stored(3, c + 16 * kBlockCols + 16, ldc);
}

// Rows [m_begin, m_end) (m_begin a multiple of 16) x column blocks [b_begin, b_end).
void run_range(const Int8Gemm& g, int64_t m_begin, int64_t m_end, int64_t b_begin, int64_t b_end) {
  alignas(64) int32_t c[kBlockRows * kBlockCols];
  const int64_t panels = g.n_pad / 16, pstride = 16 * g.k_pad;
  for (int64_t b = b_begin; b < b_end; ++b) {
    const int64_t p0 = b * 2;
    const bool two_cols = p0 + 1 < panels;
    const int8_t* w0 = g.packed + p0 * pstride;
    const int8_t* w1 = two_cols ? w0 + pstride : w0;
    const int64_t n0 = p0 * 16;
    const int64_t cols = g.epi.n - n0 < kBlockCols ? g.epi.n - n0 : kBlockCols;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlockRows) {
      const int64_t rows = m_end - m0 < kBlockRows ? m_end - m0 : kBlockRows;
      const uint8_t* a = g.act + m0 * g.k_pad;
      if (rows > 16) {
        two_cols ? block<true, true>(a, g.k_pad, w0, w1, g.k_pad, c) : block<true, false>(a, g.k_pad, w0, w1, g.k_pad, c);
      } else {
        two_cols ? block<false, true>(a, g.k_pad, w0, w1, g.k_pad, c) : block<false, false>(a, g.k_pad, w0, w1, g.k_pad, c);
      }
      int8_epilogue_avx2(g.epi, c, kBlockCols, m0, rows, n0, cols);
    }
  }
}

}  // namespace

void int8_gemm_amx(const Int8Gemm& g) {
  const int64_t blocks = (g.n_pad / 16 + 1) / 2;
  const int64_t work = g.m * g.n_pad * g.k_pad;
  const int n_threads = work < (int64_t{1} << 20) ? 1 : g.threads;
  // One item per thread's share (the pool may run several items on one thread; each configures its tiles).
  const int64_t nt = n_threads;
  threads::parallel_for(nt, n_threads, [&](int64_t t) {
    int64_t m0 = 0, m1 = g.m, b0 = 0, b1 = blocks;
    if (blocks >= 2 * nt || g.m < 2 * kBlockRows * nt) {
      // Split the column blocks: every thread streams its own share of the weights once.
      b0 = blocks * t / nt;
      b1 = blocks * (t + 1) / nt;
    } else {
      // Few columns, many rows: split rows (in whole 16-row tiles).
      const int64_t tiles = (g.m + 15) / 16;
      m0 = tiles * t / nt * 16;
      m1 = tiles * (t + 1) / nt * 16;
      m1 = m1 < g.m ? m1 : g.m;
    }
    if (m1 > m0 && b1 > b0) {
      configure_tiles();
      run_range(g, m0, m1, b0, b1);
      _tile_release();
    }
  });
}

}  // namespace qlinear::x86
