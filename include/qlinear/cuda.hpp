#pragma once
// Public CUDA helpers: device tensors, host<->device copies and the current stream. Available when qlinear
// is built with its CUDA backend (QLINEAR_WITH_CUDA); every call returns an error naming the CUDA call and
// the CUDA error string instead of aborting.
//
// Streams: every qlinear CUDA operation runs on the calling thread's current stream, cudaStreamPerThread
// unless set_current_stream() (or a StreamGuard) chose another one (an engine passes its framework's
// current stream, e.g. PyTorch's at::cuda::getCurrentCUDAStream(), this way). A thread that ran qlinear work
// on its cudaStreamPerThread waits for that work when it ends. Device tensors are plain
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

// An error Status naming `call` and the CUDA error, or ok for cudaSuccess (`cuda_error` is a cudaError_t).
// Clears a non-sticky error so later calls start clean (a sticky one, such as an illegal address, keeps
// failing: the context is lost).
Status check(int cuda_error, const char* call);
// Returns the error of a CUDA runtime call from the enclosing function (which returns Status or Result).
#define QL_CUDA_CHECK(call) QL_RETURN_IF_ERROR(::qlinear::cuda::check((call), #call))

// Makes `device` current for a scope and restores the previous one. A device this process does not see is
// an error naming the devices it does see.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  ~DeviceGuard();
  Status set(int device);
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Uninitialized contiguous device memory on `device` (cudaMalloc; the tensor's owner frees it).
Result<Tensor> empty(DType dtype, Shape shape, int device = 0);
// Uninitialized contiguous device memory from `stream`'s stream-ordered pool, freed on that stream when the
// last view goes away: scratch whose lifetime follows the work queued on the stream.
Result<Tensor> empty_on_stream(DType dtype, Shape shape, int device, Stream stream);
// Sets every byte of a contiguous device tensor (tests poison outputs with 0xFF: NaN in every float dtype).
Status fill_bytes(Tensor& t, uint8_t value);

// A contiguous device copy of a host tensor (strided host views are made contiguous first). Synchronous
// with respect to the host: the host tensor may be freed when it returns.
Result<Tensor> to_device(const Tensor& host, int device = 0);
// A contiguous host copy of a contiguous device tensor; waits for the current stream first.
Result<Tensor> to_host(const Tensor& device_tensor);
// Copies a host tensor into an existing contiguous device tensor of the same dtype and shape, on the current
// stream, and waits for the copy (the host tensor may be freed when it returns).
Status copy_to_device(const Tensor& host, Tensor& device_tensor);

// Kernels that CUDA kernels of every family share, on the current stream.
// The largest |x| of each row of a dense activation x [M, K] (F32/BF16/F16, rows contiguous) into f32 [M].
Status row_abs_max(const Tensor& x, Tensor& amax);
// out [M, N] = round_to(out's dtype)(partial + bias): an F32 partial sum (a reduction of per-rank results, say)
// finished the way a kernel's epilogue would finish it; bias [N] in any float dtype, or none.
Status add_bias_and_round(const Tensor& partial, const Tensor* bias, Tensor& out);

}  // namespace qlinear::cuda
