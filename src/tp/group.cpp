// The tensor-parallel group (tensor_parallel.hpp): NCCL communicators over the GPUs of one host driven by
// one process (create) or one rank of a group of processes (join), one host thread per local rank inside
// run(), abort on the first failure or on the watchdog's timeout.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
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

Result<UniqueId> UniqueId::create() {
  ncclUniqueId id;
  QL_NCCL_CHECK(ncclGetUniqueId(&id));
  static_assert(sizeof(id.internal) == sizeof(UniqueId{}.bytes), "NCCL_UNIQUE_ID_BYTES is 128");
  UniqueId out;
  std::memcpy(out.bytes.data(), id.internal, out.bytes.size());
  return out;
}

std::string UniqueId::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

Result<UniqueId> UniqueId::from_hex(std::string_view hex) {
  UniqueId out;
  if (hex.size() != out.bytes.size() * 2) {
    return Status::error("a tensor-parallel group id is " + std::to_string(out.bytes.size() * 2) +
                         " hex digits (UniqueId::hex), got " + std::to_string(hex.size()) + " characters");
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      const size_t at = hi < 0 ? 2 * i : 2 * i + 1;
      return Status::error("a tensor-parallel group id is hex digits; character " + std::to_string(at) + " is '" +
                           std::string(1, hex[at]) + "'");
    }
    out.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

// Per local rank (a slot): its global rank, device, communicator and streams.
struct Group::Impl {
  int world = 0;
  bool nonblocking = false;  // join's communicators: calls may return ncclInProgress (settle)
  std::vector<int> ranks;  // ascending
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<cudaStream_t> comm_streams;
  std::mutex mutex;
  std::string failure;  // set once the communicators were aborted; the group refuses work after that

  int slot_of(int rank) const {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank) return static_cast<int>(i);
    }
    return -1;
  }
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
  // The end of a call on a local rank's communicator. A call on a non-blocking communicator (join's) may
  // return ncclInProgress: it finishes in the background and the communicator says when
  // (ncclCommGetAsyncError); blocking ones never return it. Polled under the mutex so that a concurrent
  // abort_all (another rank failed, or the watchdog) never frees the communicator between two polls; after
  // an abort the wait ends with the group's failure.
  Status settle(ncclComm_t comm, ncclResult_t r, const char* call) {
    while (r == ncclInProgress) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure.empty()) return Status::error("the tensor-parallel group was aborted: " + failure);
        ncclResult_t state = ncclSuccess;
        const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
        r = q != ncclSuccess ? q : state;
      }
      if (r == ncclInProgress) std::this_thread::yield();
    }
    return nccl_check(r, call);
  }
  // The communicator of a local rank, or why there is none.
  Result<ncclComm_t> comm(int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.empty()) return Status::error("the tensor-parallel group was aborted: " + failure);
    const int s = slot_of(rank);
    if (s < 0) {
      return Status::error("rank " + std::to_string(rank) + " is not driven by this process (the group of " +
                           std::to_string(world) + " runs it elsewhere)");
    }
    return comms[static_cast<size_t>(s)];
  }
  // Streams for every slot, on its device.
  Status make_streams() {
    streams.assign(devices.size(), nullptr);
    comm_streams.assign(devices.size(), nullptr);
    for (size_t r = 0; r < devices.size(); ++r) {
      cuda::DeviceGuard guard;
      QL_RETURN_IF_ERROR(guard.set(devices[r]));
      QL_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
      QL_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_streams[r], cudaStreamNonBlocking));
    }
    return Status::ok();
  }
};

namespace {

Status check_devices(const std::vector<int>& devices, int group_size) {
  int count = 0;
  QL_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::set<int> seen;
  for (int d : devices) {
    if (d < 0 || d >= count) {
      return Status::error("tensor parallelism over " + std::to_string(group_size) + " GPUs: device " +
                           std::to_string(d) + " does not exist (this machine has " + std::to_string(count) +
                           " CUDA device" + (count == 1 ? "" : "s") + ")");
    }
    if (!seen.insert(d).second) return Status::error("device " + std::to_string(d) + " appears twice in the group");
  }
  return Status::ok();
}

void log_group(const std::string& what) {
  if (log_enabled("tp")) {
    log_line("tp", what + " on NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR));
  }
}

}  // namespace

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Group::~Group() {
  if (!impl_) return;
  for (size_t r = 0; r < impl_->comms.size(); ++r) {
    ncclComm_t c = impl_->comms[r];
    if (c == nullptr) continue;
    // A non-blocking communicator finishes its outstanding work first (ncclCommFinalize, then wait).
    if (impl_->nonblocking) (void)impl_->settle(c, ncclCommFinalize(c), "ncclCommFinalize");
    ncclCommDestroy(c);
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
  QL_RETURN_IF_ERROR(check_devices(devices, static_cast<int>(devices.size())));
  auto impl = std::make_unique<Impl>();
  impl->world = static_cast<int>(devices.size());
  impl->devices = devices;
  for (int r = 0; r < impl->world; ++r) impl->ranks.push_back(r);
  impl->comms.assign(devices.size(), nullptr);
  auto group = std::unique_ptr<Group>(new Group(std::move(impl)));
  QL_RETURN_IF_ERROR(group->impl_->make_streams());
  QL_NCCL_CHECK(ncclCommInitAll(group->impl_->comms.data(), static_cast<int>(devices.size()), devices.data()));
  log_group("group of " + std::to_string(devices.size()) + " GPUs in one process");
  return group;
}

Result<std::unique_ptr<Group>> Group::join(const UniqueId& id, int rank, int size, int device) {
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::error("joining a tensor-parallel group as rank " + std::to_string(rank) + " of " +
                         std::to_string(size) + ": the rank must be in [0, size) and the size at least 1");
  }
  QL_RETURN_IF_ERROR(keep_nvls_off());
  QL_RETURN_IF_ERROR(check_devices({device}, size));
  auto impl = std::make_unique<Impl>();
  impl->world = size;
  impl->ranks = {rank};
  impl->devices = {device};
  impl->comms.assign(1, nullptr);
  auto group = std::unique_ptr<Group>(new Group(std::move(impl)));
  QL_RETURN_IF_ERROR(group->impl_->make_streams());
  cuda::DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(device));
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes.data(), id.bytes.size());
  // Non-blocking, so that a rank that never comes ends in an error here instead of a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, nid, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    return nccl_check(started, "ncclCommInitRankConfig");
  }
  const auto limit = std::chrono::duration<double>(timeout_seconds());
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t state = started;
  while (state == ncclInProgress) {
    if (std::chrono::steady_clock::now() - t0 > limit) {
      ncclCommAbort(comm);
      return Status::error("rank " + std::to_string(rank) + " of " + std::to_string(size) + " (cuda:" +
                           std::to_string(device) + "): the other ranks did not all join within " +
                           std::to_string(static_cast<int>(timeout_seconds())) + " s (QLINEAR_TP_TIMEOUT_S); each " +
                           "of the " + std::to_string(size) + " processes must call join with the same id");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) state = q;
  }
  if (state != ncclSuccess) {
    ncclCommAbort(comm);
    return nccl_check(state, "ncclCommInitRankConfig");
  }
  group->impl_->comms[0] = comm;
  group->impl_->nonblocking = true;
  log_group("rank " + std::to_string(rank) + " of a group of " + std::to_string(size) + " processes");
  return group;
}

int Group::size() const { return impl_->world; }
const std::vector<int>& Group::local_ranks() const { return impl_->ranks; }
int Group::local_index(int rank) const { return impl_->slot_of(rank); }
bool Group::is_local(int rank) const { return impl_->slot_of(rank) >= 0; }
int Group::device(int rank) const {
  const int s = impl_->slot_of(rank);
  return s < 0 ? -1 : impl_->devices[static_cast<size_t>(s)];
}
cuda::Stream Group::stream(int rank) const {
  const int s = impl_->slot_of(rank);
  return s < 0 ? nullptr : impl_->streams[static_cast<size_t>(s)];
}
cuda::Stream Group::comm_stream(int rank) const {
  const int s = impl_->slot_of(rank);
  return s < 0 ? nullptr : impl_->comm_streams[static_cast<size_t>(s)];
}

Status Group::run(const std::function<Status(int rank)>& fn) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (!impl_->failure.empty()) return Status::error("the tensor-parallel group was aborted: " + impl_->failure);
  }
  const int w = static_cast<int>(impl_->ranks.size());
  std::vector<Status> results(static_cast<size_t>(w), Status::ok());
  std::mutex done_mutex;
  std::condition_variable done_cv;
  int done = 0;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(w));
  for (int i = 0; i < w; ++i) {
    threads.emplace_back([&, i] {
      const int r = impl_->ranks[static_cast<size_t>(i)];
      Status s = [&]() -> Status {
        cuda::DeviceGuard guard;
        QL_RETURN_IF_ERROR(guard.set(impl_->devices[static_cast<size_t>(i)]));
        cuda::StreamGuard stream_guard(impl_->streams[static_cast<size_t>(i)]);
        QL_RETURN_IF_ERROR(fn(r));
        QL_CUDA_CHECK(cudaStreamSynchronize(impl_->streams[static_cast<size_t>(i)]));
        QL_CUDA_CHECK(cudaStreamSynchronize(impl_->comm_streams[static_cast<size_t>(i)]));
        return Status::ok();
      }();
      if (!s.is_ok()) {
        const int dev = impl_->devices[static_cast<size_t>(i)];
        s = Status::error("rank " + std::to_string(r) + " (cuda:" + std::to_string(dev) + "): " + s.message());
        impl_->abort_all(s.message());
      }
      std::lock_guard<std::mutex> lock(done_mutex);
      results[static_cast<size_t>(i)] = std::move(s);
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

// A collective on a local rank's communicator `comm`, waited for by Impl::settle.
#define QL_NCCL_CALL(call) QL_RETURN_IF_ERROR(impl_->settle(comm, (call), #call))

Status Group::all_reduce_sum(int rank, Tensor& t) {
  QL_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(t));
  QL_NCCL_CALL(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type, ncclSum, comm,
                             cuda::current_stream()));
  return Status::ok();
}

Status Group::all_reduce_max(int rank, Tensor& t) {
  QL_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(t));
  QL_NCCL_CALL(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type, ncclMax, comm,
                             cuda::current_stream()));
  return Status::ok();
}

Status Group::all_gather(int rank, const Tensor& in, Tensor& out) {
  QL_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(in));
  if (out.numel() != in.numel() * size() || out.dtype() != in.dtype()) {
    return Status::error("all_gather: output " + out.describe() + " must hold " + std::to_string(size()) + " x " +
                         in.describe());
  }
  QL_NCCL_CALL(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), type, comm,
                             cuda::current_stream()));
  return Status::ok();
}

Status Group::reduce_scatter_sum(int rank, const Tensor& in, Tensor& out) {
  QL_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->comm(rank));
  QL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(in));
  if (in.numel() != out.numel() * size() || out.dtype() != in.dtype()) {
    return Status::error("reduce_scatter_sum: input " + in.describe() + " must be " + std::to_string(size()) +
                         " x the output " + out.describe());
  }
  QL_NCCL_CALL(ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), type, ncclSum, comm,
                                 cuda::current_stream()));
  return Status::ok();
}

}  // namespace qlinear::tp
