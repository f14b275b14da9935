// Registers-kernel instantiations (mma_decode_regs.cuh) for E4M3 weights: per-channel (FP8 W8A16) and MXFP8.
#include "backends/cuda/mma_decode_regs.cuh"

namespace qlinear::cuda::mma_detail {

Status launch_regs_e4m3(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial, Stream stream) {
  if (a.layout.scale == MmaScale::kRow) {
    return launch_regs_scale<MmaCode::kE4M3, MmaScale::kRow>(a, token_tiles, depth, splits, partial, stream);
  }
  return launch_regs_scale<MmaCode::kE4M3, MmaScale::kMx32>(a, token_tiles, depth, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
