// CudaAnchor without the CUDA backend: every anchor says why it cannot run.
#include "bench/cuda_anchors.hpp"

#if !QLINEAR_WITH_CUDA
namespace qlinear::bench {

Result<std::string> CudaAnchor::name_for(const std::string& kind, const Scheme&, int64_t) {
  return Status::error("the CUDA anchor '" + kind + "' needs qlinear built with its CUDA backend");
}

Result<std::unique_ptr<CudaAnchor>> CudaAnchor::create(const std::string& kind, const Scheme&, int64_t, int64_t,
                                                       DeviceTimer&) {
  return Status::error("the CUDA anchor '" + kind + "' needs qlinear built with its CUDA backend");
}

Result<std::unique_ptr<CudaAnchor>> CudaAnchor::create_read_floor(int64_t, int64_t, DeviceTimer&) {
  return Status::error("the CUDA anchor 'read' needs qlinear built with its CUDA backend");
}

}  // namespace qlinear::bench
#endif
