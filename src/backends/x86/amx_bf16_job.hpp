#pragma once
// One BF16 GEMM of the AMX-BF16 kernels' families as the BF16 translation units see it (amx_w8a16_gemm.cpp,
// amx_bf16_stream.cpp, fp_gemm_avx512bf16.cpp): the weight layout (amx_bf16_decode.hpp), the scales, the BF16
// activations and the output. Plain data and declarations, no inline code: shared by translation units compiled
// with the AMX flags or the AVX-512 BF16 + VBMI ones (the functions below run on either: none issues AMX).
#include <cstdint>

#include "backends/x86/int8_isa.hpp"  // FloatKind

namespace qlinear::x86 {

// Where the codes of a quad (k = 4q .. 4q + 3 of one 16-column panel) are and how they are stored
// (amx_bf16_decode.hpp draws each layout). kRecordE2M1Nv: kRecordE2M1's bytes for NVFP4, looked up together
// with the 3 mantissa bits of the code's E4M3 block scale.
enum class Layout : uint8_t { kQuadE4M3, kQuadE2M1, kRecordE4M3, kRecordE2M1, kRecordE2M3, kRecordE3M2, kRecordE2M1Nv };

struct Bf16Job {
  const uint8_t* packed = nullptr;
  Layout layout = Layout::kQuadE4M3;
  int64_t n = 0, n_pad = 0, k_pad = 0;
  const uint8_t* mx_scale = nullptr;   // [n_pad/16][k_pad/32][16] E8M0 codes, folded; or null
  const uint8_t* nv_scale = nullptr;   // [n_pad/16][k_pad/16][16] E4M3 codes (NVFP4), multiplied in; or null
  // 128x128 weight blocks (x86_avx512bf16_fp8_block_scaled; register tiles and stream only, not the AMX tiles):
  // each 128-wide K block's f32 sum of code products times block_scale[p][kb] * act_block_scale[m][kb] (f32),
  // added into the accumulator by one FMA, as fp_gemm_avx2.cpp does (panel_block_scales.hpp: one row per panel).
  const float* block_scale = nullptr;      // [n_pad/16][block_cols] or null
  const float* act_block_scale = nullptr;  // [m][block_cols] (1x128 activation scales) or null (1)
  int64_t block_cols = 0;                  // ceil(k / 128)
  const float* col_scale = nullptr;    // [n_pad] or null (1)
  const float* row_scale = nullptr;    // [m] or null (1)
  const float* bias = nullptr;         // [n] or null
  const float* col_nan = nullptr;      // [n_pad] 0 or NaN, or null
  const uint16_t* act = nullptr;       // BF16 [m (tiles: round_up(m, 16)), lda], zeros past k
  int64_t lda = 0;
  int64_t m = 0;
  void* out = nullptr;
  FloatKind out_kind = FloatKind::kBF16;
  int threads = 1;
};

// Sums c (row stride ldc floats) of rows m0 .. m0 + rows and columns n0 .. n0 + cols -> the output:
// y = c * (row_scale[m] * col_scale[n]) + bias[n] (+ col_nan[n]), rounded to the output type (amx_w8a16_gemm.cpp).
void bf16_job_epilogue(const Bf16Job& g, const float* c, int64_t ldc, int64_t m0, int64_t rows, int64_t n0,
                       int64_t cols);

// Quads [q0, q1) of panel p decoded to BF16 VNNI-2 rows: dst[(q - q0) * 2 + {0, 1}][32 words] (the B tile layout
// and vdpbf16ps's), MX E8M0 scales folded into the exponents, NVFP4's E4M3 block scales multiplied in (exact).
using DecodePanel = void (*)(const Bf16Job& g, int64_t p, int64_t q0, int64_t q1, uint16_t* dst);
DecodePanel bf16_job_decoder(Layout l);  // amx_w8a16_gemm.cpp

// g.m < kAmxBf16MinM (amx_isa.hpp): each panel's quads decoded in registers (amx_bf16_decode.hpp) and
// multiplied at once by vdpbf16ps, f32 accumulation (amx_bf16_stream.cpp).
void bf16_job_stream(const Bf16Job& g);

// The stream's sums in integers (vpdpbusd) where they are small integers: E2M1 / E2M3 codes with MX or NVFP4
// block scales, and an activation row that is, per scale block, integers below 256 times a power of two (W4A4,
// W4A6, W6A6 E2M3). Bit-identical to bf16_job_stream; false, computing nothing, where it does not apply
// (amx_int_stream.cpp).
bool bf16_job_int_stream(const Bf16Job& g);

// The same GEMM without AMX: below kAmxBf16MinM bf16_job_stream, from it an AVX-512 BF16 register-tile
// micro-kernel over panels decoded by bf16_job_decoder into an L1 scratch (fp_gemm_avx512bf16.cpp).
void bf16_job_gemm_avx512(const Bf16Job& g);

}  // namespace qlinear::x86
