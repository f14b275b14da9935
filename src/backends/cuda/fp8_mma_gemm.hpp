#pragma once
// The small-M FP8 W8A8 GEMM (sm_90a): y[M, N] = (x_q[M, K] w_q[N, K]^T) * s_x * s_w + bias on the FP8 tensor
// cores (mma.sync m16n8k32 E4M3 x E4M3, FP32 accumulation), the weights as the A operand (16 rows per MMA)
// and the tokens as its 8 columns (swap-AB). It reads the weights in the layout the cuBLASLt route keeps
// (row-major E4M3 rows of k_valid bytes, layer_state.hpp): one copy of the weights serves both routes.
//
// Why it exists: at M <= 64 cuBLASLt's FP8 GEMMs read the weights far below memory speed, and with the
// separate quantization launch the W8A8 route ran at 0.6-0.9x of torch._scaled_mm there. This kernel streams
// the weights through a cp.async pipeline (the L2 window marks them evict-first at M <= 16) straight into the
// MMA: E4M3 codes are the tensor cores' own input, so no decode instruction runs per weight.
//
// Operands: w row-major [n, ld_w] E4M3 codes (16-byte aligned rows, zero beyond K); x the quantized
// activations [m, ld_x] E4M3 codes as act_quant.hpp writes them (zero beyond K); K = the padded length both
// share (a multiple of 16). w_scale f32 [n] (per-tensor scales expanded per row), x_scale f32 at
// x_scale[m * x_scale_stride] (stride 0: one for the call).
//
// Numerics: the products of E4M3 codes are exact; each warp sums a 128-K slab in the tensor core (whose FP8
// accumulation keeps fewer bits than FP32, as cuBLASLt's: README decision 11) and adds it to an FP32
// accumulator, the promotion interval of cuBLASLt with fast accumulation off (128 K). The epilogue is f64:
// the sum times the exact f64 product of the two f32 scales, plus bias, one rounding to the output dtype.
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_util.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

struct Fp8MmaArgs {
  const uint8_t* w = nullptr;
  int64_t ld_w = 0;
  const float* w_scale = nullptr;
  const uint8_t* x = nullptr;
  int64_t ld_x = 0;
  const float* x_scale = nullptr;
  int64_t x_scale_stride = 0;
  int64_t m = 0, n = 0, k = 0;
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int sm_count = 132;
  // Launched right after the kernel that writes x (the quantizer): a programmatic dependent launch whose
  // first weight loads overlap it.
  bool programmatic = false;
};

// Benchmark and test overrides (0: the table / the wave rule).
struct Fp8MmaForce {
  int splits = 0;
  int token_tiles = 0;  // 1, 2, 4 or 8 (8-token MMA columns per block)
};
void fp8_mma_force(const Fp8MmaForce& f);

// The launch's tile and split of K, in words (explain).
std::string fp8_mma_description(const Fp8MmaArgs& a);

// Runs on `stream`; split-K partial sums go to stream-ordered scratch and are added in split order by a
// second launch. No synchronization: graph-capturable.
Status launch_fp8_mma_gemm(const Fp8MmaArgs& a, Stream stream);

}  // namespace qlinear::cuda
