#pragma once
// Weights (and MX-quantized activations) widened to BF16 for the large-M route of the weight-only and MX
// kernels: dequantize a block of rows, then a cuBLASLt BF16 GEMM with FP32 accumulation.
//
// Exactness: every E4M3/E2M3/E3M2/E2M1 code is a BF16 value, and so is code x 2^(e-127) while it stays in
// BF16's range: E4M3 codes (lowest bit 2^-9, largest 448) need E8M0 bytes 3..246, E2M3 bytes 0..252, E3M2
// 0..250, E2M1 0..252 (bf16_exact_mx_range). process_weights_after_loading checks a layer's scale bytes
// against that and keeps the layer on the streaming route otherwise. Products of BF16 values are exact in
// FP32, so the GEMM's only roundings are its FP32 sums (and the one output rounding), as in the streaming
// kernel — only their order differs.
//
// MXFP8 activations (W8A8) are widened the same way, per call, with scales the data chose: exact unless a
// 1x32 block's shared exponent is below -124 (block amax < 2^-116, far below any BF16/F16 activation of a
// real model). Such a block's codes smaller than 2^-133 round to BF16 subnormals or zero: an absolute error
// below 2^-133 per element, stated here because nothing checks it per call.
//
//   scale_kind kNone: codes only (the FP8 weight-only route applies its f32 row scales in the epilogue)
//   scale_kind kMx32: codes x 2^(e-127), E8M0 byte e per 32 codes along K
#include <cstdint>

#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/mma_epilogue_math.hpp"
#include "backends/cuda/weight_stream.hpp"

namespace qlinear::cuda {

enum class DequantScale : uint8_t { kNone, kMx32 };

struct DequantArgs {
  WeightFormat format = WeightFormat::kE4M3;
  DequantScale scale_kind = DequantScale::kMx32;
  const uint8_t* codes = nullptr;  // [rows, row_bytes] packed as the checkpoint packs them
  int64_t row_bytes = 0;
  const uint8_t* scales = nullptr;  // E8M0 [rows, ld_scales] (kMx32)
  int64_t ld_scales = 0;
  int64_t rows = 0, k = 0;          // k: a multiple of 8 (MX: of 32)
  void* out = nullptr;              // BF16 [rows, ld_out]
  int64_t ld_out = 0;
};
Status launch_dequant_bf16(const DequantArgs& args, Stream stream);

// The E8M0 bytes [lo, hi] for which every code x 2^(e-127) of `format` is exactly a BF16 value.
void bf16_exact_mx_range(WeightFormat format, int& lo, int& hi);

// The factors of launch_scale_bias_epilogue (null: none). A column's factor comes as an f32 scale (the BF16
// route's FP8 row scales) or as an MmaFactor (the decode kernels' row factors, mma_decode.hpp), at most one of
// the two; the activations' as MmaFactors, row m's at activation[m * activation_stride] (quantized
// activations, act_quant_bf16.hpp; stride 0: one for the call).
struct EpilogueScales {
  const float* col_f32 = nullptr;
  const MmaFactor* col = nullptr;
  const MmaFactor* activation = nullptr;
  int64_t activation_stride = 0;
};

// out[m, n0 + j] (rows ld_out apart) = round(acc[m, j] x (column j's factor x the activation factor) + bias[j])
// for j < n: the epilogue of a column block of the output, the decode kernels' f64 arithmetic
// (mma_epilogue_math.hpp) with one rounding to the output dtype.
Status launch_scale_bias_epilogue(const float* acc, int64_t m, int64_t n, const EpilogueScales& scales,
                                  const void* bias, DType bias_dtype, void* out, DType out_dtype, int64_t ld_out,
                                  Stream stream);

}  // namespace qlinear::cuda
