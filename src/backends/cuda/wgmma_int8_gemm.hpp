#pragma once
// The wgmma INT8 GEMM with the INT8 route's epilogue fused (sm_90a), on the persistent skeleton of the FP8
// GEMM (wgmma_persistent.cuh: rasterized tiles, TMA ring fed by a producer warpgroup, two math warpgroups,
// optional 2-block clusters sharing the w tile by multicast): S8 x S8 -> exact S32 accumulators in
// registers (the tensor cores accumulate across K, one group in flight), then, per output, the epilogue of
// int8_scaled_mm.hpp in FP64
//   y[m, n] = (acc - z[m] colsum[n]) * s[m] * w_scale[n] + bias[n], one rounding to the output dtype,
// so the result is bit for bit the one of cuBLASLt's INT32 GEMM + launch_int8_epilogue, without the INT32
// matrix going through memory. Compared and timed by CudaPrefillBench.DISABLED_WgmmaInt8.
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

struct WgmmaInt8Args {
  const void* x = nullptr;  // S8 [m, k], rows ld_x bytes apart (multiple of 16)
  int64_t ld_x = 0;
  const void* w = nullptr;  // S8 [n, k], rows ld_w bytes apart (multiple of 16)
  int64_t ld_w = 0;
  int64_t m = 0, n = 0, k = 0;
  const float* x_scale = nullptr;  // [m] when x_scale_per_row, else [1]; null: x_scale_value
  bool x_scale_per_row = false;
  float x_scale_value = 1.0f;
  const int32_t* x_zero_point = nullptr;  // [m] or [1] as the scale; null: x_zero_point_value
  bool x_zero_point_per_row = false;
  int32_t x_zero_point_value = 0;
  const float* w_scale = nullptr;     // [n]
  const int64_t* w_colsum = nullptr;  // [n]; null when every zero point is 0
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;  // BF16, F16 or F32
  int64_t ld_out = 0;              // 0: n
  int tile_n = 256;                // 128 or 256 output columns per tile
  int cluster_m = 1;               // 2: clusters of two blocks along M sharing the w tile (256 columns only)
  int group_m = 0;                 // row units per rasterization group (0: the default)
};

Status launch_wgmma_int8_gemm(const WgmmaInt8Args& args, Stream stream);

}  // namespace qlinear::cuda
