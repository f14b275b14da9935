// Shared-memory wgmma decode GEMM instantiations for FP6 weights: MXFP6 E2M3 and E3M2 (folded).
#include "backends/cuda/mma_decode_wgmma_ss.cuh"

namespace qlinear::cuda::mma_wgmma {

Status launch_ss_fp6(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  if (a.layout.scale != MmaScale::kMx32) return Status::error("mma_decode wgmma: FP6 weights carry MX scales");
  if (a.layout.code == MmaCode::kE2M3) return launch_rows_ss<MmaCode::kE2M3, MmaScale::kMx32>(a, p, partial, stream);
  return launch_rows_ss<MmaCode::kE3M2, MmaScale::kMx32>(a, p, partial, stream);
}

}  // namespace qlinear::cuda::mma_wgmma
