// Shared-memory wgmma decode GEMM instantiations for E4M3 weights: per-channel (FP8 W8A16) and MXFP8 (folded).
#include "backends/cuda/mma_decode_wgmma_ss.cuh"

namespace qlinear::cuda::mma_wgmma {

Status launch_ss_e4m3(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  if (a.layout.scale == MmaScale::kRow) return launch_rows_ss<MmaCode::kE4M3, MmaScale::kRow>(a, p, partial, stream);
  return launch_rows_ss<MmaCode::kE4M3, MmaScale::kMx32>(a, p, partial, stream);
}

}  // namespace qlinear::cuda::mma_wgmma
