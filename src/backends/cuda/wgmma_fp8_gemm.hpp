#pragma once
// The own FP8 prefill GEMM for sm_90a (wgmma + TMA, warp-specialized, persistent):
//   out[M, N] = round((x[M, K] . w[N, K]^T) * x_scale * w_scale + bias)
// with E4M3 operands K-contiguous (rows ld_x / ld_w bytes apart, multiples of 16; columns past K and rows
// past M / N read as zeros), per-tensor or per-token x scales, per-tensor or per-channel w scales, an
// optional bias (F32 / BF16 / F16) and a BF16 / F16 / F32 output, all applied in FP32 in the epilogue
// before the one rounding.
//
// Structure (wgmma_fp8_kernel.cuh): one block of three warpgroups per multiprocessor, looping over
// 128 x BN output tiles in a rasterized order (groups of group_m row blocks, the column blocks inside a
// group, so the blocks running together share their x rows and w columns in the L2). Warpgroup 0 is the
// producer (setmaxnreg 56): one thread issues the TMA loads of 128-byte K slices (128B swizzle) of x and w
// into a ring of 4-6 stages and runs ahead into the next tile while the math warpgroups finish the
// current one. Warpgroups 1 and 2 (setmaxnreg 224) each own 64 rows of the tile and issue wgmma
// m64nNk32 from shared memory.
//
// Numerics: the FP8 route's cuBLASLt call (fast accumulation off), promotion every 128 K: the tensor cores
// sum each 128-element K block into a scratch accumulator (their internal precision), which is added to
// the FP32 accumulator in registers. A 256-column tile promotes in two 128-column halves (the registers
// hold 128 accumulators and one 64-register half); 128- and 192-column tiles in one step.
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"

namespace qlinear::cuda {

// Output tile width: 128, 192 or 256 columns (kAuto: by the wave count of the problem on this GPU).
enum class WgmmaFp8Tile : uint8_t { kAuto, kN128, kN192, kN256 };

struct WgmmaFp8Args {
  const void* x = nullptr;  // E4M3 [m, k], rows ld_x bytes apart
  int64_t ld_x = 0;
  const void* w = nullptr;  // E4M3 [n, k], rows ld_w bytes apart
  int64_t ld_w = 0;
  int64_t m = 0, n = 0, k = 0;
  const float* x_scale = nullptr;  // [m] when x_scale_per_row, else [1]
  bool x_scale_per_row = false;
  const float* w_scale = nullptr;  // [n] when w_scale_per_col, else [1]
  bool w_scale_per_col = false;
  const void* bias = nullptr;  // [n] of bias_dtype, or null
  DType bias_dtype = DType::kF32;
  void* out = nullptr;  // [m, n] of out_dtype, rows ld_out elements apart (0: n)
  DType out_dtype = DType::kBF16;
  int64_t ld_out = 0;
  WgmmaFp8Tile tile = WgmmaFp8Tile::kAuto;
  int group_m = 0;    // row units per rasterization group (0: the default)
  int cluster_m = 0;  // blocks per cluster along M sharing the w tile by multicast: 1 or 2 (0: the default)
  // Fused activation quantization (q_mode != kNone): the GEMM quantizes q_src (BF16 [m, k], rows q_ld_src
  // elements apart, 16-byte aligned, k % 8 == 0) itself into x (the codes buffer, ld_x >= k, written here)
  // and, per token, x_scale (written here; x_scale_per_row); static: x_scale null, q_static_scale used.
  // ready: ceil(m / 128) ints of scratch, zeroed before the launch. Codes and scales bit for bit those of
  // launch_act_quant (act_quant.hpp).
  enum class FusedQuant : uint8_t { kNone, kStatic, kToken };
  FusedQuant q_mode = FusedQuant::kNone;
  const void* q_src = nullptr;
  int64_t q_ld_src = 0;
  float q_static_scale = 1.0f;
  int* ready = nullptr;
  // Programmatic dependent launch: the GEMM's blocks may start (set up their barriers) while the previous
  // kernel on the stream finishes, waiting for it before reading anything (griddepcontrol.wait).
  bool pdl = false;
  bool fast_accum = false;  // benchmark diagnostic (256-column tile, one block): no promotion, the tensor
                            // cores accumulate across K (not the route's numerics)
};

// The tile kAuto picks for an (m, n) problem on `sms` multiprocessors.
WgmmaFp8Tile wgmma_fp8_auto_tile(int64_t m, int64_t n, int sms);

Status launch_wgmma_fp8_gemm(const WgmmaFp8Args& args, Stream stream);

}  // namespace qlinear::cuda
