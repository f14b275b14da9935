// The persistent wgmma GEMM: INT8, 128-column tiles (wgmma_persistent.cuh).
#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda::wgp {

QL_WGMMA_TILE(128, 1, Mode::kInt8) { return launch_tile_impl<128, 1, Mode::kInt8>(map_x, w, ld_w, n, k, p, stream); }

}  // namespace qlinear::cuda::wgp
