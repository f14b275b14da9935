// The persistent wgmma FP8 GEMM: 256-column tiles accumulated across K (the benchmark's fast-accumulation diagnostic) (wgmma_fp8_kernel.cuh).
#include "backends/cuda/wgmma_fp8_kernel.cuh"

namespace qlinear::cuda::wgfp8 {

template <>
Status launch_tile<256, 1, false>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream) {
  return launch_tile_impl<256, 1, false>(a, map_x, p, stream);
}

}  // namespace qlinear::cuda::wgfp8
