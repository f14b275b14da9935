#pragma once
// cuBLASLt GEMMs as the backend uses them: y[M, N] (row-major) = x[M, K] W[N, K]^T with scales and bias
// in cuBLASLt's epilogue. cuBLASLt is column-major, so it computes y^T = W x^T: its A is the weight (TN:
// both operands K-contiguous, which FP8 requires), its B the activation, its m = N and n = M.
//
// Scale modes (cuBLASLt 12.9+ / 13.0 on sm_90; cublasLt.h cublasLtMatmulMatrixScale_t):
//   kScalar     SCALAR_32F      w_scale, x_scale: one f32 each (device)
//   kOuterVec   OUTER_VEC_32F   w_scale f32 [N], x_scale f32 [M]: y[m, n] = acc * x_scale[m] * w_scale[n]
//   kBlock      BLK128x128_32F (A) and VEC128_32F (B):
//               w_scale f32 [ceil(N/128), round_up(ceil(K/128), 4)] row-major: the checkpoint's layout with
//               rows padded to 16 bytes (unpadded rows of 3 blocks gave wrong results on the H200),
//               x_scale f32 at [kb * M + m] (M fastest; torch._scaled_mm's stride (1, M))
// INT8: exact INT32 output [M, N] without scales or bias (K and the leading dimensions multiples of 4); or,
// where cuBLASLt has such a kernel, scales (FP32 epilogue) and a BF16/F16/F32 output.
// Output BF16/F16/F32; bias in the epilogue (dtype: see bias_dtype_for), added before the one rounding.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/tuning/cublaslt_table.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

enum class LtScaleMode : uint8_t { kNone, kScalar, kOuterVec, kBlock };


struct LtGemm {
  DType ab_dtype = DType::kF8E4M3;  // F8E4M3, I8 (out I32, no scales/bias), BF16, F16 or F32 (both operands)
  const void* w = nullptr;
  int64_t ld_w = 0;  // elements between weight rows
  const void* x = nullptr;
  int64_t ld_x = 0;
  int64_t m = 0, n = 0, k = 0;
  LtScaleMode scale_mode = LtScaleMode::kNone;
  const float* w_scale = nullptr;
  const float* x_scale = nullptr;
  const void* bias = nullptr;  // dtype bias_dtype_for(...)
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int64_t ld_out = 0;  // elements between output rows; 0: N (a column block of a wider output otherwise)
  bool fast_accum = false;  // FP8 only: skip cuBLASLt's periodic promotion (for benchmarks, not a kernel's default)
  const float* alpha_vector = nullptr;  // per-output-column (N) alpha on the device (INT8 probes)
  const LtAlgoConfig* algo = nullptr;   // run this algorithm instead of the table's / the heuristic's choice
  bool use_table = true;  // false: cuBLASLt's heuristic choice, as torch._scaled_mm makes it (the benchmark's anchor)
};

// The bias dtype the epilogue takes for these operand/output dtypes (the output dtype, except FP8 with
// F32 output, which takes BF16).
DType bias_dtype_for(DType ab_dtype, DType out_dtype);

// The tuned table's kind of g, if it has one (FP8 with BF16/F16/F32 output and no fast accumulation, INT8
// with INT32 output).
std::optional<LtKind> lt_kind_of(const LtGemm& g);

// Runs the GEMM on `stream` (workspace from the stream-ordered pool). The algorithm: g.algo if set, else
// the tuned table's for this GPU, kind, (N, K) and M bucket where cuBLASLt accepts it for the problem,
// else cuBLASLt's heuristic first choice; the choice is cached per problem.
// An error names the cuBLASLt call and status, or says that no algorithm supports the combination.
Status lt_gemm(const LtGemm& g, Stream stream);

// cuBLASLt's heuristic candidates for g (at most max_count, best guess first), each with the workspace it
// asked for within max_workspace.
Result<std::vector<LtAlgoConfig>> lt_candidates(const LtGemm& g, int max_count, uint64_t max_workspace);

}  // namespace qlinear::cuda
