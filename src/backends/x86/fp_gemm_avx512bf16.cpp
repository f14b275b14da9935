// x86_avx512bf16_{fp8_scaled_mm, fp8_block_scaled, mxfp8, mxfp6, mxfp4, nvfp4}: the AMX-BF16 kernels' GEMM
// (amx_w8a16_gemm.cpp) for CPUs with AVX-512 BF16 + VBMI but no AMX (AMD Zen 4 / 5, Xeons whose AMX is not
// exposed), and for FP8 128x128 blocks on any CPU with AVX-512 BF16 + VBMI (the AMX paths keep whole-K sums,
// the 128x128 scales need each K block's own). The same BF16 activations (amx_act_bf16.cpp), the same decoded
// words (bf16_job_decoder: MX E8M0 folded, NVFP4 E4M3 multiplied in) and, below kAmxBf16MinM, the same weight
// stream (amx_bf16_stream.cpp); only the tiles are replaced:
//
// Per item of bf16_tile_parallel (a block of kBf16TilePanels = 4 panels, 64 output columns; or, with few columns
// and many rows, a range of whole m-tiles over every block):
//   per K chunk of kChunkK k:
//     decode the chunk of each panel -> scratch[panel][k pair][32 words] (4 x 64 x 64 B = 16 KiB: L1, with the
//       activation rows' chunk beside it)
//     per m-tile of <= 6 rows: w8a16_gemm_avx512.cpp's register tile (24 f32 zmm accumulators, per k pair 4
//       weight loads from the scratch and 6 activation-pair broadcasts), the chunk's sums added to C[rows][64]
//       (128x128 weight blocks: a chunk is one K block, its sums added times the block's scale and the row's
//       1x128 activation scale, C = fma(sums, s_w * s_a, C): fp_gemm_avx2.cpp's promotion, in its order)
//   epilogue (bf16_job_epilogue): row / column scales, bias, NaN columns, rounding to the output type.
// Every product is exact (BF16 x BF16 in f32), so the result differs from the reference only by the f32 summation
// order, as on the tiles. Compiled with AVX-512 F/BW/VL/DQ + BF16 + VBMI flags, no AMX.
#include <immintrin.h>

#include "backends/x86/amx_bf16_job.hpp"
#include "backends/x86/amx_isa.hpp"
#include "backends/x86/w8a16_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int64_t kChunkK = 128;  // k per decoded chunk (a multiple of 32: k_pad is)
constexpr int64_t kBlockCols = 16 * kBf16TilePanels;
static_assert(kChunkK == 128, "a chunk is one 128-wide K block of 128x128 weight scales: its sums are the block's");

thread_local int64_t tl_gemms = 0;

// s[r][v] for rows [m, m + mr) and panels [p0, p0 + nv), K block kb: the weight block's scale times the row's
// 1x128 activation scale (fp_gemm_avx2.cpp's block_scales, the same f32 product).
void block_scale_tile(const Bf16Job& g, int64_t m, int mr, int64_t p0, int nv, int64_t kb, float* s) {
  for (int v = 0; v < nv; ++v) {
    const float ws = g.block_scale[(p0 + v) * g.block_cols + kb];
    for (int r = 0; r < mr; ++r) {
      s[r * kBf16TilePanels + v] = g.act_block_scale ? g.act_block_scale[(m + r) * g.block_cols + kb] * ws : ws;
    }
  }
}

// Rows [m0, m1) x column blocks [b0, b1); scratch: kBf16TilePanels * kChunkK * 16 words, c: (m1 - m0) * 64 floats.
void run_range(const Bf16Job& g, uint16_t* scratch, float* c, int64_t m0, int64_t m1, int64_t b0, int64_t b1) {
  const DecodePanel decode = bf16_job_decoder(g.layout);
  const int64_t panels = g.n_pad / 16, quads = g.k_pad / 4;
  for (int64_t blk = b0; blk < b1; ++blk) {
    const int64_t p0 = blk * kBf16TilePanels;
    const int nv = static_cast<int>(panels - p0 < kBf16TilePanels ? panels - p0 : kBf16TilePanels);
    for (int64_t q0 = 0; q0 < quads; q0 += kChunkK / 4) {
      const int64_t q1 = q0 + kChunkK / 4 < quads ? q0 + kChunkK / 4 : quads;
      const int64_t pairs = 2 * (q1 - q0);
      for (int v = 0; v < nv; ++v) decode(g, p0 + v, q0, q1, scratch + v * pairs * 32);
      for (int64_t m = m0; m < m1; m += kBf16TileRows) {
        const int mr = static_cast<int>(m1 - m < kBf16TileRows ? m1 - m : kBf16TileRows);
        float scale[kBf16TileRows * kBf16TilePanels];
        if (g.block_scale != nullptr) block_scale_tile(g, m, mr, p0, nv, q0 * 4 / kChunkK, scale);
        bf16_panel_ukernel(mr, nv)(g.act + m * g.lda + q0 * 4, g.lda, scratch, pairs, c + (m - m0) * kBlockCols,
                                   kBlockCols, q0 == 0, g.block_scale != nullptr ? scale : nullptr);
      }
    }
    const int64_t n0 = p0 * 16;
    bf16_job_epilogue(g, c, kBlockCols, m0, m1 - m0, n0, g.n - n0 < nv * 16 ? g.n - n0 : nv * 16);
  }
}

}  // namespace

int64_t avx512bf16_gemms_on_this_thread() { return tl_gemms; }

void bf16_job_gemm_avx512(const Bf16Job& g) {
  if (g.m < kAmxBf16MinM) {  // one row: the register tile would reload what the stream keeps in registers
    bf16_job_stream(g);
    return;
  }
  ++tl_gemms;
  const int64_t blocks = (g.n_pad / 16 + kBf16TilePanels - 1) / kBf16TilePanels;
  // The buffers are the claiming thread's (threads::scratch).
  bf16_tile_parallel(g.m, blocks, g.threads, [](void* ctx, int64_t m0, int64_t m1, int64_t b0, int64_t b1) {
    uint16_t* scratch = static_cast<uint16_t*>(threads::scratch(0, kBf16TilePanels * kChunkK * 16 * 2));
    float* c = static_cast<float*>(threads::scratch(1, (m1 - m0) * kBlockCols * 4));
    run_range(*static_cast<const Bf16Job*>(ctx), scratch, c, m0, m1, b0, b1);
  }, const_cast<Bf16Job*>(&g));
}

}  // namespace qlinear::x86
