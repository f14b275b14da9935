// Registers-kernel instantiations (mma_decode_regs.cuh) for E2M1 weights: MXFP4 and NVFP4.
#include "backends/cuda/mma_decode_regs.cuh"

namespace qlinear::cuda::mma_detail {

Status launch_regs_e2m1(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial, Stream stream) {
  if (a.layout.scale == MmaScale::kNv16) {
    return launch_regs_scale<MmaCode::kE2M1, MmaScale::kNv16>(a, token_tiles, depth, splits, partial, stream);
  }
  return launch_regs_scale<MmaCode::kE2M1, MmaScale::kMx32>(a, token_tiles, depth, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
