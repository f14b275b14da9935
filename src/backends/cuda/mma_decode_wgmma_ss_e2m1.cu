// Shared-memory wgmma decode GEMM instantiations for E2M1 weights: MXFP4 (folded) and NVFP4.
#include "backends/cuda/mma_decode_wgmma_ss.cuh"

namespace qlinear::cuda::mma_wgmma {

Status launch_ss_e2m1(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  if (a.layout.scale == MmaScale::kNv16) return launch_rows_ss<MmaCode::kE2M1, MmaScale::kNv16>(a, p, partial, stream);
  return launch_rows_ss<MmaCode::kE2M1, MmaScale::kMx32>(a, p, partial, stream);
}

}  // namespace qlinear::cuda::mma_wgmma
