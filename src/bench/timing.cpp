#include "bench/timing.hpp"

#include "qlinear/random.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace qlinear::bench {

Tensor random_rows(DType dtype, int64_t rows, int64_t cols, uint64_t seed, double stddev) {
  const int64_t drawn = std::min(rows, kDrawRows);
  const Tensor block = random_normal(dtype, {drawn, cols}, seed, stddev);
  if (drawn == rows) return block;
  Tensor out = Tensor::empty(dtype, {rows, cols});
  const int64_t row_bytes = block.nbytes() / drawn;
  for (int64_t r = 0; r < rows; r += drawn) {
    const int64_t n = std::min(drawn, rows - r);
    std::memcpy(static_cast<char*>(out.raw()) + r * row_bytes, block.raw(), static_cast<size_t>(n * row_bytes));
  }
  return out;
}

namespace {

// The largest cache the kernel lists for CPU 0 (/sys/devices/system/cpu/cpu0/cache/index*/size, "32768K"):
// what this machine (a guest included) may use, where glibc's sysconf can report the whole package's L3
// (320 MiB on a 2-core EPYC guest whose caches list 32 MiB). 0 when there is no such list.
int64_t sysfs_largest_cache_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    long long v = 0;
    char unit = 0;
    const int got = std::fscanf(f, "%lld%c", &v, &unit);
    std::fclose(f);
    if (got < 1 || v <= 0) continue;
    const int64_t bytes = unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
    best = std::max(best, bytes);
  }
  return best;
}

}  // namespace

int64_t last_level_cache_bytes() {
  int64_t best = sysfs_largest_cache_bytes();
  if (best > 0) return best;
#ifdef _SC_LEVEL3_CACHE_SIZE
  best = std::max<int64_t>(best, ::sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  best = std::max<int64_t>(best, ::sysconf(_SC_LEVEL2_CACHE_SIZE));
#endif
  return best > 0 ? best : int64_t{32} << 20;
}

int64_t cold_set_bytes() { return std::max<int64_t>(int64_t{256} << 20, 2 * last_level_cache_bytes()); }

int cold_copies_for(int64_t bytes) {
  const int64_t want = cold_set_bytes();
  return static_cast<int>(std::clamp<int64_t>((want + bytes - 1) / std::max<int64_t>(bytes, 1), 1, 64));
}

std::string budget_note(int timed, int asked, double call_seconds) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d of %d repetitions: one call takes %.3g s and a measurement has %.0f s",
                timed, asked, call_seconds, kBudgetSeconds);
  return buf;
}

Result<Timing> time_host(const TimedCall& call, int reps) {
  if (reps < 1) return Status::error("timing: at least one repetition is needed, got " + std::to_string(reps));
  const auto w0 = std::chrono::steady_clock::now();
  QL_RETURN_IF_ERROR(call(0));  // warm-up (and first-call allocations)
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const int asked = reps;
  if (first * reps > kBudgetSeconds) reps = std::max(1, static_cast<int>(kBudgetSeconds / std::max(first, 1e-9)));
  std::vector<double> t;
  t.reserve(static_cast<size_t>(reps));
  for (int i = 1; i <= reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    QL_RETURN_IF_ERROR(call(i));
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  Timing r;
  r.median_ms = t[t.size() / 2];
  r.min_ms = t.front();
  r.reps = reps;
  if (reps < asked) r.note = budget_note(reps, asked, first);
  return r;
}

std::string host_method() {
  return "wall clock around each call after one warm-up, weights cold (processed copies rotated over " +
         std::to_string(cold_set_bytes() >> 20) + " MiB, twice the last-level cache or more), median";
}

int DeviceTimer::device_copies_for(int64_t bytes) const {
  const int64_t l2 = l2_bytes();
  if (bytes >= l2) return 1;
  return static_cast<int>(std::clamp<int64_t>((2 * l2 + bytes - 1) / std::max<int64_t>(bytes, 1), 2, 64));
}

#if !QLINEAR_WITH_CUDA
Result<std::unique_ptr<DeviceTimer>> DeviceTimer::create(int) {
  return Status::error("device timing: qlinear was built without its CUDA backend (configure with -DQLINEAR_CUDA=ON)");
}
#endif

}  // namespace qlinear::bench
