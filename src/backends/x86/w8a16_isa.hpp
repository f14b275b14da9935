#pragma once
// FP8-weight / BF16-activation GEMM on x86 (x86_avx512bf16_fp8_w8a16, x86_avx512bf16_mxfp8_w8a16): the
// plain-C interface between the kernel classes (w8a16_common.cpp, baseline flags) and the AVX-512 code
// (w8a16_gemm_avx512.cpp). No inline functions or templates here (see int8_isa.hpp for why).
//
// Weight layout ("BF16-pair panels of FP8 bytes"), made once by process_weights_after_loading:
//   N padded to 16, K padded to 32 (MX block), padding codes 0. A panel is 16 output columns; along K it is
//   a sequence of quads (4 k), one 64-byte group per quad, swizzled so that one vpunpck{l,h}bw pair turns
//   the decoded (hi, lo) bytes straight into the two zmm vdpbf16ps wants:
//     byte 16*l + 8*h + i  (lane l < 4, half h < 2, i < 8)  =  code of column 4l + i/2 at k = 4q + 2h + i%2
//     -> zmm A (h = 0): word 2j + t = W[j][4q + t],   zmm B (h = 1): word 2j + t = W[j][4q + 2 + t]
//   panel p, quad q at byte p * 16 * k_pad + q * 64.
// MXFP4 (x86_avx512bf16_mxfp4_w4a16) uses the same panels with half the bytes: a quad's 64 codes are 32
// bytes, byte i holding swizzled code i in its low nibble and swizzled code 32 + i in its high nibble, so that
// splitting the nibbles of a ymm yields the 64 swizzled codes in order; panel p at byte p * 8 * k_pad.
// E2M1 -> BF16 is a 16-entry vpshufb table (sign included).
// E4M3 -> BF16 is exact (every E4M3 value, subnormals included, is a normal BF16); the decoder uses only
// AVX-512BW (shifts, vpshufb for the 8 subnormal codes), no VBMI.
//
// Scales, and where they are applied:
//   MX (E8M0 per 1x32): folded into the decoded BF16 weights by adding the exponent (exact while the scaled
//       values stay normal BF16, which process checks per block; otherwise the layer takes the exact
//       scalar path). mx_scale[p][kb][16] are the E8M0 codes of panel p.
//   per-tensor / per-channel f32: multiplied once in the epilogue, y = acc * s[n] + bias[n].
//   128x128 f32 blocks: each 128-wide K block is summed alone in f32, then acc_total += partial * s[nb][kb].
// Accumulation: f32 (vdpbf16ps), activations BF16 only (can_implement refuses f32/f16 input: rounding it
// to BF16 would change the numerics).
#include <cstdint>

#include "backends/x86/int8_isa.hpp"  // FloatKind

namespace qlinear::x86 {

enum class W8ScaleMode : uint8_t { kPerColumn, kBlock128, kMx };

enum class W8Elem : uint8_t { kE4M3, kE2M1 };

struct W8A16Gemm {
  const uint8_t* packed = nullptr;  // panels (above)
  W8Elem elem = W8Elem::kE4M3;
  int64_t n = 0, n_pad = 0, k_pad = 0;
  W8ScaleMode mode = W8ScaleMode::kPerColumn;
  const float* col_scale = nullptr;    // kPerColumn: [n_pad]
  const float* block_scale = nullptr;  // kBlock128: [n_pad/16][ceil(k/128)], one row per panel
  int64_t block_cols = 0;              // ceil(k/128)
  const uint8_t* mx_scale = nullptr;   // kMx: [n_pad/16][k_pad/32][16] E8M0 codes
  const uint16_t* act = nullptr;       // BF16 [m, lda], columns k..k_pad-1 zero
  int64_t lda = 0;
  int64_t m = 0;
  const float* bias = nullptr;         // [n] or null
  void* out = nullptr;                 // [m, n]
  FloatKind out_kind = FloatKind::kBF16;
  int threads = 1;
};

// AVX-512 F/BW/VL/DQ + BF16.
void w8a16_gemm_avx512bf16(const W8A16Gemm& g);

// Its register-tile micro-kernel, shared with the FP engine's AVX-512 BF16 kernels (fp_gemm_avx512bf16.cpp):
// c[r][16 v ..] (+)= the mr rows of BF16 activations a (row stride lda elements; pairs k pairs from a) times nv
// panels of decoded BF16 VNNI-2 rows w[v][pair][32 words], f32 accumulation (mr * nv zmm accumulators). first:
// c is overwritten, else added to; scale (or null): scale[r * kBf16TilePanels + v] multiplies the chunk's sums of
// row r and panel v first, c = fma(sums, scale, c) (a 128x128 weight block's scale, times the row's 1x128
// activation scale where there is one).
constexpr int kBf16TileRows = 6;    // mr <= this
constexpr int kBf16TilePanels = 4;  // nv <= this: 64 columns
using Bf16PanelUkernel = void (*)(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t pairs, float* c,
                                  int64_t ldc, bool first, const float* scale);
Bf16PanelUkernel bf16_panel_ukernel(int mr, int nv);
// Their split of one GEMM of m rows and `blocks` 64-column blocks among nt threads: run(ctx, m0, m1, b0, b1) per
// item, an item being a column block (each streams its share of the weights once) or, with too few blocks for
// the threads and enough rows, a range of whole m-tiles over every block.
using Bf16TileRange = void (*)(void* ctx, int64_t m0, int64_t m1, int64_t b0, int64_t b1);
void bf16_tile_parallel(int64_t m, int64_t blocks, int nt, Bf16TileRange run, void* ctx);

}  // namespace qlinear::x86
