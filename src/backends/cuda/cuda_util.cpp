// The public CUDA helpers (include/qlinear/cuda.hpp) and the backend's plumbing (cuda_util.hpp).
#include "backends/cuda/cuda_util.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace qlinear::cuda {

namespace {
thread_local Stream t_current_stream = cudaStreamPerThread;

// The work a thread left on its per-thread default streams, waited for when the thread ends (before the
// runtime tears those streams down). A thread that applied W4A4 / W8A8 MX at M = 64 and ended right after
// its apply returned, while another thread's work was in flight, could leave its joiner waiting forever
// (H100, CUDA 13.0; docs/RELIABILITY.md); with the thread's stream drained first it does not happen.
struct DrainPerThreadStreams {
  uint64_t devices = 0;  // devices whose per-thread stream this thread handed out (ordinals < 64)
  ~DrainPerThreadStreams() {
    if (devices == 0) return;
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    for (int d = 0; d < 64; ++d) {
      if ((devices >> d & 1) == 0) continue;
      if (d != current && cudaSetDevice(d) != cudaSuccess) continue;
      cudaStreamSynchronize(cudaStreamPerThread);  // an error here has nobody left to report to
    }
  }
};
thread_local DrainPerThreadStreams t_drain;
}  // namespace

Stream current_stream() {
  if (t_current_stream == cudaStreamPerThread) {
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < 64) t_drain.devices |= uint64_t{1} << device;
  }
  return t_current_stream;
}
void set_current_stream(Stream stream) { t_current_stream = stream; }

Status check(int cuda_error, const char* call) {
  const auto err = static_cast<cudaError_t>(cuda_error);
  if (err == cudaSuccess) return Status::ok();
  cudaGetLastError();  // clear a non-sticky error
  return Status::error(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                       ")");
}

Status check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status::error(std::string("launch of ") + kernel + " failed: " + cudaGetErrorName(err) + " (" +
                       cudaGetErrorString(err) + ")");
}

Status bind_current_context() {
  thread_local bool bound = false;
  if (bound) return Status::ok();
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  QL_CUDA_CHECK(cudaSetDevice(device));  // since CUDA 12: initializes the primary context and makes it current
  bound = true;
  return Status::ok();
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

Status DeviceGuard::set(int device) {
  int current = 0;
  QL_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) return Status::ok();
  // A bad ordinal is the caller's mistake, not a CUDA failure: say so without making the failing call (which
  // compute-sanitizer would count as an API error).
  int count = 0;
  QL_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    const std::string seen = count == 0   ? "no CUDA device"
                             : count == 1 ? "one device, cuda:0"
                                          : std::to_string(count) + " devices, cuda:0 to cuda:" + std::to_string(count - 1);
    return Status::error("CUDA device " + std::to_string(device) + " does not exist (this process sees " + seen + ")");
  }
  QL_CUDA_CHECK(cudaSetDevice(device));
  previous_ = current;
  return Status::ok();
}

Scratch::~Scratch() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
}

Scratch::Scratch(Scratch&& other) noexcept : ptr_(other.ptr_), stream_(other.stream_) { other.ptr_ = nullptr; }

Scratch& Scratch::operator=(Scratch&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
    ptr_ = other.ptr_;
    stream_ = other.stream_;
    other.ptr_ = nullptr;
  }
  return *this;
}

namespace {
// The default stream-ordered pool hands memory back to the driver at every synchronization unless told to
// keep it (release threshold 0): per-call scratch would then be re-mapped on every apply (tens of us).
// Keep up to 1 GiB cached per device.
Status retain_pool_memory() {
  thread_local int done_mask = 0;  // devices this thread has configured (idempotent across threads)
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 31 && (done_mask >> device & 1)) return Status::ok();
  cudaMemPool_t pool = nullptr;
  QL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = 1ull << 30;
  QL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (device < 31) done_mask |= 1 << device;
  return Status::ok();
}
}  // namespace

Result<Scratch> Scratch::make(size_t bytes, Stream stream) {
  Scratch s;
  s.stream_ = stream;
  if (bytes == 0) return s;
  QL_RETURN_IF_ERROR(retain_pool_memory());
  QL_CUDA_CHECK(cudaMallocAsync(&s.ptr_, bytes, stream));
  if (poison_scratch()) QL_CUDA_CHECK(cudaMemsetAsync(s.ptr_, 0xFF, bytes, stream));
  return s;
}

// QLINEAR_CUDA_POISON_SCRATCH=1: every scratch buffer starts as 0xFF bytes (NaN in every float format), so a
// kernel that reads scratch nobody wrote gives NaN outputs that the tests catch. tools/gpu_sanitize.sh sets
// it for initcheck, which does not see cuBLASLt's TMA stores and would otherwise flag our copies of its
// results as reads of uninitialized memory.
bool poison_scratch() {
  static const bool on = [] {
    const char* v = std::getenv("QLINEAR_CUDA_POISON_SCRATCH");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

Status synchronize() {
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  return Status::ok();
}

Result<Tensor> empty(DType dtype, Shape shape, int device) {
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(device));
  Tensor probe = Tensor::from_blob(nullptr, dtype, shape, nullptr);  // for nbytes() only
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(probe.nbytes(), 1));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    return check(err, ("cudaMalloc(" + std::to_string(bytes) + " bytes for " + probe.describe() + ")").c_str());
  }
  std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
  return Tensor::from_blob(p, dtype, std::move(shape), std::move(owner), Device{DeviceKind::kCuda, device});
}

Status fill_bytes(Tensor& t, uint8_t value) {
  if (t.device().kind != DeviceKind::kCuda) return Status::error("fill_bytes: " + t.describe() + " is not on a CUDA device");
  if (!t.is_contiguous()) return Status::error("fill_bytes: " + t.describe() + " is not contiguous");
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(t.device().index));
  QL_CUDA_CHECK(cudaMemsetAsync(t.raw(), value, static_cast<size_t>(t.nbytes()), current_stream()));
  return Status::ok();
}

Result<Tensor> upload(const void* host, size_t bytes, DType dtype, Shape shape, int device) {
  QL_ASSIGN_OR_RETURN(Tensor d, empty(dtype, std::move(shape), device));
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(device));
  // cudaMemcpyAsync from pageable memory returns once the source has been staged, so the host buffer may
  // go away afterwards; the stream orders the copy before any later use.
  QL_CUDA_CHECK(cudaMemcpyAsync(d.raw(), host, bytes, cudaMemcpyHostToDevice, current_stream()));
  return d;
}

Result<Tensor> to_device(const Tensor& host, int device) {
  if (!host.defined()) return Status::error("to_device: the tensor is undefined");
  if (host.device().kind != DeviceKind::kCpu) {
    return Status::error("to_device: " + host.describe() + " is on " + host.device().to_string() + ", not the host");
  }
  const Tensor c = host.is_contiguous() ? host : host.contiguous();
  return upload(c.raw(), static_cast<size_t>(c.nbytes()), c.dtype(), c.shape(), device);
}

Result<Tensor> to_host(const Tensor& device_tensor) {
  const Tensor& d = device_tensor;
  if (!d.defined()) return Status::error("to_host: the tensor is undefined");
  if (d.device().kind != DeviceKind::kCuda) return Status::error("to_host: " + d.describe() + " is not on a CUDA device");
  if (!d.is_contiguous()) return Status::error("to_host: " + d.describe() + " is not contiguous");
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(d.device().index));
  Tensor h = Tensor::empty(d.dtype(), d.shape());
  QL_CUDA_CHECK(cudaMemcpyAsync(h.raw(), d.raw(), static_cast<size_t>(d.nbytes()), cudaMemcpyDeviceToHost,
                                current_stream()));
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  return h;
}

Status expect_on_device(const Tensor& t, int device, const std::string& what) {
  if (t.device().kind != DeviceKind::kCuda || t.device().index != device) {
    return Status::error(what + " " + t.describe() + " is on " + t.device().to_string() + ", expected cuda:" +
                         std::to_string(device) + " (the device the layer was processed on)");
  }
  return Status::ok();
}

}  // namespace qlinear::cuda

namespace qlinear::cuda {

Result<Tensor> empty_on_stream(DType dtype, Shape shape, int device, Stream stream) {
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(device));
  Tensor probe = Tensor::from_blob(nullptr, dtype, shape, nullptr);  // for nbytes() only
  QL_ASSIGN_OR_RETURN(Scratch s, Scratch::make(static_cast<size_t>(std::max<int64_t>(probe.nbytes(), 1)), stream));
  auto owner = std::make_shared<Scratch>(std::move(s));
  void* p = owner->get();
  return Tensor::from_blob(p, dtype, std::move(shape), std::move(owner), Device{DeviceKind::kCuda, device});
}

Status copy_to_device(const Tensor& host, Tensor& device_tensor) {
  Tensor& d = device_tensor;
  if (!host.defined() || host.device().kind != DeviceKind::kCpu) {
    return Status::error("copy_to_device: the source " + host.describe() + " is not a host tensor");
  }
  if (d.device().kind != DeviceKind::kCuda || !d.is_contiguous()) {
    return Status::error("copy_to_device: the destination " + d.describe() + " is not a contiguous device tensor");
  }
  if (host.dtype() != d.dtype() || host.shape() != d.shape()) {
    return Status::error("copy_to_device: source " + host.describe() + " and destination " + d.describe() +
                         " differ in dtype or shape");
  }
  const Tensor c = host.is_contiguous() ? host : host.contiguous();
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(d.device().index));
  QL_CUDA_CHECK(cudaMemcpyAsync(d.raw(), c.raw(), static_cast<size_t>(c.nbytes()), cudaMemcpyHostToDevice,
                                current_stream()));
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));  // the host copy may be freed on return
  return Status::ok();
}

const std::string& device_name(int device) {
  static std::mutex mutex;
  static std::map<int, std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(device);
  if (it == names.end()) {
    cudaDeviceProp p{};
    it = names.emplace(device, cudaGetDeviceProperties(&p, device) == cudaSuccess ? p.name : "").first;
  }
  return it->second;
}

}  // namespace qlinear::cuda
