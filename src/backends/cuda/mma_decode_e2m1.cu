// Tensor-core decode GEMM instantiations for E2M1 weights: MXFP4 (E8M0 per 32) and NVFP4 (E4M3 per 16).
#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda::mma_detail {

Status launch_e2m1(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream) {
  if (a.layout.scale == MmaScale::kNv16) return launch_scale<MmaCode::kE2M1, MmaScale::kNv16>(a, t, splits, partial, stream);
  return launch_scale<MmaCode::kE2M1, MmaScale::kMx32>(a, t, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
