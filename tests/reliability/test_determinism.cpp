// Determinism: for every kernel this machine's CPU priority list selects, the same inputs give bit-identical
// outputs across thread counts (1, 2, the default; every call threaded, whatever its size) and across independent runs (the layer quantized
// and processed again from the same seed). No CPU kernel splits K across threads, so none needs a
// deterministic mode; a kernel that starts to would fail here and must say so in its header.
#include "core/threads.hpp"
#include "reliability_util.hpp"

namespace qlinear::reliability {
namespace {

const int64_t kMs[] = {1, 3, 16, 33, 130};

// Threads every call (the cost model would keep these small layers on one thread) and restores the thread
// policy when the test ends, whatever happens.
struct ThreadPolicy {
  int saved = threads::max_threads();
  ThreadPolicy() { threads::set_min_ns_per_thread_for_testing(1.0); }
  ~ThreadPolicy() {
    set_cpu_threads(0);
    threads::set_min_ns_per_thread_for_testing(0);
  }
};

std::vector<Tensor> outputs(const LinearKernel& k, const LinearLayer& layer, const Tensor* bias, uint64_t seed) {
  std::vector<Tensor> ys;
  for (int64_t m : kMs) {
    auto y = k.apply(layer, Activation::dense(random_normal(DType::kBF16, {m, kK}, seed + m, 1.0)), bias);
    EXPECT_TRUE(y) << y.message();
    ys.push_back(y ? *y : Tensor());
  }
  return ys;
}

void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() || !b[i].defined()) continue;  // already reported
    EXPECT_TRUE(same_bytes(a[i], b[i])) << what << ": M=" << kMs[i] << " differs";
  }
}

TEST(Determinism, EverySelectedCpuKernelIsBitIdenticalAcrossThreadCounts) {
  ThreadPolicy restore;
  const int default_threads = restore.saved;
  for (const SelectedKernel& sk : cpu_selected_kernels()) {
    SCOPED_TRACE(std::string(sk.scheme->name) + " on " + std::string(sk.kernel->name()));
    LinearLayer layer = make_layer(*sk.scheme, kN, kK, 31);
    ASSERT_TRUE(sk.kernel->process_weights_after_loading(layer));
    const Tensor bias = random_normal(DType::kF32, {kN}, 32, 0.5);
    set_cpu_threads(1);
    const std::vector<Tensor> one = outputs(*sk.kernel, layer, &bias, 40);
    set_cpu_threads(2);
    expect_same(one, outputs(*sk.kernel, layer, &bias, 40), "2 threads vs 1");
    set_cpu_threads(std::max(default_threads, 3));
    expect_same(one, outputs(*sk.kernel, layer, &bias, 40),
                std::to_string(std::max(default_threads, 3)) + " threads vs 1");
  }
}

TEST(Determinism, EverySelectedCpuKernelIsBitIdenticalAcrossRuns) {
  for (const SelectedKernel& sk : cpu_selected_kernels()) {
    SCOPED_TRACE(std::string(sk.scheme->name) + " on " + std::string(sk.kernel->name()));
    std::vector<Tensor> runs[2];
    for (auto& run : runs) {
      LinearLayer layer = make_layer(*sk.scheme, kN, kK, 51);  // quantized and processed afresh
      ASSERT_TRUE(sk.kernel->process_weights_after_loading(layer));
      run = outputs(*sk.kernel, layer, nullptr, 60);
      // A second call on the same layer: no state carried from one apply to the next.
      expect_same(run, outputs(*sk.kernel, layer, nullptr, 60), "second apply on the same layer");
    }
    expect_same(runs[0], runs[1], "run 2 vs run 1");
  }
}

TEST(Determinism, QuantizingTheSameLayerTwiceGivesTheSameCheckpointTensors) {
  for (const Scheme& s : all_schemes()) {
    SCOPED_TRACE(s.name);
    const LinearLayer a = make_layer(s, kN, kK, 71);
    const LinearLayer b = make_layer(s, kN, kK, 71);
    ASSERT_EQ(a.params.size(), b.params.size());
    for (const auto& [name, t] : a.params) {
      ASSERT_TRUE(b.params.count(name)) << name;
      EXPECT_TRUE(same_bytes(t.contiguous(), b.params.at(name).contiguous())) << name;
    }
  }
}

}  // namespace
}  // namespace qlinear::reliability
