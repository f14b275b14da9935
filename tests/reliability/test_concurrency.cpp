// Concurrency: a processed layer is shared by many threads (kernel.hpp: kernel objects are stateless, per-layer
// state lives in the layer), kernel selection runs from many threads, and a SafetensorsFile is read from many
// threads. Every result must be bit-identical to the single-threaded one. `make test-tsan` runs these
// under ThreadSanitizer (with OMP_NUM_THREADS=1, so that the races it sees are between these threads and
// not inside the uninstrumented OpenMP runtime).
#include <atomic>
#include <thread>

#include "qlinear/safetensors.hpp"
#include "reliability_util.hpp"

namespace qlinear::reliability {
namespace {

constexpr int kThreads = 8;
constexpr int kReps = 3;
const int64_t kMs[] = {1, 7, 33};

TEST(Concurrency, ManyThreadsApplyOneProcessedLayerForEverySelectedCpuKernel) {
  uint64_t seed = 100;
  for (const SelectedKernel& sk : cpu_selected_kernels()) {
    SCOPED_TRACE(std::string(sk.scheme->name) + " on " + std::string(sk.kernel->name()));
    LinearLayer layer = make_layer(*sk.scheme, kN, kK, seed += 10);
    Status ps = sk.kernel->process_weights_after_loading(layer);
    ASSERT_TRUE(ps) << ps.message();
    const Tensor bias = random_normal(DType::kF32, {kN}, seed + 1, 0.5);
    std::vector<Tensor> xs, want;
    for (int64_t m : kMs) {
      xs.push_back(random_normal(DType::kBF16, {m, kK}, seed + 2 + m, 1.0));
      auto y = sk.kernel->apply(layer, Activation::dense(xs.back()), &bias);
      ASSERT_TRUE(y) << y.message();
      want.push_back(*y);
    }
    std::atomic<int> failures{0}, mismatches{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t) {
      pool.emplace_back([&, t] {
        for (int rep = 0; rep < kReps; ++rep) {
          for (size_t i = 0; i < xs.size(); ++i) {
            const size_t j = (i + t) % xs.size();  // threads run different M at the same moment
            auto y = sk.kernel->apply(layer, Activation::dense(xs[j]), &bias);
            if (!y) {
              ++failures;
            } else if (!same_bytes(*y, want[j])) {
              ++mismatches;
            }
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(mismatches.load(), 0) << "outputs differ from the single-threaded run";
  }
}

TEST(Concurrency, ManyThreadsSelectKernelsAtOnce) {
  const Platform cpu = Platform::host_cpu();
  std::vector<LinearConfig> configs;
  for (const Scheme& s : all_schemes()) {
    configs.push_back(make_config(s, kN, kK));
    configs.push_back(make_config(s, 100, 100));  // rejected by some kernels, with reasons
  }
  std::vector<std::string> want;
  std::vector<const LinearKernel*> want_kernel;
  for (const LinearConfig& c : configs) {
    const Selection sel = explain_selection(c, cpu);
    want.push_back(sel.explain());
    want_kernel.push_back(sel.kernel);
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < kReps; ++rep) {
        for (size_t i = 0; i < configs.size(); ++i) {
          const size_t j = (i + static_cast<size_t>(t) * 3) % configs.size();
          const Selection sel = explain_selection(configs[j], t % 2 ? Platform::host_cpu() : cpu);
          auto k = select_kernel(configs[j], cpu);
          if (sel.explain() != want[j] || sel.kernel != want_kernel[j] || (k ? *k : nullptr) != want_kernel[j]) {
            ++mismatches;
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Concurrency, ProcessingDistinctLayersInParallelMatchesSerial) {
  // Each thread processes its own copy of a layer and applies it; the kernel objects are shared.
  for (const SelectedKernel& sk : cpu_selected_kernels()) {
    SCOPED_TRACE(std::string(sk.scheme->name) + " on " + std::string(sk.kernel->name()));
    const LinearLayer base = make_layer(*sk.scheme, kN, kK, 7);
    const Tensor x = random_normal(DType::kBF16, {5, kK}, 8, 1.0);
    LinearLayer serial = base;
    ASSERT_TRUE(sk.kernel->process_weights_after_loading(serial));
    auto want = sk.kernel->apply(serial, Activation::dense(x));
    ASSERT_TRUE(want) << want.message();
    std::atomic<int> bad{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) {
      pool.emplace_back([&] {
        LinearLayer mine = base;  // shares the checkpoint tensors (read-only), owns its processed state
        if (!sk.kernel->process_weights_after_loading(mine)) {
          ++bad;
          return;
        }
        auto y = sk.kernel->apply(mine, Activation::dense(x));
        if (!y || !same_bytes(*y, *want)) ++bad;
      });
    }
    for (auto& th : pool) th.join();
    EXPECT_EQ(bad.load(), 0);
  }
}

TEST(Concurrency, ManyThreadsReadOneSafetensorsFile) {
  auto f = SafetensorsFile::open(std::string(QLINEAR_TEST_DATA) + "/safetensors/python_dtypes.safetensors");
  ASSERT_TRUE(f) << f.message();
  std::vector<Tensor> want;
  for (const std::string& name : f->names()) want.push_back(f->tensor(name).value().clone());
  std::atomic<int> bad{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) {
        SafetensorsFile copy = *f;  // copies share the mapping
        for (size_t i = 0; i < want.size(); ++i) {
          auto got = copy.tensor(copy.names()[i]);
          if (!got || std::memcmp(got->raw(), want[i].raw(), static_cast<size_t>(want[i].nbytes())) != 0) ++bad;
        }
        if (!copy.verify_unchanged()) ++bad;
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace qlinear::reliability
