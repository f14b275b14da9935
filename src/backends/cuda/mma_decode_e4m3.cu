// Tensor-core decode GEMM instantiations for E4M3 weights: per-channel (FP8 W8A16) and MXFP8.
#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda::mma_detail {

Status launch_e4m3(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream) {
  if (a.layout.scale == MmaScale::kRow) return launch_scale<MmaCode::kE4M3, MmaScale::kRow>(a, t, splits, partial, stream);
  return launch_scale<MmaCode::kE4M3, MmaScale::kMx32>(a, t, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
