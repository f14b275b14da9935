#pragma once
// Internal CUDA plumbing shared by the CUDA backend: checked calls, the current device, stream-ordered
// scratch memory and the per-thread library handles. Host code only (compiled by the C++ or CUDA compiler).
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "qlinear/cuda.hpp"

namespace qlinear::cuda {

// check() and DeviceGuard are public (qlinear/cuda.hpp).
// The error of the last kernel launch, named after the kernel.
Status check_launch(const char* kernel);

// Makes the current device's primary context current on this thread, once per thread. Driver-API calls
// (cuTensorMapEncodeTiled) act on the thread's current context, which the runtime binds only at its first
// call that needs one: on a fresh thread whose first CUDA work is a layer's apply (a tensor-parallel rank's
// thread, a server's worker), the encode would fail with CUDA_ERROR_INVALID_CONTEXT.
Status bind_current_context();

#define QL_CUDA_CHECK_LAUNCH(name) QL_RETURN_IF_ERROR(::qlinear::cuda::check_launch(name))

// Stream-ordered device memory for one operation (cudaMallocAsync on the current stream, freed on that
// stream when it goes out of scope): quantized activations, scales, cuBLASLt workspace.
class Scratch {
 public:
  Scratch() = default;
  ~Scratch();
  Scratch(Scratch&& other) noexcept;
  Scratch& operator=(Scratch&& other) noexcept;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  static Result<Scratch> make(size_t bytes, Stream stream);
  void* get() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  Stream stream_ = nullptr;
};

// Whether scratch buffers are filled with 0xFF when made (QLINEAR_CUDA_POISON_SCRATCH, for sanitizer runs).
bool poison_scratch();

// A device tensor from a host tensor, or `bytes` copied from host memory, on the current device.
Result<Tensor> upload(const void* host, size_t bytes, DType dtype, Shape shape, int device);

// Evicts the L2 cache by reading `bytes` of `buf` (benchmarks: a read leaves no dirty lines to write back
// inside the timed region, as a memset would).
Status l2_flush_read(const void* buf, size_t bytes, float* sink, Stream stream);
// Reads `bytes` (a multiple of 16) of `buf` as fast as a plain kernel can (one wave, several 16-byte loads in
// flight per thread): the time a layer needs at least to read its weights, at that size (bench's read floor).
Status dram_read_floor(const void* buf, size_t bytes, float* sink, Stream stream);

// The device's name (cudaDeviceProp::name, e.g. "NVIDIA H200"), read once per device; "" when it cannot be
// read. The key of the tuned tables (tuning/).
const std::string& device_name(int device);

// "cuda:0": the device a tensor must be on, for error messages; checks kind and index.
Status expect_on_device(const Tensor& t, int device, const std::string& what);

}  // namespace qlinear::cuda
