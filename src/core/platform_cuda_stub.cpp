// Platform::cuda_device when qlinear is built without CUDA; src/backends/cuda/ provides the real one.
#include "qlinear/platform.hpp"

#if !QLINEAR_WITH_CUDA
namespace qlinear {
bool built_with_cuda() { return false; }
Result<Platform> Platform::cuda_device(int index) {
  return Status::error("qlinear was built without its CUDA backend (no nvcc at configure time); cuda device " +
                       std::to_string(index) + " is not available");
}
}  // namespace qlinear
#endif
