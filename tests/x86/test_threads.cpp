// The CPU kernels' thread policy and pool (core/threads.hpp): how many threads a call asks for, and that
// the pool runs every item exactly once whoever calls it (nested, concurrently, back to back). Not timed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/x86/x86_kernels.hpp"
#include "core/threads.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

// Caps the threads at 4 for the test (whatever this machine has) and restores the policy after.
struct FourThreads {
  FourThreads() { set_cpu_threads(4); }
  ~FourThreads() {
    set_cpu_threads(0);
    threads::set_min_ns_per_thread_for_testing(0);
  }
};

TEST(Threads, CostModelKeepsSmallWorkOnOneThread) {
  FourThreads cap;
  EXPECT_EQ(cpu_threads(), 4);
  // qlinear demo's layer: 256x512 4-bit weights (64 KiB), M = 16: ~4 MFLOP, well under 100 us.
  EXPECT_EQ(threads::threads_for(256 * 512 / 2, 2 * 16 * 256 * 512), 1);
  // 4096x4096 MXFP4 at M = 1: 8 MiB of weights, ~0.8 ms on one core.
  EXPECT_EQ(threads::threads_for(4096 * 4096 / 2, 2 * 4096 * 4096), 4);
  EXPECT_EQ(threads::threads_for(0, 0), 1);
  set_cpu_threads(1);
  EXPECT_EQ(threads::threads_for(int64_t{1} << 40, 0), 1);
}

TEST(Threads, DefaultIsTheCoresThisProcessMayUse) {
  const int d = threads::default_threads();
  EXPECT_GE(d, 1);
  EXPECT_LE(d, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// A layer's GEMM asks for threads by its size: the demo layer one, a large one more.
TEST(Threads, SmallLayerAsksForOneThreadLargeOneForMore) {
  const LinearKernel& k = x86::kAvx2Mxfp4;
  QL_SKIP_UNLESS_SUPPORTED(k);
  FourThreads cap;
  const Scheme& s = *find_scheme("w4a16-mxfp4");
  for (const Case& c : {Case{16, 256, 512}, Case{16, 2048, 2048}}) {
    LinearLayer layer = x86_test::make_layer(s, c, 5);
    ASSERT_TRUE(k.process_weights_after_loading(layer));
    auto y = k.apply(layer, Activation::dense(random_normal(c.in, {c.m, c.k}, 6, 1.0)));
    ASSERT_TRUE(y) << y.message();
    if (c.n == 256) {
      EXPECT_EQ(threads::last_requested_threads(), 1) << "256x512, M = 16";
    } else {
      EXPECT_GT(threads::last_requested_threads(), 1) << "2048x2048, M = 16";
    }
  }
}

TEST(Threads, PoolRunsEveryItemOnce) {
  FourThreads cap;
  for (int64_t items : {1, 2, 3, 7, 64, 1000}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(items));
      threads::parallel_for(items, 4, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < items; ++i) ASSERT_EQ(hits[i].load(), 1) << "item " << i << " of " << items;
    }
  }
}

TEST(Threads, NestedAndConcurrentCallsComplete) {
  FourThreads cap;
  constexpr int kCallers = 4;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        std::atomic<int64_t> sum{0};
        threads::parallel_for(16, 4, [&](int64_t i) {
          // An item that itself calls parallel_for runs it on its own thread.
          threads::parallel_for(8, 4, [&](int64_t j) { sum.fetch_add(i * 8 + j); });
        });
        sums[t] += sum.load();
      }
    });
  }
  for (auto& c : callers) c.join();
  for (int t = 0; t < kCallers; ++t) EXPECT_EQ(sums[t], 20 * (127 * 128 / 2)) << "caller " << t;
}

// Threaded (forced for a small layer) and single-threaded calls give the same bits, on the ISA paths this
// machine runs.
TEST(Threads, ThreadedKernelsAreBitIdenticalToOneThread) {
  FourThreads cap;
  struct KernelCase {
    const LinearKernel* kernel;
    const char* scheme;
  };
  for (const KernelCase& kc : {KernelCase{&x86::kAvx2Mxfp4, "w4a16-mxfp4"}, KernelCase{&x86::kAvx2Nvfp4, "w4a4-nvfp4"},
                               KernelCase{&x86::kAvx2Int8, "w8a8-int8-dynamic"},
                               KernelCase{&x86::kAvx512VnniInt8, "w8a8-int8-dynamic"},
                               KernelCase{&x86::kAvx512Bf16Mxfp4W4A16, "w4a16-mxfp4"}}) {
    if (!kc.kernel->is_supported(Platform::host_cpu())) continue;
    SCOPED_TRACE(std::string(kc.kernel->name()));
    for (const Case& c : {Case{1, 200, 256}, Case{3, 96, 512}, Case{33, 130, 256}}) {
      LinearLayer layer = x86_test::make_layer(*find_scheme(kc.scheme), c, 21);
      ASSERT_TRUE(kc.kernel->process_weights_after_loading(layer));
      const Tensor x = random_normal(c.in, {c.m, c.k}, 22, 1.0);
      set_cpu_threads(1);
      auto one = kc.kernel->apply(layer, Activation::dense(x));
      set_cpu_threads(4);
      threads::set_min_ns_per_thread_for_testing(1.0);
      auto many = kc.kernel->apply(layer, Activation::dense(x));
      threads::set_min_ns_per_thread_for_testing(0);
      ASSERT_TRUE(one && many);
      EXPECT_EQ(std::memcmp(one->raw(), many->raw(), static_cast<size_t>(one->nbytes())), 0) << x86_test::describe(c);
    }
  }
}

}  // namespace
}  // namespace qlinear
