// x86_amx_int8: the INT8 GEMM on AMX-INT8 tiles (tdpbusd: 16 x 16 x 64 u8 x s8 -> s32 per instruction).
//
// Per item (a run of column blocks, or a thread's share of the rows):
//   up to 16 rows (one row tile; decode-size M): 4 panels (64 columns) at a time, for each 64-wide k step:
//     load A (16 rows x 64 codes), B0..B2, 3 tdpbusd, B3 into B0's tile, 1 tdpbusd (accumulate4); between the
//     steps, one row of the previous 64 columns' epilogue; a lone 2-panel block at the end of an item as below;
//   more rows: for each block of 2 panels (32 columns), for each 32-row block of activations:
//     C0..C3 = 0; for each 64-wide k step: load A0, A1 (16 rows x 64 codes), B0, B1 (the two panels'
//     16 groups of 4 k, 1 KiB each, straight from the VNNI panels, prefetched 2 KiB ahead), 4 tdpbusd
//     store the 32 x 32 int32 sums, int8_epilogue_avx2 (scales, zero point, bias, rounding) while in L1.
// The weight block (32 x K bytes) stays in L2 across the row blocks, so each weight byte comes from DRAM
// once per call. When a thread's activation rows pass 1 MiB, K goes outer instead (run_k_outer). Layout and
// numerics: amx_isa.hpp.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "backends/x86/amx_isa.hpp"
#include "backends/x86/amx_share.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int64_t kBlockCols = 32;
constexpr int64_t kBlockRows = 32;
// Measured on a 2-core Xeon, 4096 x 4096 at M = 16, one thread, cold weights: 1.9 ms per call without, 1.54
// with 2 KiB (1 KiB: 1.59; 4-8 KiB or into L2 only: 1.58-1.63); M = 32 / 128: 2.5 -> 2.0 / 4.8 -> 4.6 ms.
constexpr int64_t kWeightPrefetchBytes = 2048;

// Adds k in [k0, k1) of one 32 x 32 block (or 16-row / 16-column part of it) to tiles 0..3. a: the first of
// two 16-row blocks of activation tiles (Int8ActQuant::amx_tiles), the second 16 * lda bytes on (lda = k_pad).
template <bool kTwoRows, bool kTwoCols>
void accumulate(const uint8_t* a, int64_t lda, const int8_t* w0, const int8_t* w1, int64_t k0, int64_t k1) {
  for (int64_t k = k0; k < k1; k += 64) {
    // The next weights, kWeightPrefetchBytes ahead: a tile load waits for its lines (tiles are not renamed,
    // so the next load of tile 6 / 7 cannot start early), the hardware prefetchers stop at page boundaries.
    for (int64_t l = 0; l < 1024; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + k * 16 + kWeightPrefetchBytes + l), _MM_HINT_T0);
      if (kTwoCols) _mm_prefetch(reinterpret_cast<const char*>(w1 + k * 16 + kWeightPrefetchBytes + l), _MM_HINT_T0);
    }
    _tile_loadd(4, a + k * 16, 64);  // chunk k/64 of the row block (Int8ActQuant::amx_tiles)
    if (kTwoRows) _tile_loadd(5, a + 16 * lda + k * 16, 64);
    _tile_loadd(6, w0 + k * 16, 64);  // group k/4 of the panel at byte (k/4) * 64
    if (kTwoCols) _tile_loadd(7, w1 + k * 16, 64);
    _tile_dpbusd(0, 4, 6);
    if (kTwoCols) _tile_dpbusd(1, 4, 7);
    if (kTwoRows) _tile_dpbusd(2, 5, 6);
    if (kTwoRows && kTwoCols) _tile_dpbusd(3, 5, 7);
  }
}

using Accumulate = void (*)(const uint8_t*, int64_t, const int8_t*, const int8_t*, int64_t, int64_t);

Accumulate pick(bool two_rows, bool two_cols) {
  return two_rows ? (two_cols ? accumulate<true, true> : accumulate<true, false>)
                  : (two_cols ? accumulate<false, true> : accumulate<false, false>);
}

// Tiles 0..3 to / from a 32 x 32 block of int32 sums at c (row stride ldc elements).
void store_tiles(int32_t* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

void load_tiles(const int32_t* c, int64_t ldc) {
  _tile_loadd(0, c, ldc * 4);
  _tile_loadd(1, c + 16, ldc * 4);
  _tile_loadd(2, c + 16 * ldc, ldc * 4);
  _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
}

void zero_tiles() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// ---- Up to 16 rows: four panels per block ----
// At M <= 16 the layer streams its weights from DRAM once and the tiles are nearly idle (4 tdpbusd per 4 KiB of
// weights), so what counts is how close the stream gets to the AVX-512 VNNI kernel's at M = 1 (per-core bound: a
// core keeps only so many lines in flight). Measured on a 2-core Xeon, 28672 x 4096, one thread, cold weights,
// the calls of every variant interleaved (GB/s of weights; VNNI at M = 1: 16.0):
//   2 panels per k step, 2 KiB prefetch (the path for more rows)                       14.0
//   4 panels per k step, no software prefetch                                          14.3
//     + the epilogue interleaved with the next block's steps                         14.3
//     + the next block's first 2 KiB per panel prefetched in the last 4 steps          14.8
//   and no better: 4 panels with 1-8 KiB prefetch (T0, T1 or T2; 13.5-14.3), copying each step's weights with
//   AVX-512 loads into an L1 ring, tiles 2 steps later (13.5-13.8), touching the lines 1-4 steps ahead with AVX-512
//   loads (14.2-14.6), 2 panels on two alternating sets of A / B tiles (no wait on the last step's tdpbusd; 13.0),
//   K in 256-1024 chunks so that the activation chunk stays in L1 (11.6-13.4: shorter weight streams).
// Those prefetches likely lost to the activation tile in row order: its 16 rows lie K bytes apart, so at K = 4096
// every tile load puts 16 lines into one set of the 12-way 48 KiB L1, evicting what was prefetched there. In
// tile order (Int8ActQuant::amx_tiles: each 16 x 64 tile one contiguous KiB) a prefetch per 64-byte line of each
// panel, kLinePrefetchBytes ahead and on into the next block's panels, pays. At 1 KiB, 2 threads (qlinear bench,
// cold weights, best median of 5 interleaved runs): 28672 x 4096 4.11 -> 3.94 ms, 6144 x 4096 0.97 -> 0.92, N 4096
// x K 14336 2.07 -> 2.03 (the tile order alone or the prefetch alone: 1-2% each in the same runs). A standalone
// loop of the same tile steps streams 14.4 GB/s on one core, 15.0-15.2 with a 1-2 KiB line prefetch (4 KiB 15.0,
// 8 KiB 14.6), against 15.6-16.2 for the VNNI loop's AVX-512 loads; no better there or here: 6 panels per step
// (C0..C5, A, one B tile), non-temporal tile loads (tileloaddt1), the next page's first lines prefetched a page
// ahead (5% slower), K in two halves on two A tiles (8 streams).
// Before this, on 2 threads M = 16 took, of M = 1's time: 28672 x 4096 1.19 -> 1.10x (4.39 -> 4.00 ms), N 4096 x
// K 14336 1.21 -> 1.10x, 4096 x 4096 1.17 -> 1.13x, 6144 x 4096 1.11x both (the next block's first 2 KiB per
// panel prefetched in its last 4 steps, now the line prefetch's run past the panels' ends).
// With the weights on huge pages (weight_bytes), half a step ahead beats a whole step: 28672 x 4096, 2 threads,
// 8 interleaved runs, 512 bytes faster in 6, median of the runs' medians 3.84 -> 3.78 ms (256 or 768 bytes alike;
// 2-3 KiB as 1 KiB).
constexpr int64_t kLinePrefetchBytes = 512;

// A finished block's int32 sums whose epilogue runs one row at a time between the next block's k steps: the
// AVX2 arithmetic then overlaps the weight loads instead of leaving the memory idle between blocks (16 rows x 64
// columns is ~1500 instructions, more than the reorder window).
struct PendingRows {
  const int32_t* c = nullptr;  // [rows][ldc]
  int64_t ldc = 0, m0 = 0, rows = 0, n0 = 0, cols = 0, done = 0;
  void one(const Int8Epilogue& e) {
    if (done < rows) {
      int8_epilogue_avx2(e, c + done * ldc, ldc, m0 + done, 1, n0, cols);
      ++done;
    }
  }
  void rest(const Int8Epilogue& e) {
    if (done < rows) int8_epilogue_avx2(e, c + done * ldc, ldc, m0 + done, rows - done, n0, cols);
    done = rows;
  }
};

// Adds the whole K of one row tile (a: 16 activation rows in tile order) x 4 panels (w, stride pstride) to tiles
// 0..3. next: the following block's first panel (null: none); pending: rows to finish one per step.
// Tiles: C0..C3 = tmm0..3, A = tmm4, B = tmm5..7, and tmm5 again for the fourth panel once C0's tdpbusd has read
// it (the tile registers are not renamed: that load waits for it).
void accumulate4(const uint8_t* a, const int8_t* w, int64_t pstride, int64_t k_pad, const int8_t* next,
                 PendingRows& pending, const Int8Epilogue& e) {
  const int64_t steps = k_pad / 64, panel_bytes = 16 * k_pad;
  for (int64_t t = 0; t < steps; ++t) {
    // One prefetch per line of each panel, kLinePrefetchBytes ahead; past the panels' ends into the next
    // block's, so that its streams start on lines already on their way.
    for (int64_t l = 0; l < 1024; l += 64) {
      const int64_t at = t * 1024 + kLinePrefetchBytes + l;
      const int8_t* base = at < panel_bytes ? w + at : next != nullptr ? next + (at - panel_bytes) : nullptr;
      if (base == nullptr) break;
      for (int v = 0; v < 4; ++v) _mm_prefetch(reinterpret_cast<const char*>(base + v * pstride), _MM_HINT_T0);
    }
    const int8_t* wt = w + t * 1024;  // group 16t of each panel
    _tile_loadd(4, a + t * 1024, 64);
    _tile_loadd(5, wt, 64);
    _tile_loadd(6, wt + pstride, 64);
    _tile_loadd(7, wt + 2 * pstride, 64);
    _tile_dpbusd(0, 4, 5);
    _tile_dpbusd(1, 4, 6);
    _tile_dpbusd(2, 4, 7);
    _tile_loadd(5, wt + 3 * pstride, 64);
    _tile_dpbusd(3, 4, 5);
    pending.one(e);
  }
}

// Rows [m_begin, m_end), at most 16 (m_begin a multiple of 16) x column blocks [b_begin, b_end): pairs of blocks
// on accumulate4, a lone block (odd count, or N's last panel) on accumulate.
void run_range_one_tile(const Int8Gemm& g, int64_t m_begin, int64_t m_end, int64_t b_begin, int64_t b_end) {
  alignas(64) int32_t c[16 * 64];  // the sums of the block whose epilogue is pending
  const int64_t panels = g.n_pad / 16, pstride = 16 * g.k_pad, rows = m_end - m_begin;
  const uint8_t* a = g.act + m_begin * g.k_pad;
  PendingRows pending;
  for (int64_t b = b_begin; b < b_end;) {
    const int64_t p0 = b * 2, n0 = p0 * 16;
    const int8_t* w0 = g.packed + p0 * pstride;
    const int64_t width = b + 1 < b_end && p0 + 3 < panels ? 64 : 32;
    zero_tiles();
    if (width == 64) {
      const bool next = b + 3 < b_end && p0 + 7 < panels;
      accumulate4(a, w0, pstride, g.k_pad, next ? w0 + 4 * pstride : nullptr, pending, g.epi);
    } else {
      const bool two_cols = p0 + 1 < panels;
      pick(false, two_cols)(a, g.k_pad, w0, two_cols ? w0 + pstride : w0, 0, g.k_pad);
    }
    pending.rest(g.epi);  // c is free again
    _tile_stored(0, c, 64 * 4);
    _tile_stored(1, c + 16, 64 * 4);
    if (width == 64) {
      _tile_stored(2, c + 32, 64 * 4);
      _tile_stored(3, c + 48, 64 * 4);
    }
    pending = PendingRows{c, 64, m_begin, rows, n0, g.epi.n - n0 < width ? g.epi.n - n0 : width};
    b += width / 32;
  }
  pending.rest(g.epi);
}

constexpr int64_t kMinItemBlocks = 4;
constexpr int64_t kItemsPerThread = 8;

// Up to 16 rows on several threads: items that shrink towards the end, each 1 / (2 * threads) of the blocks not
// yet handed out, in whole 4-panel groups (2 blocks), at least kMinTailItemBytes of weights. With equal items (8
// per thread) the thread that finishes first waited for the other's last item: measured on the 2-core Xeon,
// 28672 x 4096, M = 16, 2 threads, 41 calls of qlinear bench, 3 interleaved runs: the first thread idle for
// 101 / 311 / 131 us of a 3.93 / 4.30 / 4.05 ms call, shrinking items 38 / 78 / 36 us of 3.92 / 3.97 / 3.99 ms
// (6144 x 4096 and N 4096 x K 14336: 18-65 us idle either way). Best median of 6 interleaved runs: 28672 x 4096
// 3.96 -> 3.91 ms, 6144 x 4096 0.94 -> 0.90, N 4096 x K 14336 2.03 -> 2.01. A 256 KiB minimum was no better.
constexpr int64_t kMinTailItemBytes = 512 << 10;
constexpr int kMaxShrinkingItems = 256;

// Fills edges[0 .. items] (items of column blocks [edges[i], edges[i + 1])) and returns the item count.
int64_t shrinking_items(int64_t blocks, int64_t k_pad, int n_threads, int64_t (&edges)[kMaxShrinkingItems + 1]) {
  int64_t min_blocks = (kMinTailItemBytes / (kBlockCols * k_pad) + 1) / 2 * 2;
  min_blocks = min_blocks < 2 ? 2 : min_blocks;
  int64_t items = 0;
  edges[0] = 0;
  while (edges[items] < blocks) {
    const int64_t left = blocks - edges[items];
    int64_t size = (left / (2 * n_threads) + 1) / 2 * 2;
    size = size < min_blocks ? min_blocks : size;
    ++items;
    edges[items] = items == kMaxShrinkingItems || size >= left ? blocks : edges[items - 1] + size;
  }
  return items;
}
constexpr int64_t kOuterChunkK = 2048;             // K-outer path: k per chunk
constexpr int64_t kActL2Bytes = int64_t{1} << 20;  // a thread's activation rows beyond this: K outer

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
      zero_tiles();
      pick(rows > 16, two_cols)(g.act + m0 * g.k_pad, g.k_pad, w0, w1, 0, g.k_pad);
      store_tiles(c, kBlockCols);
      int8_epilogue_avx2(g.epi, c, kBlockCols, m0, rows, n0, cols);
    }
  }
}

// Activation rows too large for L2 (many rows x long K): K outer, in chunks of kOuterChunkK, so that a chunk of
// the rows stays in L2 across every column block; the int32 sums of every block live in `sums`
// ([round_up(rows, 32)][blocks * 32]) between chunks. Integer sums: the same values in any order.
void run_k_outer(const Int8Gemm& g, int32_t* sums, int64_t m_begin, int64_t m_end, int64_t b_begin, int64_t b_end) {
  const int64_t panels = g.n_pad / 16, pstride = 16 * g.k_pad;
  const int64_t ldsum = (b_end - b_begin) * kBlockCols;
  for (int64_t k0 = 0; k0 < g.k_pad; k0 += kOuterChunkK) {
    const int64_t k1 = k0 + kOuterChunkK < g.k_pad ? k0 + kOuterChunkK : g.k_pad;
    for (int64_t b = b_begin; b < b_end; ++b) {
      const int64_t p0 = b * 2;
      const bool two_cols = p0 + 1 < panels;
      const int8_t* w0 = g.packed + p0 * pstride;
      const int8_t* w1 = two_cols ? w0 + pstride : w0;
      for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlockRows) {
        int32_t* s = sums + (m0 - m_begin) * ldsum + (b - b_begin) * kBlockCols;
        if (k0 == 0) {
          zero_tiles();
        } else {
          load_tiles(s, ldsum);
        }
        pick(m_end - m0 > 16, two_cols)(g.act + m0 * g.k_pad, g.k_pad, w0, w1, k0, k1);
        store_tiles(s, ldsum);
      }
    }
  }
  for (int64_t b = b_begin; b < b_end; ++b) {
    const int64_t n0 = b * kBlockCols;
    const int64_t cols = g.epi.n - n0 < kBlockCols ? g.epi.n - n0 : kBlockCols;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlockRows) {
      const int64_t rows = m_end - m0 < kBlockRows ? m_end - m0 : kBlockRows;
      int8_epilogue_avx2(g.epi, sums + (m0 - m_begin) * ldsum + (b - b_begin) * kBlockCols, ldsum, m0, rows, n0, cols);
    }
  }
}

}  // namespace

void int8_gemm_amx(const Int8Gemm& g) {
  const int64_t blocks = (g.n_pad / 16 + 1) / 2;
  const int64_t work = g.m * g.n_pad * g.k_pad;
  const int n_threads = work < (int64_t{1} << 20) ? 1 : g.threads;
  // Items of whole column blocks (at least kMinItemBlocks each, up to kItemsPerThread per thread; up to 16 rows
  // shrinking_items), claimed by whichever thread is free: a thread the OS deschedules on a shared machine does
  // not hold the others up.
  // Few column blocks, or activations past L2 (each item reads all of them): one item per thread's share.
  // Each item configures its tiles.
  const bool small_act = g.m * g.k_pad <= kActL2Bytes;
  int64_t nt = !small_act ? n_threads
               : blocks >= kMinItemBlocks * kItemsPerThread * n_threads
                   ? kItemsPerThread * n_threads
                   : (blocks >= 2 * kMinItemBlocks * n_threads ? blocks / kMinItemBlocks : n_threads);
  int64_t edges[kMaxShrinkingItems + 1];
  const bool shrinking = g.m <= 16 && n_threads > 1 && blocks >= 2 * kMinItemBlocks * n_threads;
  if (shrinking) nt = shrinking_items(blocks, g.k_pad, n_threads, edges);
  threads::parallel_for(nt, n_threads, [&](int64_t t) {
    const AmxShare sh =
        shrinking ? AmxShare{0, g.m, edges[t], edges[t + 1]} : amx_share(t, nt, g.m, blocks, kBlockRows);
    const int64_t m0 = sh.m0, m1 = sh.m1, b0 = sh.b0, b1 = sh.b1;
    if (!sh.empty()) {
      configure_tiles();
      if (m1 - m0 > kBlockRows && (m1 - m0) * g.k_pad > kActL2Bytes) {
        const int64_t count = (m1 - m0 + kBlockRows - 1) / kBlockRows * kBlockRows * (b1 - b0) * kBlockCols;
        run_k_outer(g, static_cast<int32_t*>(threads::scratch(0, count * 4)), m0, m1, b0, b1);
      } else if (m1 - m0 <= 16) {
        run_range_one_tile(g, m0, m1, b0, b1);
      } else {
        run_range(g, m0, m1, b0, b1);
      }
      _tile_release();
    }
  });
}

}  // namespace qlinear::x86
