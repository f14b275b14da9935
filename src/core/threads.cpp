// The CPU kernels' thread pool and thread-count policy (threads.hpp says why it is not OpenMP).
//
// One job at a time: the caller that wins `owner_` publishes (fn, ctx, items) and a new epoch, wakes the
// workers it wants, and claims items like they do. The claim counter and the epoch share one 64-bit word
// (epoch << 32 | next item), so a worker still holding an old epoch can never take an item of a newer job:
// its compare-and-swap fails. fn and ctx are read only after a successful claim, when the job cannot have
// finished (this claim's item is not done), so they are the ones published with that epoch.
#include "core/threads.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qlinear/log.hpp"

namespace qlinear::threads {

namespace {

// How long a waiting thread spins before it sleeps. Workers: long enough to catch the next layer's call
// in a run of back-to-back layers, short enough not to hold a core another process needs. The caller
// waiting for the last running items: they are usually microseconds from done.
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
constexpr auto kCallerSpin = std::chrono::microseconds(100);

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

inline void cpu_relax() { __builtin_ia32_pause(); }

// Spins until done() or `budget` has passed; true when done() became true.
template <class Done>
bool spin_until(Done&& done, std::chrono::microseconds budget) {
  const auto end = std::chrono::steady_clock::now() + budget;
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= end) return done();
  }
}

thread_local bool tls_inside_item = false;
thread_local int tls_last_request = 0;
std::atomic<double> g_min_ns_per_thread{kMinNsPerThread};
std::atomic<int> g_max_threads_override{0};

class Pool {
 public:
  void run(int64_t items, int threads, ItemFn fn, void* ctx) {
    std::unique_lock<std::mutex> own(owner_, std::try_to_lock);
    if (!own.owns_lock()) return run_inline(items, fn, ctx);  // another caller's job is running
    ensure_workers(threads - 1);
    fn_ = fn;
    ctx_ = ctx;
    items_.store(static_cast<uint32_t>(items), std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    wanted_.store(threads - 1, std::memory_order_relaxed);
    const uint32_t epoch = ++epoch_counter_;
    state_.store(static_cast<uint64_t>(epoch) << 32, std::memory_order_release);
    wake_.store(epoch, std::memory_order_seq_cst);
    // Every sleeper wakes (a futex cannot pick workers by index); those this job does not want sleep again
    // at once.
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(&wake_, INT32_MAX);

    tls_inside_item = true;
    work(epoch);
    tls_inside_item = false;
    // Wait only for items already claimed (running on a worker): unclaimed ones were done above.
    const uint32_t n = static_cast<uint32_t>(items);
    auto all_done = [&] { return done_.load(std::memory_order_acquire) == n; };
    if (!spin_until(all_done, kCallerSpin)) {
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != n;) futex_wait(&done_, d);
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
  }

  static void run_inline(int64_t items, ItemFn fn, void* ctx) {
    const bool outer = tls_inside_item;
    tls_inside_item = true;
    for (int64_t i = 0; i < items; ++i) fn(ctx, i);
    tls_inside_item = outer;
  }

 private:
  // Claims and runs items of job `epoch` until none is left.
  void work(uint32_t epoch) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      uint32_t item;
      for (;;) {
        if (static_cast<uint32_t>(s >> 32) != epoch) return;
        item = static_cast<uint32_t>(s);
        if (item >= items_.load(std::memory_order_relaxed)) return;
        if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
      }
      fn_(ctx_, item);
      const uint32_t done = done_.fetch_add(1, std::memory_order_seq_cst) + 1;
      if (done == items_.load(std::memory_order_relaxed) && caller_sleeping_.load(std::memory_order_seq_cst)) {
        futex_wake(&done_, 1);
      }
    }
  }

  void worker_main(int index) {
    tls_inside_item = true;  // a kernel item that calls parallel_run runs it inline
    uint32_t seen = 0;
    bool worked = false;  // spin for the next job only after taking part in one
    for (;;) {
      auto woken = [&] { return wake_.load(std::memory_order_acquire) != seen; };
      if (!worked || !spin_until(woken, kWorkerSpin)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (wake_.load(std::memory_order_seq_cst) == seen) futex_wait(&wake_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = wake_.load(std::memory_order_acquire);
      worked = index < wanted_.load(std::memory_order_relaxed);
      if (worked) work(seen);
    }
  }

  void ensure_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { worker_main(index); });
      workers_.back().detach();
    }
  }

  std::mutex owner_;
  std::vector<std::thread> workers_;  // detached: they sleep on a futex until the process ends
  uint32_t epoch_counter_ = 0;
  ItemFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint64_t> state_{0};  // epoch << 32 | next unclaimed item
  std::atomic<uint32_t> items_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> wake_{0};  // the latest epoch; workers sleep on it
  std::atomic<int> wanted_{0};     // workers 0..wanted-1 join the current job
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: its detached workers may still be waiting at exit
  return *p;
}

// A positive integer from the environment (the first of a comma list, as OMP_NUM_THREADS allows), or 0.
int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || (*end != '\0' && *end != ',') || n < 1 || n > 4096) {
    log_line("threads", std::string(name) + "='" + v + "' is not a thread count (1..4096); ignored");
    return 0;
  }
  return static_cast<int>(n);
}

// ceil(quota / period) of the cgroup CPU limit, or 0 when there is none.
int cgroup_cpu_limit() {
  double quota = -1, period = 0;
  if (std::ifstream f("/sys/fs/cgroup/cpu.max"); f) {  // cgroup v2: "max 100000" or "200000 100000"
    std::string q;
    f >> q >> period;
    if (q != "max") quota = std::atof(q.c_str());
  } else if (std::ifstream fq("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), fp("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
             fq && fp) {  // cgroup v1: quota -1 = none
    fq >> quota;
    fp >> period;
  }
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(quota / period)));
}

int compute_default_threads() {
  int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = std::max(1, CPU_COUNT(&set));
  const int quota = cgroup_cpu_limit();
  return quota > 0 ? std::min(n, quota) : n;
}

}  // namespace

int default_threads() {
  static const int n = compute_default_threads();
  return n;
}

int max_threads() {
  if (const int o = g_max_threads_override.load(std::memory_order_relaxed); o > 0) return o;
  static const int env = [] {
    const int q = env_threads("QLINEAR_NUM_THREADS");
    return q > 0 ? q : env_threads("OMP_NUM_THREADS");
  }();
  return env > 0 ? env : default_threads();
}

void set_max_threads(int n) { g_max_threads_override.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int threads_for(int64_t bytes, int64_t flops, double flops_per_ns) {
  const double ns = static_cast<double>(bytes) / kBytesPerNs + static_cast<double>(flops) / flops_per_ns;
  const double per = g_min_ns_per_thread.load(std::memory_order_relaxed);
  const double t = std::floor(ns / per);
  return static_cast<int>(std::clamp(t, 1.0, static_cast<double>(max_threads())));
}

void parallel_run(int64_t items, int threads, ItemFn fn, void* ctx) {
  tls_last_request = threads;
  if (items <= 0) return;
  const int64_t t = std::min<int64_t>({threads, items, max_threads()});
  if (t <= 1 || tls_inside_item || items > 0xFFFFFFFFll) return Pool::run_inline(items, fn, ctx);
  pool().run(items, static_cast<int>(t), fn, ctx);
}

void* scratch(int slot, int64_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
  };
  thread_local Buffer buf[2];  // freed when the thread ends
  thread_local struct Release {
    ~Release() {
      for (Buffer& b : buf) std::free(b.p);
    }
  } release;
  Buffer& b = buf[slot & 1];
  const size_t want = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  if (want > b.size) {
    std::free(b.p);
    b.p = std::aligned_alloc(64, want);
    b.size = want;
  }
  (void)release;
  return b.p;
}

int last_requested_threads() { return tls_last_request; }

void set_min_ns_per_thread_for_testing(double ns) {
  g_min_ns_per_thread.store(ns > 0 ? ns : kMinNsPerThread, std::memory_order_relaxed);
}

}  // namespace qlinear::threads
