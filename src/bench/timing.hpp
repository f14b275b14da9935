#pragma once
// The one measuring method per device, used by every benchmark of the project (qlinear bench and its
// anchors, the CUDA test benchmark):
//   CPU:  wall clock around each call after one warm-up call; the caller rotates processed copies of the
//         weights whose total exceeds the last-level cache twice (cold_copies_for), so each call reads its
//         weights from DRAM as a decode step does. Median and min.
//   CUDA: CUDA events recorded on the stream around each call; before each repetition the L2 is flushed by
//         writing a buffer of max(2 x L2, 256 MiB), as triton.testing.do_bench does
//         (QLINEAR_BENCH_L2_FLUSH=clean also reads it back: timing_cuda.cpp says why); the caller rotates
//         weight copies when a layer fits in the L2 (device_copies_for). At least kMinDeviceReps
//         repetitions after kDeviceWarmup warm-up calls; median and min. The host-side cost of one call
//         (launches, argument checks: what a CUDA graph removes) is the median host time of enqueuing it,
//         reported apart from the device time.
//         Graph replay (QLINEAR_BENCH_GRAPH=1, `qlinear bench --graph`): the same method around
//         cudaGraphLaunch of the call, captured once per weight copy on a stream of the timer's own: what a
//         caller that captures its decode step (as vLLM and torch.compile do) pays, and the figure to compare
//         with a framework's own graph replay. host_us is then the cost of one cudaGraphLaunch.
//         Sustained (QLINEAR_BENCH_SUSTAIN_MS=T, `qlinear bench --sustain-ms T`): back-to-back flushed calls
//         for T ms before the timed ones, which then go on until T ms have passed (as do_bench's warm-up and
//         rep times do). Under such continuous load an H200 holds a lower, power-limited SM clock than a short
//         burst finds: large GEMMs take up to ~15% longer. Both are true figures of different workloads; the
//         default is the burst, the sustained mode is what a long prefill-heavy run sees.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "qlinear/status.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  double host_us = -1;  // CUDA: median host time of one call (enqueue only); -1 on the CPU (it is the time)
  int reps = 0;
  std::string note;     // why fewer repetitions than asked were timed (kBudgetSeconds), else empty
};

// The wall time one measurement may take: a call so slow (a reference kernel, the host path of a device
// without a kernel for the scheme) that the repetitions asked for would take longer gets fewer (at least
// one, after a single warm-up), and the Timing says so.
inline constexpr double kBudgetSeconds = 2.0;

// A call of the thing measured; `rep` picks the weight copy (rep % copies).
using TimedCall = std::function<Status(int rep)>;

// Random normal [rows, cols] values for a benchmark's operands: at most kDrawRows rows are drawn (drawing a
// 4096 x 14336 activation takes seconds on one core) and repeated down the rows; timing does not depend on
// the values, and every row still has its own memory.
inline constexpr int64_t kDrawRows = 64;
Tensor random_rows(DType dtype, int64_t rows, int64_t cols, uint64_t seed, double stddev);

// ---- CPU ------------------------------------------------------------------------------------------------
int64_t last_level_cache_bytes();  // this CPU's largest cache (sysfs, else sysconf), 32 MiB when neither says
int64_t cold_set_bytes();          // max(256 MiB, 2 x the last-level cache)
// Copies of `bytes` of weights that together exceed cold_set_bytes() (1 .. 64).
int cold_copies_for(int64_t bytes);
// "3 of 20 repetitions: one call takes ..." (Timing::note).
std::string budget_note(int timed, int asked, double call_seconds);
// One warm-up call, then `reps` timed calls (call(1) .. call(reps)), fewer when the budget runs out.
Result<Timing> time_host(const TimedCall& call, int reps);
// The CPU method in words, for the record of a run.
std::string host_method();

// ---- CUDA -----------------------------------------------------------------------------------------------
inline constexpr int kMinDeviceReps = 20;
inline constexpr int kDeviceWarmup = 3;
inline constexpr double kMaxSustainMs = 10000;  // QLINEAR_BENCH_SUSTAIN_MS accepts 0 .. this
inline constexpr int kMaxSustainReps = 100000;  // timed calls of one sustained measurement at most

class DeviceTimer {
 public:
  // A timer on the current device and stream; without the CUDA backend an error saying so.
  static Result<std::unique_ptr<DeviceTimer>> create(int device);
  virtual ~DeviceTimer() = default;
  virtual int64_t l2_bytes() const = 0;
  // "NVIDIA H200, sm_90, 132 SMs, SM clock up to 1980 MHz, memory clock 3201 MHz, L2 60 MiB, CUDA runtime
  // 13000, driver 13000"
  virtual std::string describe() const = 0;
  // The method in words, for the record of a run.
  virtual std::string method() const = 0;
  // Copies of `bytes` of weights to rotate: enough to exceed 2 x L2 when the layer fits in it, else 1.
  int device_copies_for(int64_t bytes) const;
  // kDeviceWarmup warm-up calls, then max(reps, kMinDeviceReps) timed ones (fewer, after one warm-up,
  // when the first call shows that they would exceed kBudgetSeconds). `copies`: the call rotates weight
  // copies as rep % copies (graph replay captures one graph per copy). The call must enqueue its work on
  // cuda::current_stream() as it is when called (graph replay sets a stream of its own).
  virtual Result<Timing> time(const TimedCall& call, int reps, int copies = 1) = 0;
};

}  // namespace qlinear::bench
