// Tensor-parallel benchmark (disabled by default; on 2 GPUs run
//   build/tests/test_tp --gtest_also_run_disabled_tests --gtest_filter='TensorParallelBench.*'):
// a Llama-3.1-70B MLP block — gate_up (N = 2 x 28672, K = 8192) column-parallel without gather, then down
// (N = 8192, K = 28672) row-parallel with the all-reduce — on one GPU and on 2, in the same process.
// The SiLU x up product between them is left out (elementwise over M x 28672, well under 1% of the block):
// down reads the gate half of gate_up's output (a strided view). Weights are random valid codes.
// Timed with the benchmark method of src/bench/timing.hpp on every rank (L2 flushed before each repetition,
// CUDA events, medians); rank 0's median is reported (every forward ends in collectives that wait for both
// ranks, so rank 0's time is the block's time). Lines: "BENCH_TP <scheme> M <one GPU us> <2 GPUs us> <speedup>".
#include <gtest/gtest.h>
#if QLINEAR_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "bench/timing.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/scheme.hpp"
#include "qlinear/tensor_parallel.hpp"

namespace qlinear {
namespace {

uint64_t g_state = 0x2545F4914F6CDD1Dull;
uint64_t next_u64() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

Tensor random_codes(DType d, Shape shape, bool e4m3) {
  Tensor t = Tensor::empty(d, std::move(shape));
  uint8_t* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    p[i] = static_cast<uint8_t>(next_u64());
    if (e4m3 && (p[i] & 0x7F) == 0x7F) p[i] = 0x3C;  // no NaN codes
  }
  return t;
}

// One rank's slice (or the whole layer when tp_size = 1) with random codes and plausible scales.
LoadedLayer synthetic(const Scheme& s, const char* name, Parallelism par, int64_t n, int64_t k, int64_t full_n,
                      int64_t full_k, int rank, int size, std::vector<int64_t> widths) {
  LoadedLayer l;
  l.scheme = &s;
  l.parallelism = par;
  l.full_n = full_n;
  l.full_k = full_k;
  l.layer.name = name;
  l.layer.tp_rank = rank;
  l.layer.tp_size = size;
  l.layer.config = make_config(s, n, k);
  l.layer.config.logical_widths = std::move(widths);
  const QuantKey& wk = s.weight_key;
  l.layer.params["weight"] = random_codes(DType::kF8E4M3, {n, k}, true);
  if (wk.scale.dtype == DType::kE8M0) {
    Tensor sc = Tensor::empty(DType::kE8M0, {n, k / 32});
    for (int64_t i = 0; i < sc.numel(); ++i) sc.data<uint8_t>()[i] = static_cast<uint8_t>(118 + next_u64() % 6);
    l.layer.params["weight_scale"] = sc;
  } else {
    Tensor sc = Tensor::empty(DType::kF32, {n, 1});
    for (int64_t i = 0; i < n; ++i) sc.data<float>()[i] = 0.002f;
    l.layer.params["weight_scale"] = sc;
  }
  return l;
}

TEST(TensorParallelBench, DISABLED_Llama70BMlpBlock) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) GTEST_SKIP() << "needs 2 GPUs";
  if (!tp::available()) GTEST_SKIP() << "built without NCCL";
  constexpr int kW = 2;
  constexpr int64_t kH = 8192, kI = 28672;
  auto group = tp::Group::create({0, 1});
  ASSERT_TRUE(group) << group.message();
  for (const char* scheme_name : {"w8a8-fp8-channel", "w8a16-fp8", "w8a16-mxfp8"}) {
    const Scheme& s = *find_scheme(scheme_name);
    // One GPU: the whole block on device 0.
    LoadedLayer gu1 = synthetic(s, "gate_up_proj", Parallelism::kColumn, 2 * kI, kH, 2 * kI, kH, 0, 1, {kI, kI});
    LoadedLayer dn1 = synthetic(s, "down_proj", Parallelism::kRow, kH, kI, kH, kI, 0, 1, {});
    auto one = tp::Group::create({0});
    ASSERT_TRUE(one) << one.message();
    auto gu_one = tp::ParallelLinear::create(**one, {gu1});
    auto dn_one = tp::ParallelLinear::create(**one, {dn1});
    ASSERT_TRUE(gu_one && dn_one) << (gu_one ? dn_one.message() : gu_one.message());
    // Two GPUs: rank r holds gate rows r and up rows r (fused), and down's input columns r.
    std::vector<LoadedLayer> gu, dn;
    for (int r = 0; r < kW; ++r) {
      gu.push_back(synthetic(s, "gate_up_proj", Parallelism::kColumn, 2 * kI / kW, kH, 2 * kI, kH, r, kW,
                             {kI / kW, kI / kW}));
      dn.push_back(synthetic(s, "down_proj", Parallelism::kRow, kH, kI / kW, kH, kI, r, kW, {}));
    }
    auto gu_tp = tp::ParallelLinear::create(**group, std::move(gu));
    auto dn_tp = tp::ParallelLinear::create(**group, std::move(dn));
    ASSERT_TRUE(gu_tp && dn_tp) << (gu_tp ? dn_tp.message() : gu_tp.message());

    for (int64_t m : {1, 16, 1024, 4096}) {
      // Runs the block on `g` (1 or 2 ranks) with the benchmark method (src/bench/timing.hpp; each rank
      // flushes its own L2 and calls the block the same number of times); rank 0's median in microseconds.
      auto time_block = [&](tp::Group& g, tp::ParallelLinear& a, tp::ParallelLinear& b) -> double {
        const int w = g.size();
        std::vector<Tensor> x(w), mid(w), y(w);
        double median_us = NAN;
        const Status st = g.run([&](int r) -> Status {
          const int dev = g.device(r);
          QL_ASSIGN_OR_RETURN(x[r], cuda::empty(DType::kBF16, {m, kH}, dev));
          QL_ASSIGN_OR_RETURN(mid[r], cuda::empty(DType::kBF16, {m, 2 * kI / w}, dev));
          QL_ASSIGN_OR_RETURN(y[r], cuda::empty(DType::kBF16, {m, kH}, dev));
          QL_RETURN_IF_ERROR(cuda::fill_bytes(x[r], 0x3C));  // bf16 0x3C3C ~ 0.0115
          QL_RETURN_IF_ERROR(cuda::fill_bytes(mid[r], 0x3C));
          QL_ASSIGN_OR_RETURN(Tensor gate, mid[r].narrow(1, 0, kI / w));
          QL_ASSIGN_OR_RETURN(auto timer, bench::DeviceTimer::create(dev));
          QL_ASSIGN_OR_RETURN(bench::Timing t, timer->time(
                                                   [&](int) -> Status {
                                                     QL_RETURN_IF_ERROR(a.forward(r, x[r], mid[r], {false}));
                                                     return b.forward(r, gate, y[r]);
                                                   },
                                                   bench::kMinDeviceReps));
          if (r == 0) median_us = t.median_ms * 1000.0;
          return Status::ok();
        });
        EXPECT_TRUE(st.is_ok()) << st.message();
        return median_us;
      };
      const double t1 = time_block(**one, **gu_one, **dn_one);
      const double t2 = time_block(**group, **gu_tp, **dn_tp);
      std::printf("BENCH_TP %-18s M=%-5lld one GPU %10.1f us   2 GPUs %10.1f us   speedup %.2fx   (%s / %s)\n",
                  scheme_name, static_cast<long long>(m), t1, t2, t1 / t2, std::string((*gu_tp)->kernel(0).name()).c_str(),
                  std::string((*dn_tp)->kernel(0).name()).c_str());
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace qlinear
#endif  // QLINEAR_WITH_CUDA
