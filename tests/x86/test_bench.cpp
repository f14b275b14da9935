// A quick timing helper for the x86 kernels (not a test: skipped unless QLINEAR_X86_BENCH=1; the project's
// benchmark is `qlinear bench`). The benchmark method of src/bench/timing.hpp: each call uses the next of
// several processed copies of the layer (bench::cold_copies_for), so weights come from DRAM as in decode;
// bench::time_host's medians.
//   QLINEAR_X86_BENCH=1 [QLINEAR_X86_BENCH_SCHEMES=a,b] [QLINEAR_X86_BENCH_M=1,16,128] test_x86 --gtest_filter='X86Bench.*'
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <immintrin.h>
#include <omp.h>

#include "bench/timing.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

std::vector<std::string> split(const char* s, const char* fallback) {
  std::vector<std::string> out;
  std::stringstream ss(s ? s : fallback);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Peak probes: 16 independent accumulator chains per thread, as ../shared/anchors/CPU.md measured them.
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512bf16"))) double probe_dpbusd(int64_t iters) {
  __m512i acc[16];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, x, y);
  __m512i s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_epi32(s, acc[j]);
  return _mm512_reduce_add_epi32(s);
}
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512bf16"))) double probe_dpbf16(int64_t iters) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i x = _mm512_set1_epi16(0x3F80);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)x);
  __m512 s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

TEST(X86Bench, Peaks) {
  if (std::getenv("QLINEAR_X86_BENCH") == nullptr) GTEST_SKIP() << "set QLINEAR_X86_BENCH=1";
  if (!Platform::host_cpu().cpu.avx512bf16) GTEST_SKIP() << "no AVX-512 BF16";
  const int64_t iters = 20000000;
  for (int which = 0; which < 2; ++which) {
    double best = 1e9, sink = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
      sink += which == 0 ? probe_dpbusd(iters) : probe_dpbf16(iters);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double ops = (which == 0 ? 128.0 : 64.0) * 16 * iters * omp_get_max_threads();
    std::printf("PEAK %s threads=%d %.1f G(FL)OP/s (sink %g)\n", which == 0 ? "vpdpbusd" : "vdpbf16ps",
                omp_get_max_threads(), ops / best * 1e-9, sink * 0);
  }
  // DRAM read bandwidth: sum 512 MiB with every thread.
  const int64_t words = (int64_t{512} << 20) / 8;
  std::vector<int64_t> buf(words, 1);
  double best = 1e9;
  int64_t total = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < words; ++i) s += buf[i];
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    total += s;
  }
  std::printf("PEAK dram-read threads=%d %.1f GB/s (sum %lld)\n", omp_get_max_threads(), words * 8 / best * 1e-9,
              static_cast<long long>(total));
}

TEST(X86Bench, Kernels) {
  if (std::getenv("QLINEAR_X86_BENCH") == nullptr) GTEST_SKIP() << "set QLINEAR_X86_BENCH=1 to time the kernels";
  const int64_t n = 4096, k = 4096;
  const auto schemes = split(std::getenv("QLINEAR_X86_BENCH_SCHEMES"), "w8a8-int8-dynamic,w8a16-fp8,w8a16-mxfp8,w4a16-mxfp4");
  const auto ms = split(std::getenv("QLINEAR_X86_BENCH_M"), "1,16,128");
  const Tensor w = random_normal(DType::kF32, {n, k}, 1, 0.05);
  for (const std::string& sname : schemes) {
    const Scheme* scheme = find_scheme(sname);
    ASSERT_NE(scheme, nullptr) << sname;
    MakeLayerOptions opt;
    auto base = quantize_layer("bench", *scheme, w, opt);
    ASSERT_TRUE(base) << base.message();
    auto sel = select_kernel(base->config, Platform::host_cpu());
    ASSERT_TRUE(sel) << sel.message();
    const LinearKernel& kernel = **sel;
    const double weight_bytes = static_cast<double>(base->params.at("weight").nbytes());
    const int copies = std::max(2, bench::cold_copies_for(static_cast<int64_t>(weight_bytes)));
    std::vector<LinearLayer> layers(copies, *base);
    for (auto& l : layers) ASSERT_TRUE(kernel.process_weights_after_loading(l));
    for (const std::string& mstr : ms) {
      const int64_t m = std::stoll(mstr);
      const Tensor x = random_normal(DType::kBF16, {m, k}, 2, 1.0);
      Tensor out = Tensor::empty(opt.out_dtype, {m, n});
      const int reps = m >= 128 ? 30 : 100;
      auto t = bench::time_host(
          [&](int r) { return kernel.apply(layers[r % copies], Activation::dense(x), nullptr, out); }, reps);
      ASSERT_TRUE(t) << t.message();
      const double med = t->median_ms * 1e-3, min = t->min_ms * 1e-3;
      std::printf("BENCH %-22s %-28s M=%-4lld N=%lld K=%lld  median %.3f ms  min %.3f ms  %.1f GOP/s  weights %.1f GB/s\n",
                  sname.c_str(), std::string(kernel.name()).c_str(), static_cast<long long>(m),
                  static_cast<long long>(n), static_cast<long long>(k), med * 1e3, min * 1e3,
                  2.0 * m * n * k / med * 1e-9, weight_bytes / med * 1e-9);
    }
  }
}

}  // namespace
}  // namespace qlinear
