// The persistent wgmma GEMM: FP8, 192-column tiles, one block per tile (wgmma_persistent.cuh).
#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda::wgp {

QL_WGMMA_TILE(192, 1, Mode::kFp8) { return launch_tile_impl<192, 1, Mode::kFp8>(map_x, w, ld_w, n, k, p, stream); }

}  // namespace qlinear::cuda::wgp
