#pragma once
// A warp-specialized FP8 GEMM for sm_90a (wgmma + TMA), the first step of the own prefill kernel:
//   y[M, N] (BF16, row-major) = (x[M, K] . w[N, K]^T) * x_scale * w_scale
// with E4M3 operands K-contiguous (rows ld_x / ld_w bytes apart, multiples of 16), per-tensor or
// per-token x scales and per-tensor or per-channel w scales applied in the epilogue.
//
// Structure: a 128 x 128 output tile per block of three warpgroups. Warpgroup 0 is the producer: one
// thread issues TMA loads of 128-byte K slices (128B swizzle) of x and w into a 4-stage ring, completing on
// "full" mbarriers; warpgroups 1 and 2 each own 64 rows of the tile and issue wgmma m64n128k32 from shared
// memory, then release the stage on its "empty" mbarrier. Each 128-element K block is accumulated by the
// tensor cores into a scratch accumulator and added to the FP32 accumulator in registers (promotion every
// 128 K, as cuBLASLt does without fast accumulation). Not yet in any route: measured against cuBLASLt by
// CudaPrefillBench.DISABLED_WgmmaFp8 (outputs compared, times side by side).
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"

namespace qlinear::cuda {

// Tile width and accumulation: 128 columns with promotion every 128 K (the default, cuBLASLt's numerics
// without fast accumulation), or 128 / 256 columns accumulated by the tensor cores across K (fast
// accumulation: fewer registers, one wgmma group kept in flight).
enum class WgmmaFp8Variant : uint8_t { kN128Promote, kN128Fast, kN256Fast };

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
  void* out = nullptr;  // BF16 [m, n], rows ld_out elements apart
  int64_t ld_out = 0;
  WgmmaFp8Variant variant = WgmmaFp8Variant::kN128Promote;
  bool persistent = false;  // one block per multiprocessor looping over tiles (else one block per tile)
};

Status launch_wgmma_fp8_gemm(const WgmmaFp8Args& args, Stream stream);

}  // namespace qlinear::cuda
