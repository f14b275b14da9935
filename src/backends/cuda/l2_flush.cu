// l2_flush_read (cuda_util.hpp): a streaming read of a large buffer, for benchmarks.
#include "backends/cuda/cuda_util.hpp"

namespace qlinear::cuda {

namespace {
__global__ void read_kernel(const uint4* p, size_t n, float* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = 1.0f;  // keeps the loads; practically never taken
}
}  // namespace

Status l2_flush_read(const void* buf, size_t bytes, float* sink, Stream stream) {
  read_kernel<<<132 * 8, 512, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  QL_CUDA_CHECK_LAUNCH("l2 flush read_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
