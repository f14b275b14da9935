// The persistent wgmma FP8 GEMM with 192-column tiles (wgmma_fp8_kernel.cuh).
#include "backends/cuda/wgmma_fp8_kernel.cuh"

namespace qlinear::cuda::wgfp8 {

template <>
Status launch_tile<192>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream) {
  return launch_tile_impl<192>(a, map_x, p, stream);
}

}  // namespace qlinear::cuda::wgfp8
