// The persistent wgmma GEMM: FP8, 256-column tiles accumulated across K (the benchmark's fast-accumulation
// diagnostic) (wgmma_persistent.cuh).
#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda::wgp {

QL_WGMMA_TILE(256, 1, Mode::kFp8Fast) {
  return launch_tile_impl<256, 1, Mode::kFp8Fast>(map_x, w, ld_w, n, k, p, stream);
}

}  // namespace qlinear::cuda::wgp
