#pragma once
// The small-M weight-streaming GEMM on CUDA cores: y[M, N] = x[M, K] W^T, each weight byte read once from
// memory per M tile of up to 8 rows, decoded in registers, FP32 accumulation (one FFMA per product).
//
// Layouts it reads (made by process_weights_after_loading; see weight_stream.cuh for the work split):
//   w        [N, w_row_bytes] packed codes, K padded with zero codes to a multiple of 32
//   w_scale  kRow: f32 [N] (per-tensor and per-shard scales expanded per row)
//            kBlock128: f32 [scale rows, ws_ld], row n / 128, or ws_row[n] for fused shards that keep their
//            own block grids (ScaleRowGrid)          kMx32: E8M0 bytes [N, ws_ld]
//   x        f32 [M, ld_x], ld_x = steps * 1024, zero beyond K: the activation values (A16) or the exact
//            values of its FP8 codes (W8A8), made by act_quant / widen_to_f32
//   x_scale  optional f32 factor of row m for the weight's K group g at x_scale[m * xs_m + g * xs_g]
// Where scales apply: kRow once per output (acc * w_scale[n] * x_scale[m]); kBlock128 and kMx32 after each
// 16- or 32-element piece (partial * w_scale * x_scale added to the FP32 accumulator).
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

enum class WeightFormat : uint8_t { kE4M3, kE2M3, kE3M2, kE2M1 };
enum class WeightScale : uint8_t { kRow, kBlock128, kMx32 };

inline constexpr int64_t kStreamStepElems = 1024;  // K elements a block consumes per step

struct WeightStreamArgs {
  WeightFormat format = WeightFormat::kE4M3;
  WeightScale scale_kind = WeightScale::kRow;
  const uint8_t* w = nullptr;
  int64_t w_row_bytes = 0;
  const void* w_scale = nullptr;
  int64_t ws_ld = 0;
  const int32_t* ws_row = nullptr;  // kBlock128: the scale row of each output row [N], or null (n / 128)
  int64_t k_valid = 0;  // K rounded up to 32: pieces at or beyond it are skipped
  const float* x = nullptr;
  int64_t ld_x = 0;
  const float* x_scale = nullptr;
  int64_t xs_m = 0, xs_g = 0;
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int64_t m = 0, n = 0;
  int sm_count = 132;
};

// Rows of x a block holds (the M tile): 1, 2, 4 or 8; larger M runs ceil(M / 8) tiles.
Status launch_weight_stream(const WeightStreamArgs& args, Stream stream);

// out[m, n] = round(acc[m, n] + bias[n]): the epilogue of split-K runs and of GEMMs whose library epilogue
// cannot take the bias dtype exactly.
Status launch_bias_epilogue(const float* acc, const void* bias, DType bias_dtype, void* out, DType out_dtype,
                            int64_t m, int64_t n, Stream stream);

// ld_x the activation buffer must have for K.
inline int64_t stream_ld_x(int64_t k) { return (k + kStreamStepElems - 1) / kStreamStepElems * kStreamStepElems; }

}  // namespace qlinear::cuda
