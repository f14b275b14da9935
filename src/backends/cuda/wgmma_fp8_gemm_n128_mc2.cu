// The persistent wgmma GEMM: FP8, 128-column tiles, 2-block clusters along M sharing the w tile by multicast
// (wgmma_persistent.cuh).
#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda::wgp {

QL_WGMMA_TILE(128, 2, Mode::kFp8) { return launch_tile_impl<128, 2, Mode::kFp8>(map_x, w, ld_w, n, k, p, stream); }

}  // namespace qlinear::cuda::wgp
