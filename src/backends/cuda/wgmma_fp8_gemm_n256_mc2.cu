// The persistent wgmma FP8 GEMM: 256-column tiles, 2-block clusters along M sharing the w tile by multicast (wgmma_fp8_kernel.cuh).
#include "backends/cuda/wgmma_fp8_kernel.cuh"

namespace qlinear::cuda::wgfp8 {

template <>
Status launch_tile<256, 2, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream) {
  return launch_tile_impl<256, 2, true>(a, map_x, p, stream);
}

}  // namespace qlinear::cuda::wgfp8
