#pragma once
// The CPU kernels' threads: how many a call uses (a cost model) and a small persistent pool that runs them.
//
// Why not OpenMP: with other busy processes on the cores, an OpenMP team whose threads spin at the closing
// barrier waits for every member to have been scheduled, so a 0.1 ms layer paid a 4 ms scheduler tick per
// parallel region. Here the caller and the workers claim items from a shared counter, so the caller does
// every item nobody else took; it never waits for a worker that has not started, only for items that are
// already running. Waits spin briefly (a wake-up costs more than a short spin) and then sleep on a futex,
// giving the core back. A call with little work runs on the calling thread without touching the pool.
//
// NOTES: everything here is compiled at baseline flags (src/core). The header has no inline function
// other than the lambda adapter, whose instantiations are local to each caller's translation unit, so the
// AVX2 / AVX-512 files may include it (x86/int8_isa.hpp NOTES explain why that matters).
#include <cstdint>
#include <type_traits>

namespace qlinear::threads {

// Cost model: one core streams ~10 GB/s of weights from DRAM and sustains ~40 f32 GFLOP/s in these
// kernels (AVX2 FMA; the INT8 kernels pass their own rate). Waking a sleeping worker costs ~10-30 us and,
// on a busy machine, risks waiting for a descheduled one; so a thread is added only per 100 us of
// estimated single-thread work: demo-sized layers (256x512, M = 16: ~0.1 ms) run on one thread, a
// 4096x4096 layer at M = 1 (~8 MB of 4-bit weights, ~0.8 ms) on every allowed core.
inline constexpr double kBytesPerNs = 10.0;
inline constexpr double kF32FlopsPerNs = 40.0;
inline constexpr double kMinNsPerThread = 100'000.0;

// Threads for a call that reads `bytes` and does `flops` operations at `flops_per_ns` on one core:
// 1 + one more per kMinNsPerThread of estimated work, at most max_threads().
int threads_for(int64_t bytes, int64_t flops, double flops_per_ns = kF32FlopsPerNs);

// The cap on threads per call: set_max_threads(n) when n > 0, else QLINEAR_NUM_THREADS, else
// OMP_NUM_THREADS (its first value), else default_threads().
int max_threads();
void set_max_threads(int n);  // n <= 0: back to the environment / default
// The CPUs this process may use: the sched_getaffinity mask, lowered by a cgroup CPU quota (cpu.max, or
// cpu.cfs_quota_us / cpu.cfs_period_us), rounded up; at least 1.
int default_threads();

// Runs fn(ctx, i) for every i in [0, items) on up to `threads` threads, the calling thread included, and
// returns when all are done. Items are claimed one at a time in no fixed order, so an item's result must not
// depend on which thread runs it. Runs everything on the calling thread when threads <= 1, when called
// from inside an item, or while another thread's call holds the pool.
using ItemFn = void (*)(void* ctx, int64_t item);
void parallel_run(int64_t items, int threads, ItemFn fn, void* ctx);

template <class F>
void parallel_for(int64_t items, int threads, F&& f) {
  using Fn = std::remove_reference_t<F>;
  parallel_run(items, threads, [](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); }, &f);
}

// A 64-byte aligned buffer of at least `bytes` owned by this thread, slot 0 or 1 (kept and reused by later
// calls on the thread; its contents are not preserved when it grows). For per-item scratch in kernels.
void* scratch(int slot, int64_t bytes);

// Test hooks: the `threads` argument of this thread's most recent parallel_run (0 before any), and a
// scoped override of kMinNsPerThread (<= 0: restore) so that small test layers can be run threaded.
int last_requested_threads();
void set_min_ns_per_thread_for_testing(double ns);

}  // namespace qlinear::threads
