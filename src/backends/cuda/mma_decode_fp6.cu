// Tensor-core decode GEMM instantiations for MXFP6 weights (E2M3 and E3M2).
#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda::mma_detail {

Status launch_fp6(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream) {
  if (a.layout.code == MmaCode::kE2M3) return launch_scale<MmaCode::kE2M3, MmaScale::kMx32>(a, t, splits, partial, stream);
  return launch_scale<MmaCode::kE3M2, MmaScale::kMx32>(a, t, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
