// Platform::cuda_device through the CUDA runtime. Compiled only when qlinear is built with CUDA; on a
// machine without a GPU (CI) it returns an error that says so, and the GPU tests skip with that reason.
#include <cuda_runtime.h>

#include "qlinear/platform.hpp"

namespace qlinear {

bool built_with_cuda() { return true; }

Result<Platform> Platform::cuda_device(int index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return Status::error(std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  if (index < 0 || index >= count) {
    return Status::error("cuda device " + std::to_string(index) + " does not exist (" + std::to_string(count) +
                         " device(s) present)");
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return Status::error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err));
  Platform p = host_cpu();
  p.kind = PlatformKind::kCuda;
  CudaDeviceInfo info;
  info.index = index;
  info.compute_capability = prop.major * 10 + prop.minor;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  p.cuda = info;
  return p;
}

}  // namespace qlinear
