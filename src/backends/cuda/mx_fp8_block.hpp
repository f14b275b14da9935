#pragma once
// The large-M route of MX layers with quantized MX activations (W4A4 MXFP4, W6A6 MXFP6, W4A6): both
// operands re-scaled exactly onto E4M3 per 128 block (mx_fp8_block_math.hpp) and multiplied by cuBLASLt's
// block-scaled FP8 GEMM (1x128 activation groups x 128x128 weight blocks), about 1.4x the BF16 tensor-core
// rate on Hopper, where the BF16 route widens both operands to BF16.
//
// Per call, on the stream, no synchronization (graph-capturable):
//   1. one activation pass quantizes x as the reference does (per 32, the key's E8M0 rule) and writes the
//      E4M3 codes of c x 2^(e - F) with F per (row, 128 block), the f32 scale 2^F, and the rows whose
//      blocks do not fit E4M3's window (or whose scales leave the exact range) to a list;
//   2. the packed weights are widened to row-major E4M3 with the layer's per-block exponents (mma_widen.cu);
//   3. cuBLASLt's FP8 GEMM with both scale grids, the bias in its epilogue (or ours), on M rounded up to 16;
//   4. a repair kernel recomputes the listed rows exactly (MX values times the exact weights in FP32 FMA),
//      bias and rounding included, over the GEMM's output; with no listed row it exits at once. Each four
//      listed rows cost one CUDA-core pass over the E4M3 weights: fine for the rare row whose 128 blocks span
//      more octaves than E4M3 holds, slow (correct) for inputs where most rows do.
// Numerics: every operand value is exact; the tensor cores sum each 128-K block with FP8 accumulation
// (about 2^-14 of sum |x w|) before cuBLASLt's FP32 promotion, within the decode kernels' bound (2^-10).
#include <cstdint>

#include "backends/cuda/act_quant_bf16_math.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/mma_decode.hpp"

namespace qlinear::cuda {

struct MxFp8BlockArgs {
  MmaDecodeArgs gemm;             // the layer's packed weights, x as given (dtype x_dtype), bias, out, m
  DType x_dtype = DType::kBF16;   // F32, BF16, F16
  ActElem act_elem = ActElem::kE2M1;
  ActMxRule act_rule = ActMxRule::kQuarkEven;
  const int32_t* blk_exp = nullptr;   // device [ceil(N/128), K/128]
  const float* blk_scale = nullptr;   // device [ceil(N/128), round_up(K/128, 4)]: 2^blk_exp
  int weight_exp_min = 0, weight_exp_max = 0;
  // The widened weights kept by the layer (E4M3 [N, K], QLINEAR_MX_FP8_BLOCK=keep): no widening per call.
  const uint8_t* w_fp8 = nullptr;
};

// Benchmark probes (MmaDecodeForce::mx_fp8_probe, a bit per stage skipped; the results are then wrong): what
// each stage costs inside the route, by difference.
inline constexpr int kProbeNoPass = 1, kProbeNoWiden = 2, kProbeNoGemm = 4, kProbeNoRepair = 8;

Status launch_mx_fp8_block_gemm(const MxFp8BlockArgs& args, Stream stream);

}  // namespace qlinear::cuda
