// The persistent wgmma GEMM: INT8, 256-column tiles, 2-block clusters along M sharing the w tile by multicast
// (wgmma_persistent.cuh).
#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda::wgp {

QL_WGMMA_TILE(256, 2, Mode::kInt8) { return launch_tile_impl<256, 2, Mode::kInt8>(map_x, w, ld_w, n, k, p, stream); }

}  // namespace qlinear::cuda::wgp
