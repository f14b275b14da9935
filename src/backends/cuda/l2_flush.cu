// l2_flush_read and dram_read_floor (cuda_util.hpp): streaming reads of a buffer, for benchmarks.
#include "backends/cuda/cuda_util.hpp"

#include <algorithm>

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
// One resident wave; each thread keeps kUnroll independent 16-byte loads in flight per step (a read-once
// stream: not kept in L1), so that even a few MiB are read at the rate the DRAM gives to that size.
constexpr int kFloorThreads = 512, kUnroll = 4;
__global__ void __launch_bounds__(kFloorThreads) floor_read_kernel(const uint4* p, size_t n, float* sink) {
  const size_t stride = size_t{gridDim.x} * kFloorThreads;
  uint32_t acc = 0;
  size_t i = blockIdx.x * size_t{kFloorThreads} + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = 1.0f;  // keeps the loads; practically never taken
}
}  // namespace

Status dram_read_floor(const void* buf, size_t bytes, float* sink, Stream stream) {
  static const int blocks = [] {
    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, floor_read_kernel, kFloorThreads, 0);
    return std::max(1, sms) * std::max(1, per_sm);
  }();
  floor_read_kernel<<<blocks, kFloorThreads, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  QL_CUDA_CHECK_LAUNCH("dram_read_floor floor_read_kernel");
  return Status::ok();
}

Status l2_flush_read(const void* buf, size_t bytes, float* sink, Stream stream) {
  read_kernel<<<132 * 8, 512, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  QL_CUDA_CHECK_LAUNCH("l2 flush read_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
