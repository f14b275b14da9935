// DeviceTimer on CUDA (timing.hpp has the method). Compiled only with the CUDA backend.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.hpp"
#include "bench/timing.hpp"
#include "qlinear/cuda.hpp"

namespace qlinear::bench {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class CudaDeviceTimer final : public DeviceTimer {
 public:
  ~CudaDeviceTimer() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (flush_ != nullptr) cudaFree(flush_);
  }

  Status init(int device) {
    QL_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
    int l2 = 0;
    QL_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    l2_ = l2;
    flush_bytes_ = std::max<size_t>(size_t{256} << 20, 2 * static_cast<size_t>(l2));
    QL_CUDA_CHECK(cudaMalloc(&flush_, flush_bytes_ + 256));
    sink_ = reinterpret_cast<float*>(static_cast<char*>(flush_) + flush_bytes_);
    const char* mode = std::getenv("QLINEAR_BENCH_L2_FLUSH");
    clean_ = mode != nullptr && std::string(mode) == "clean";
    if (const char* sustain = std::getenv("QLINEAR_BENCH_SUSTAIN_MS")) {
      char* end = nullptr;
      const double ms = std::strtod(sustain, &end);
      if (end == sustain || *end != '\0' || !(ms >= 0) || ms > kMaxSustainMs) {
        return Status::error("QLINEAR_BENCH_SUSTAIN_MS=" + std::string(sustain) +
                                        ": expected milliseconds from 0 to " + std::to_string(int(kMaxSustainMs)));
      }
      sustain_ms_ = ms;
    }
    const char* graph = std::getenv("QLINEAR_BENCH_GRAPH");
    graph_ = graph != nullptr && std::string(graph) == "1";
    return Status::ok();
  }

  int64_t l2_bytes() const override { return l2_; }

  std::string method() const override {
    return std::string(graph_ ? "CUDA events around each call replayed from a CUDA graph" : "CUDA events around each call") +
           ", L2 flushed before each repetition by writing " +
           std::to_string(flush_bytes_ >> 20) + " MiB" + (clean_ ? " and reading it back" : "") +
           (sustain_ms_ > 0
                ? ", back-to-back warm-up calls for " + std::to_string(int(sustain_ms_)) +
                      " ms, then repetitions for at least " + std::to_string(int(sustain_ms_)) + " ms (and " +
                      std::to_string(kMinDeviceReps) + "), median"
                : ", at least " + std::to_string(kMinDeviceReps) + " repetitions after " +
                      std::to_string(kDeviceWarmup) + " warm-ups, median");
  }

  std::string describe() const override {
    cudaDeviceProp p{};
    int sm_clock = 0, mem_clock = 0, runtime = 0, driver = 0;
    cudaGetDeviceProperties(&p, device_);
    cudaDeviceGetAttribute(&sm_clock, cudaDevAttrClockRate, device_);
    cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, device_);
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    return std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs, SM clock up to " + std::to_string(sm_clock / 1000) +
           " MHz, memory clock " + std::to_string(mem_clock / 1000) + " MHz, L2 " + std::to_string(l2_ >> 20) +
           " MiB, " + std::to_string(p.totalGlobalMem >> 30) + " GiB, CUDA runtime " + std::to_string(runtime) +
           ", driver " + std::to_string(driver);
  }

  // Writes the flush buffer, evicting every line the call could find, as triton.testing.do_bench does (so
  // that the two agree). The write leaves the L2 full of dirty lines, which the timed call then writes back
  // to DRAM as it reads: QLINEAR_BENCH_L2_FLUSH=clean reads the buffer back after the write, so the L2 holds
  // clean lines (closer to a forward pass, where the previous layer mostly read); decode figures are then a
  // few microseconds lower.
  Status flush(int rep, cudaStream_t s) {
    QL_CUDA_CHECK(cudaMemsetAsync(flush_, rep & 0xFF, flush_bytes_, s));
    if (clean_) QL_RETURN_IF_ERROR(cuda::l2_flush_read(flush_, flush_bytes_, sink_, s));
    return Status::ok();
  }

  Result<Timing> time(const TimedCall& call, int reps, int copies) override {
    return graph_ ? time_graph(call, reps, copies) : time_calls(call, reps);
  }

 private:
  Result<Timing> time_graph(const TimedCall& call, int reps, int copies) {
    // Capture needs a stream other than the legacy default one; the calls run on it for the whole
    // measurement (ordered after the work already queued on the caller's stream).
    const cudaStream_t caller = cuda::current_stream();
    cudaStream_t s = nullptr;
    QL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    QL_CUDA_CHECK(cudaStreamSynchronize(caller));
    std::vector<cudaGraphExec_t> execs;
    Result<Timing> r = Status::error("graph capture did not run");
    {
      cuda::StreamGuard guard(s);
      r = capture_and_time(call, reps, std::max(copies, 1), s, execs);
    }
    cudaStreamSynchronize(s);
    for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
    cudaStreamDestroy(s);
    return r;
  }

  Result<Timing> time_calls(const TimedCall& call, int reps) {
    reps = std::max(reps, kMinDeviceReps);
    const cudaStream_t s = cuda::current_stream();
    QL_RETURN_IF_ERROR(ensure_events(reps));
    const int asked = reps;
    const auto w0 = std::chrono::steady_clock::now();
    QL_RETURN_IF_ERROR(call(0));
    QL_CUDA_CHECK(cudaStreamSynchronize(s));
    const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const bool slow = first * (kDeviceWarmup + reps) > kBudgetSeconds;
    if (slow) reps = std::max(1, static_cast<int>(kBudgetSeconds / std::max(first, 1e-9)));
    for (int i = 1; i < (slow ? 1 : kDeviceWarmup); ++i) QL_RETURN_IF_ERROR(call(i));
    QL_CUDA_CHECK(cudaStreamSynchronize(s));
    // Sustained mode: the clock the GPU settles at under continuous load (power-limited) is lower than the
    // one a short burst of calls finds; warming up for as long as the repetitions then take measures that
    // steady state, as do_bench's time-based warm-up and repetitions do.
    const bool sustain = sustain_ms_ > 0 && !slow;
    if (sustain) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(sustain_ms_);
      for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
        QL_RETURN_IF_ERROR(flush(i, s));
        QL_RETURN_IF_ERROR(call(kDeviceWarmup + i));
        if (i % 8 == 7) QL_CUDA_CHECK(cudaStreamSynchronize(s));  // keep the host within a few calls
      }
      QL_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    const auto timed_from = std::chrono::steady_clock::now();
    auto more = [&](int i) {
      if (i < reps) return true;
      if (!sustain || i >= kMaxSustainReps) return false;
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - timed_from).count() <
             sustain_ms_;
    };
    std::vector<double> host_us, device_ms;
    for (int i = 0; more(i); ++i) {
      QL_RETURN_IF_ERROR(ensure_events(i + 1));  // sustained runs time more repetitions than asked
      // The flush is queued first, so the GPU is busy while the host enqueues the call: the events then
      // bracket the call's device work, not the host's launch latency.
      QL_RETURN_IF_ERROR(flush(i, s));
      QL_CUDA_CHECK(cudaEventRecord(events_[2 * i], s));
      const auto t0 = std::chrono::steady_clock::now();
      const Status st = call(kDeviceWarmup + i);
      host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      QL_CUDA_CHECK(cudaEventRecord(events_[2 * i + 1], s));
      if (!st.is_ok()) {
        cudaStreamSynchronize(s);
        return st;
      }
      // One repetition in flight at a time: the next flush must not overlap this call.
      QL_CUDA_CHECK(cudaEventSynchronize(events_[2 * i + 1]));
    }
    reps = static_cast<int>(host_us.size());
    for (int i = 0; i < reps; ++i) {
      float ms = 0;
      QL_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
      device_ms.push_back(ms);
    }
    QL_CUDA_CHECK(cudaGetLastError());
    Timing r;
    r.median_ms = median_of(device_ms);
    r.min_ms = *std::min_element(device_ms.begin(), device_ms.end());
    r.host_us = median_of(host_us);
    r.reps = reps;
    if (reps < asked) r.note = budget_note(reps, asked, first);
    return r;
  }

 private:
  Result<Timing> capture_and_time(const TimedCall& call, int reps, int copies, cudaStream_t s,
                                  std::vector<cudaGraphExec_t>& execs) {
    QL_RETURN_IF_ERROR(call(0));  // a first call outside the capture: lazy set-up (cuBLASLt plans, scratch pools)
    QL_CUDA_CHECK(cudaStreamSynchronize(s));
    for (int c = 0; c < copies; ++c) {
      cudaGraph_t graph = nullptr;
      QL_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      const Status st = call(c);
      const cudaError_t end = cudaStreamEndCapture(s, &graph);
      if (!st.is_ok()) {
        if (graph != nullptr) cudaGraphDestroy(graph);
        return Status::error("capturing the call in a CUDA graph: " + st.message());
      }
      QL_CUDA_CHECK(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      QL_CUDA_CHECK(inst);
      execs.push_back(exec);
    }
    return time_calls([&](int rep) -> Status {
      QL_CUDA_CHECK(cudaGraphLaunch(execs[static_cast<size_t>(rep % copies)], s));
      return Status::ok();
    }, reps);
  }

  // A pair of events per repetition, created before the repetitions that use them.
  Status ensure_events(int reps) {
    while (events_.size() < 2 * static_cast<size_t>(reps)) {
      cudaEvent_t e = nullptr;
      QL_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    return Status::ok();
  }

  int device_ = 0;
  int64_t l2_ = 0;
  void* flush_ = nullptr;
  float* sink_ = nullptr;
  bool clean_ = false;
  size_t flush_bytes_ = 0;
  double sustain_ms_ = 0;  // QLINEAR_BENCH_SUSTAIN_MS (timing.hpp)
  bool graph_ = false;     // QLINEAR_BENCH_GRAPH=1: each call replayed from a CUDA graph
  std::vector<cudaEvent_t> events_;
};

}  // namespace

Result<std::unique_ptr<DeviceTimer>> DeviceTimer::create(int device) {
  auto t = std::make_unique<CudaDeviceTimer>();
  QL_RETURN_IF_ERROR(t->init(device));
  return std::unique_ptr<DeviceTimer>(std::move(t));
}

}  // namespace qlinear::bench
