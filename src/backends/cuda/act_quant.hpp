#pragma once
// Activation quantization on the GPU, bit-identical to the reference quantizers (src/quant/): the scale
// rules of fp8_quant.cpp and mx_quant.cpp, with the quotient x / s taken in double exactly as there.
//
//   mode             scale (f32 unless noted)                                        codes
//   kStaticTensor    s = given (the max of the layer's input_scale over shards)      e4m3(x / s)
//   kDynamicTensor   s = f32(amax / 448), 1/(448*512) when that is 0                 e4m3(x / s)
//   kDynamicToken    s = max(f32(min(amax_row, ub) / 448), 1/(448*512))              e4m3(x / s)
//   kDynamicGroup128 s = f32(max(amax_group, 1e-10f) / 448) per 1x128 (last partial) e4m3(x / s)
//   kMx32            e = ceil(log2(amax / 448)) in [-127, 127], -127 for a zero block;
//                    stored as E8M0 bytes e + 127 (or as the float 2^e)               e4m3(x * 2^-e)
//
// Output rows are `ld_codes` long; the columns [k, ld_codes) are written as zero codes, so GEMMs can run
// on a K padded to their granularity.
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

enum class ActQuantMode : uint8_t { kStaticTensor, kDynamicTensor, kDynamicToken, kDynamicGroup128, kMx32 };

// Where the scales go. Element (row m, group g) is at scales[m * m_stride + g * g_stride]; per-tensor uses
// element 0, per-token g = 0. f32 for the FP8 modes; for kMx32 E8M0 bytes, or f32 2^e with mx_as_float.
struct ScaleOut {
  void* scales = nullptr;
  int64_t m_stride = 0;
  int64_t g_stride = 0;
  bool mx_as_float = false;
};

struct ActQuantArgs {
  const void* x = nullptr;  // [m, k] row-major, rows ld_x elements apart
  DType x_dtype = DType::kBF16;  // F32, BF16, F16
  int64_t m = 0, k = 0, ld_x = 0;
  ActQuantMode mode = ActQuantMode::kDynamicToken;
  float static_scale = 1.0f;  // kStaticTensor
  float scale_ub = 0.0f;      // kDynamicToken upper bound on amax; <= 0: none
  const float* row_amax = nullptr;  // kDynamicToken: the rows' |x| max given (tensor-parallel slices of a row
                                    // use the full row's, all-reduced), instead of reducing this slice
  // Codes: E4M3 bytes, or their exact float values (codes_as_float) for the CUDA-core kernels.
  void* codes = nullptr;
  bool codes_as_float = false;
  int64_t ld_codes = 0;
  ScaleOut scale;
  // kDynamicTensor: one u32 of device scratch for the global amax (zeroed by the launcher).
  uint32_t* amax_scratch = nullptr;
};

Status launch_act_quant(const ActQuantArgs& args, Stream stream);
// Benchmarks: whether launch_act_quant and launch_int8_act_quant may take their row kernels for aligned BF16
// rows (default: yes), so that one process times them beside the general vector kernels they replace there.
// Not thread-safe against launches.
void act_quant_allow_rows_kernel(bool allow);
bool act_quant_rows_kernel_allowed();

// out[m] = max |x[m, :k]| (f32): a slice's per-token amax, all-reduced across tensor-parallel ranks.
Status launch_row_amax(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ld_x, float* out, Stream stream);

// dst[0..count) = src[0] (device to device): a scalar scale spread over rows.
Status launch_broadcast_f32(const float* src, float* dst, int64_t count, Stream stream);

// Dense activations widened to f32 (exact), rows padded with zeros to ld_out: the A16 input of the
// CUDA-core kernels.
Status launch_widen_to_f32(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ld_x, float* out,
                           int64_t ld_out, Stream stream);

}  // namespace qlinear::cuda
