// The tensor-parallel group (tensor_parallel.hpp): NCCL communicators over the GPUs of one host, one
// host thread per rank inside run(), abort on the first failure or on the watchdog's timeout.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "qlinear/cuda.hpp"
#include "qlinear/log.hpp"
#include "qlinear/tensor_parallel.hpp"

namespace qlinear::tp {

namespace {

Status nccl_check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return Status::ok();
  return Status::error(std::string(call) + " failed: " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) +
                       ")");
}
#define QL_NCCL_CHECK(call) QL_RETURN_IF_ERROR(nccl_check((call), #call))

Result<ncclDataType_t> nccl_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    default: return Status::error("collectives take f32, bf16 or f16 tensors, got " + t.describe());
  }
}

// NVLink multicast (NVLS) stays off: on shared hosts a program using it can take the GPUs out of service.
Status keep_nvls_off() {
  const char* v = std::getenv("NCCL_NVLS_ENABLE");
  if (v == nullptr) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    return Status::ok();
  }
  if (std::string(v) != "0") {
    return Status::error(std::string("NCCL_NVLS_ENABLE=") + v +
                         ": qlinear keeps NVLink multicast off (unset the variable or set it to 0)");
  }
  return Status::ok();
}

double timeout_seconds() {
  const char* v = std::getenv("QLINEAR_TP_TIMEOUT_S");
  if (v == nullptr) return 300.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && s > 0 && s < 1e6 ? s : 300.0;
}

}  // namespace

bool available() { return true; }

struct Group::Impl {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<cudaStream_t> comm_streams;
  std::mutex mutex;
  std::string failure;  // set once the communicators were aborted; the group refuses work after that

  // Aborts every communicator once (unblocks ranks waiting in a collective).
  void abort_all(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.empty()) return;
    failure = why;
    for (ncclComm_t& c : comms) {
      if (c != nullptr) ncclCommAbort(c);
      c = nullptr;
    }
  }
  Status check_comm(int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.empty()) return Status::error("the tensor-parallel group was aborted: " + failure);
    if (rank < 0 || rank >= static_cast<int>(comms.size())) {
      return Status::error("rank " + std::to_string(rank) + " is outside the group of " +
                           std::to_string(comms.size()));
    }
    return Status::ok();
  }
};

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Group::~Group() {
  if (!impl_) return;
  for (size_t r = 0; r < impl_->comms.size(); ++r) {
    if (impl_->comms[r] != nullptr) ncclCommDestroy(impl_->comms[r]);
  }
  for (size_t r = 0; r < impl_->streams.size(); ++r) {
    cuda::DeviceGuard guard;
    if (!guard.set(impl_->devices[r]).is_ok()) continue;
    if (impl_->streams[r] != nullptr) cudaStreamDestroy(impl_->streams[r]);
    if (impl_->comm_streams[r] != nullptr) cudaStreamDestroy(impl_->comm_streams[r]);
  }
}

Result<std::unique_ptr<Group>> Group::create(const std::vector<int>& devices) {
  if (devices.empty()) return Status::error("a tensor-parallel group needs at least one GPU");
  QL_RETURN_IF_ERROR(keep_nvls_off());
  int count = 0;
  QL_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::set<int> seen;
  for (int d : devices) {
    if (d < 0 || d >= count) {
      return Status::error("tensor parallelism over " + std::to_string(devices.size()) + " GPUs: device " +
                           std::to_string(d) + " does not exist (this machine has " + std::to_string(count) +
                           " CUDA device" + (count == 1 ? "" : "s") + ")");
    }
    if (!seen.insert(d).second) return Status::error("device " + std::to_string(d) + " appears twice in the group");
  }
  auto impl = std::make_unique<Impl>();
  impl->devices = devices;
  impl->comms.assign(devices.size(), nullptr);
  impl->streams.assign(devices.size(), nullptr);
  impl->comm_streams.assign(devices.size(), nullptr);
  auto group = std::unique_ptr<Group>(new Group(std::move(impl)));
  for (size_t r = 0; r < devices.size(); ++r) {
    cuda::DeviceGuard guard;
    QL_RETURN_IF_ERROR(guard.set(devices[r]));
    QL_CUDA_CHECK(cudaStreamCreateWithFlags(&group->impl_->streams[r], cudaStreamNonBlocking));
    QL_CUDA_CHECK(cudaStreamCreateWithFlags(&group->impl_->comm_streams[r], cudaStreamNonBlocking));
  }
  QL_NCCL_CHECK(ncclCommInitAll(group->impl_->comms.data(), static_cast<int>(devices.size()), devices.data()));
  if (log_enabled("tp")) {
    log_line("tp", "group of " + std::to_string(devices.size()) + " GPUs on NCCL " + std::to_string(NCCL_MAJOR) + "." +
                       std::to_string(NCCL_MINOR));
  }
  return group;
}

int Group::size() const { return static_cast<int>(impl_->devices.size()); }
int Group::device(int rank) const { return impl_->devices.at(static_cast<size_t>(rank)); }
cuda::Stream Group::stream(int rank) const { return impl_->streams.at(static_cast<size_t>(rank)); }
cuda::Stream Group::comm_stream(int rank) const { return impl_->comm_streams.at(static_cast<size_t>(rank)); }

Status Group::run(const std::function<Status(int rank)>& fn) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (!impl_->failure.empty()) return Status::error("the tensor-parallel group was aborted: " + impl_->failure);
  }
  const int w = size();
  std::vector<Status> results(static_cast<size_t>(w), Status::ok());
  std::mutex done_mutex;
  std::condition_variable done_cv;
  int done = 0;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    threads.emplace_back([&, r] {
      Status s = [&]() -> Status {
        cuda::DeviceGuard guard;
        QL_RETURN_IF_ERROR(guard.set(device(r)));
        cuda::StreamGuard stream_guard(stream(r));
        QL_RETURN_IF_ERROR(fn(r));
        QL_CUDA_CHECK(cudaStreamSynchronize(impl_->streams[static_cast<size_t>(r)]));
        QL_CUDA_CHECK(cudaStreamSynchronize(impl_->comm_streams[static_cast<size_t>(r)]));
        return Status::ok();
      }();
      if (!s.is_ok()) {
        s = Status::error("rank " + std::to_string(r) + " (cuda:" + std::to_string(device(r)) + "): " + s.message());
        impl_->abort_all(s.message());
      }
      std::lock_guard<std::mutex> lock(done_mutex);
      results[static_cast<size_t>(r)] = std::move(s);
      ++done;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(done_mutex);
    const auto limit = std::chrono::duration<double>(timeout_seconds());
    if (!done_cv.wait_for(lock, limit, [&] { return done == w; })) {
      lock.unlock();
      impl_->abort_all("no progress within " + std::to_string(static_cast<int>(timeout_seconds())) +
                       " s (QLINEAR_TP_TIMEOUT_S); a rank is stuck");
    }
  }
  for (std::thread& t : threads) t.join();
  // The first failure is the cause; ranks that failed after the abort only report its consequence.
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (const Status& s : results) {
    if (!s.is_ok() && impl_->failure == s.message()) return s;
  }
  for (const Status& s : results) {
    if (!s.is_ok()) return s;
  }
  if (!impl_->failure.empty()) return Status::error("the tensor-parallel group was aborted: " + impl_->failure);
  return Status::ok();
}

Status Group::all_reduce_sum(int rank, Tensor& t) {
  QL_RETURN_IF_ERROR(impl_->check_comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(t));
  QL_NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type, ncclSum,
                              impl_->comms[static_cast<size_t>(rank)], cuda::current_stream()));
  return Status::ok();
}

Status Group::all_reduce_max(int rank, Tensor& t) {
  QL_RETURN_IF_ERROR(impl_->check_comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(t));
  QL_NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type, ncclMax,
                              impl_->comms[static_cast<size_t>(rank)], cuda::current_stream()));
  return Status::ok();
}

Status Group::all_gather(int rank, const Tensor& in, Tensor& out) {
  QL_RETURN_IF_ERROR(impl_->check_comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(in));
  if (out.numel() != in.numel() * size() || out.dtype() != in.dtype()) {
    return Status::error("all_gather: output " + out.describe() + " must hold " + std::to_string(size()) + " x " +
                         in.describe());
  }
  QL_NCCL_CHECK(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), type,
                              impl_->comms[static_cast<size_t>(rank)], cuda::current_stream()));
  return Status::ok();
}

}  // namespace qlinear::tp
