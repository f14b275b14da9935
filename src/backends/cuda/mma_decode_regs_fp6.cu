// Registers-kernel instantiations (mma_decode_regs.cuh) for MXFP6 weights (E2M3 and E3M2).
#include "backends/cuda/mma_decode_regs.cuh"

namespace qlinear::cuda::mma_detail {

Status launch_regs_fp6(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial, Stream stream) {
  if (a.layout.code == MmaCode::kE2M3) {
    return launch_regs_scale<MmaCode::kE2M3, MmaScale::kMx32>(a, token_tiles, depth, splits, partial, stream);
  }
  return launch_regs_scale<MmaCode::kE3M2, MmaScale::kMx32>(a, token_tiles, depth, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
