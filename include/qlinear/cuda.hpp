#pragma once
// Public CUDA helpers: device tensors, host<->device copies and the current stream. Available when qlinear
// is built with its CUDA backend (QLINEAR_WITH_CUDA); every call returns an error naming the CUDA call and
// the CUDA error string instead of aborting.
//
// Streams: every qlinear CUDA operation runs on the calling thread's current stream, cudaStreamPerThread
// unless set_current_stream() (or a StreamGuard) chose another one (an engine passes its framework's
// current stream, e.g. PyTorch's at::cuda::getCurrentCUDAStream(), this way). Device tensors are plain
// cudaMalloc allocations owned by the Tensor (freed when the last view goes away).
#include <cstdint>

#include "qlinear/status.hpp"
#include "qlinear/tensor.hpp"

// The CUDA runtime's stream handle, declared without including cuda_runtime.h (same type as cudaStream_t).
struct CUstream_st;

namespace qlinear::cuda {

using Stream = CUstream_st*;

// The calling thread's current stream (cudaStreamPerThread until set).
Stream current_stream();
void set_current_stream(Stream stream);

// Sets the thread's current stream for a scope and restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream) : previous_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// Waits for the current stream; reports any asynchronous error of earlier work on it.
Status synchronize();

// Uninitialized contiguous device memory on `device` (cudaMalloc; the tensor's owner frees it).
Result<Tensor> empty(DType dtype, Shape shape, int device = 0);
// Sets every byte of a contiguous device tensor (tests poison outputs with 0xFF: NaN in every float dtype).
Status fill_bytes(Tensor& t, uint8_t value);

// A contiguous device copy of a host tensor (strided host views are made contiguous first). Synchronous
// with respect to the host: the host tensor may be freed when it returns.
Result<Tensor> to_device(const Tensor& host, int device = 0);
// A contiguous host copy of a contiguous device tensor; waits for the current stream first.
Result<Tensor> to_host(const Tensor& device_tensor);

}  // namespace qlinear::cuda
