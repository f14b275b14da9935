// The CUDA backend's kernel rows (cuda_kernels.hpp): name, family, summary, route and, for kAuto,
// stream_max_m; and route_kernel, which finds the kernel of each route. What the objects do is in
// cuda_kernel_checks.cpp (checks, routing, process/import), layer_state.hpp and the route_*.cpp files.
#include "backends/cuda/cuda_kernels.hpp"

namespace qlinear::cuda {

// stream_max_m = 0: on the H200 the cuBLASLt route (quantization kernel + GEMM) beat the streaming kernel at
// every M, M = 1 included (8B qkv 15.3 us vs 17.5 us, 70B down 73.4 us vs 88.5 us); the stream route stays
// for N % 16 != 0, which cuBLASLt does not take. wgmma_min_m: from this M the own wgmma GEMM replaces
// cuBLASLt (0: not by default; sm90_fp8_scaled_mm_wgmma runs it when forced). Off: on the 8B shapes at
// M = 512..8192 the own GEMM reaches 0.64-0.89 of cuBLASLt's TFLOPS (quantization fused or not; docs/PERF.md).
// mma_max_m: up to this M layers with per-token activations run the FP8 mma.sync GEMM (fp8_mma_gemm.hpp)
// instead of cuBLASLt, on the same weights: cuBLASLt's OUTER_VEC GEMMs stream the weights far below memory
// speed at small M (the rule and its measurements: CudaLinearKernel::takes_mma_to).
constexpr int64_t kFp8WgmmaMinM = 0;
constexpr int64_t kFp8MmaMaxM = 16;
const CudaLinearKernel kSm90Fp8ScaledMM(
    Family::kFp8ScaledMM, "sm90_fp8_scaled_mm",
    "sm_90a FP8 W8A8: GPU activation quantization, then cuBLASLt FP8 (SCALAR / OUTER_VEC), or at M <= 16 with "
    "per-token activations the FP8 mma.sync GEMM; weight-streaming CUDA-core kernel when N % 16 != 0",
    Route::kAuto, 0, kFp8WgmmaMinM, kFp8MmaMaxM);
const CudaLinearKernel kCublasLtFp8ScaledMM(
    Family::kFp8ScaledMM, "cublaslt_fp8_scaled_mm",
    "sm_90a FP8 W8A8 through cuBLASLt: per-tensor (SCALAR_32F) or per-token x per-channel (OUTER_VEC_32F)",
    Route::kCublasLt);
const CudaLinearKernel kSm90Fp8BlockScaled(
    Family::kFp8BlockScaled, "sm90_fp8_block_scaled",
    "sm_90a FP8 1x128 x 128x128 blocks: weight-streaming GEMV at M = 1, cuBLASLt block mode (M padded to 16) above",
    Route::kAuto);
const CudaLinearKernel kCublasLtFp8BlockScaled(
    Family::kFp8BlockScaled, "cublaslt_fp8_block_scaled",
    "sm_90a FP8 1x128 x 128x128 blocks through cuBLASLt (VEC128_32F x BLK128x128_32F; M padded to 16)",
    Route::kCublasLt);
// stream_max_m of the BF16-GEMM hybrids, measured on the H200 (docs/PERF.md, CudaBench): the streaming
// kernel wins while it is memory-bound and loses once CUDA-core bound. 8B qkv: MXFP8 stream 49.0 us vs BF16
// route 47.0 us at M = 8, 87.1 vs 47.7 at M = 16; 70B down: 308.8 vs 393.3 at M = 8, 596.4 vs 398.7 at
// M = 16 (MXFP6/4 alike) -> MX streams up to M = 8. FP8 weight-only: 70B down 408.4 vs 436.9 at M = 16,
// 1555 vs 466 at M = 64; 8B qkv 61.3 vs 53.1 at M = 16 -> streams up to M = 16.
const CudaLinearKernel kSm90Fp8WeightOnly(
    Family::kFp8WeightOnly, "sm90_fp8_weight_only",
    "sm_90a FP8 W8A16: weight-streaming kernel for M <= 16; above, E4M3 codes widened to BF16 + cuBLASLt BF16 "
    "GEMM, per-row scales in the epilogue (128x128 blocks: streaming only)",
    Route::kAuto, 16);
const CudaLinearKernel kSm90Mxfp8(
    Family::kMxfp8, "sm90_mxfp8",
    "sm_90a MXFP8 W8A16 / W8A8: weight-streaming kernel for M <= 8; above, weights (and MXFP8 activations) "
    "widened exactly to BF16 + cuBLASLt BF16 GEMM",
    Route::kAuto, 8);
const CudaLinearKernel kSm90Mxfp6(
    Family::kMxfp6, "sm90_mxfp6",
    "sm_90a MXFP6 E2M3/E3M2: weight-streaming kernel for M <= 8; above, weights widened exactly to BF16 + "
    "cuBLASLt BF16 GEMM",
    Route::kAuto, 8);
const CudaLinearKernel kSm90Mxfp4(
    Family::kMxfp4, "sm90_mxfp4",
    "sm_90a MXFP4: weight-streaming kernel for M <= 8; above, weights widened exactly to BF16 + cuBLASLt BF16 GEMM",
    Route::kAuto, 8);
const CudaLinearKernel kSm90Fp8WeightOnlyStream(
    Family::kFp8WeightOnly, "sm90_fp8_weight_only_stream",
    "sm_90a FP8 W8A16: weight-streaming CUDA-core GEMM, FP32 accumulation (any M; built for decode)",
    Route::kStream);
const CudaLinearKernel kSm90Mxfp8Stream(
    Family::kMxfp8, "sm90_mxfp8_stream",
    "sm_90a MXFP8 W8A16 / W8A8: weight-streaming CUDA-core GEMM, E8M0 scales per 32 (any M; built for decode)",
    Route::kStream);
const CudaLinearKernel kSm90Mxfp6Stream(
    Family::kMxfp6, "sm90_mxfp6_stream",
    "sm_90a MXFP6 E2M3/E3M2 W6A16 / W6A8: weight-streaming CUDA-core GEMM (any M; built for decode)",
    Route::kStream);
const CudaLinearKernel kSm90Mxfp4Stream(
    Family::kMxfp4, "sm90_mxfp4_stream",
    "sm_90a MXFP4 W4A16 / W4A8: weight-streaming CUDA-core GEMM (any M; built for decode)", Route::kStream);

// wgmma_min_m: from this M the own wgmma INT8 GEMM (epilogue fused) replaces cuBLASLt + the epilogue pass
// (0: not by default; sm90_int8_scaled_mm_wgmma runs it when forced). Off: with the quantization fused it
// measured 1.1-1.6x the time of the quantizer + cuBLASLt + epilogue on the 8B shapes at M >= 1024.
constexpr int64_t kInt8WgmmaMinM = 0;
const CudaLinearKernel kSm90Int8ScaledMM(
    Family::kInt8ScaledMM, "sm90_int8_scaled_mm",
    "sm_90a INT8 W8A8: GPU activation quantization (static/dynamic, sym/asym) + cuBLASLt INT8 GEMM (exact INT32) "
    "+ FP64 epilogue (zero points, scales, bias)",
    Route::kCublasLt, 1, kInt8WgmmaMinM);
const CudaLinearKernel kSm90Int8ScaledMMWgmma(
    Family::kInt8ScaledMM, "sm90_int8_scaled_mm_wgmma",
    "sm_90a INT8 W8A8: GPU activation quantization + the own persistent wgmma INT8 GEMM (exact S32) with the FP64 "
    "epilogue fused (zero points, scales, bias; bit for bit the cuBLASLt route's output)",
    Route::kWgmma);

// The routes of the hybrids above as kernels of their own: what m_routes names and QLINEAR_FORCE_KERNEL
// reaches.
const CudaLinearKernel kSm90Fp8ScaledMMStream(
    Family::kFp8ScaledMM, "sm90_fp8_scaled_mm_stream",
    "sm_90a FP8 W8A8: GPU activation quantization + weight-streaming CUDA-core GEMM (any M and N; the route of "
    "sm90_fp8_scaled_mm when N % 16 != 0)",
    Route::kStream);
const CudaLinearKernel kSm90Fp8ScaledMMWgmma(
    Family::kFp8ScaledMM, "sm90_fp8_scaled_mm_wgmma",
    "sm_90a FP8 W8A8 per-tensor / per-channel: GPU activation quantization + the own persistent wgmma FP8 GEMM "
    "(TMA ring, 128 x 128/192/256 tiles, promotion every 128 K), scales and bias in its epilogue (any M and N)",
    Route::kWgmma);
const CudaLinearKernel kSm90Fp8ScaledMMMma(
    Family::kFp8ScaledMM, "sm90_fp8_scaled_mm_mma",
    "sm_90a FP8 W8A8 per-tensor / per-channel: GPU activation quantization + the FP8 mma.sync m16n8k32 GEMM on the "
    "row-major weights (cp.async pipeline, split-K, promotion every 128 K), scales and bias in its f64 epilogue "
    "(any M and N; built for M <= 64, the small-M route of sm90_fp8_scaled_mm)",
    Route::kMma);
const CudaLinearKernel kSm90Fp8BlockScaledStream(
    Family::kFp8BlockScaled, "sm90_fp8_block_scaled_stream",
    "sm_90a FP8 1x128 x 128x128 blocks: GPU activation quantization + weight-streaming CUDA-core GEMM (any M; "
    "the M = 1 route of sm90_fp8_block_scaled)",
    Route::kStream);
const CudaLinearKernel kSm90Fp8WeightOnlyBf16(
    Family::kFp8WeightOnly, "sm90_fp8_weight_only_bf16",
    "sm_90a FP8 W8A16: E4M3 codes widened to BF16 + cuBLASLt BF16 GEMM, per-row scales in the epilogue (any M; "
    "the large-M route of sm90_fp8_weight_only; BF16 activations, no 128x128 blocks)",
    Route::kDequantBf16);
const CudaLinearKernel kSm90Mxfp8Bf16(
    Family::kMxfp8, "sm90_mxfp8_bf16",
    "sm_90a MXFP8 W8A16 / W8A8: weights (and MXFP8 activations) widened exactly to BF16 + cuBLASLt BF16 GEMM (any "
    "M; the large-M route of sm90_mxfp8; layers whose E8M0 scales keep BF16 exact)",
    Route::kDequantBf16);
const CudaLinearKernel kSm90Mxfp6Bf16(
    Family::kMxfp6, "sm90_mxfp6_bf16",
    "sm_90a MXFP6 E2M3/E3M2: weights widened exactly to BF16 + cuBLASLt BF16 GEMM (any M; the large-M route of "
    "sm90_mxfp6; layers whose E8M0 scales keep BF16 exact)",
    Route::kDequantBf16);
const CudaLinearKernel kSm90Mxfp4Bf16(
    Family::kMxfp4, "sm90_mxfp4_bf16",
    "sm_90a MXFP4: weights widened exactly to BF16 + cuBLASLt BF16 GEMM (any M; the large-M route of sm90_mxfp4; "
    "layers whose E8M0 scales keep BF16 exact)",
    Route::kDequantBf16);

const CudaLinearKernel* route_kernel(Family family, Route route) {
  static const CudaLinearKernel* const kRouteKernels[] = {
      &kCublasLtFp8ScaledMM,   &kSm90Fp8ScaledMMStream,   &kCublasLtFp8BlockScaled, &kSm90Fp8BlockScaledStream,
      &kSm90Fp8ScaledMMWgmma,  &kSm90Int8ScaledMMWgmma,   &kSm90Int8ScaledMM,       &kSm90Fp8WeightOnlyBf16,
      &kSm90Fp8WeightOnlyStream, &kSm90Mxfp8Bf16,         &kSm90Mxfp8Stream,        &kSm90Mxfp6Bf16,
      &kSm90Mxfp6Stream,       &kSm90Mxfp4Bf16,           &kSm90Mxfp4Stream,         &kSm90Fp8ScaledMMMma,
  };
  for (const CudaLinearKernel* k : kRouteKernels) {
    if (k->family() == family && k->route() == route) return k;
  }
  return nullptr;
}

}  // namespace qlinear::cuda
