// The persistent wgmma FP8 GEMM: 192-column tiles, one block per tile (wgmma_fp8_kernel.cuh).
#include "backends/cuda/wgmma_fp8_kernel.cuh"

namespace qlinear::cuda::wgfp8 {

template <>
Status launch_tile<192, 1, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream) {
  return launch_tile_impl<192, 1, true>(a, map_x, p, stream);
}

}  // namespace qlinear::cuda::wgfp8
