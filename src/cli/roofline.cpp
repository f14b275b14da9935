#include "cli/roofline.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace qlinear::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Streaming read of 1 GiB: the rate a weight-streaming (decode) kernel can at best reach.
double measure_dram_gbps() {
  const size_t bytes = size_t{1} << 30;
  auto* p = static_cast<uint64_t*>(std::aligned_alloc(64, bytes));
  const size_t n = bytes / sizeof(uint64_t);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = i;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    uint64_t total = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; i += 8) total += p[i] ^ p[i + 1] ^ p[i + 2] ^ p[i + 3] ^ p[i + 4] ^ p[i + 5] ^ p[i + 6] ^ p[i + 7];
    const double s = seconds_since(t0);
    if (total == 42) std::puts("");  // keep the sum alive
    best = std::max(best, bytes / s / 1e9);
  }
  std::free(p);
  return best;
}

constexpr long kIters = 20'000'000;

// 12 independent accumulators hide the FMA latency (4-5 cycles x 2 pipes) and, with the two operands, fit
// the 16 ymm registers: with 16, GCC kept 3 on the stack and their store-reload chains cut the measured
// peak (106 against the 119 GFLOP/s a kernel reached on the same machine).
constexpr int kFmaChains = 12;
__attribute__((target("avx2,fma"))) double fma_chain_avx2() {
  __m256 acc[kFmaChains];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < kIters; ++i) {
    for (auto& a : acc) a = _mm256_fmadd_ps(a, x, y);
  }
  float sink = 0;
  for (auto& a : acc) sink += _mm256_cvtss_f32(a);
  return sink;
}

__attribute__((target("avx2"))) double int8_chain_avx2() {
  // vpmaddubsw (u8 x s8 -> s16 pairs) then vpmaddwd (-> s32): 32 MACs per 256-bit pair of instructions.
  __m256i acc[8];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (long i = 0; i < kIters; ++i) {
    for (auto& a : acc) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
  }
  int sink = 0;
  for (auto& a : acc) sink += _mm256_cvtsi256_si32(a);
  return sink;
}

__attribute__((target("avx512f,avx512vnni"))) double int8_chain_vnni() {
  __m512i acc[16];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (long i = 0; i < kIters; ++i) {
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, u, s);
  }
  alignas(64) int lanes[16];
  int sink = 0;
  for (auto& a : acc) {
    _mm512_store_si512(lanes, a);
    sink += lanes[0];
  }
  return sink;
}

__attribute__((target("avx512f,avx512bf16"))) double bf16_chain() {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3F80), y = (__m512bh)_mm512_set1_epi16(0x3380);
  for (long i = 0; i < kIters; ++i) {
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
  }
  alignas(64) float lanes[16];
  float sink = 0;
  for (auto& a : acc) {
    _mm512_store_ps(lanes, a);
    sink += lanes[0];
  }
  return sink;
}

// Runs `chain` on every thread at once; returns operations per second over all threads.
template <class F>
double rate(F chain, double ops_per_iter) {
  const int threads = omp_get_max_threads();
  volatile double sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  sink = sink + chain();
  const double s = seconds_since(t0);
  return threads * kIters * ops_per_iter / s;
}

}  // namespace

Roofline measure_roofline(const Platform& platform) {
  Roofline r;
  r.dram_gbps = measure_dram_gbps();
  const CpuFeatures& f = platform.cpu;
  if (f.avx2 && f.fma) {
    r.fp32_gflops = rate(fma_chain_avx2, kFmaChains * 8 * 2) / 1e9;
    r.int8_gops = rate(int8_chain_avx2, 8 * 32 * 2) / 1e9;
  }
  if (f.avx512vnni) r.int8_gops = rate(int8_chain_vnni, 16 * 64 * 2) / 1e9;
  if (f.avx512bf16) r.bf16_gflops = rate(bf16_chain, 16 * 32 * 2) / 1e9;
  return r;
}

std::string Roofline::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "DRAM read %.1f GB/s; fp32 FMA %.0f GFLOP/s; bf16 dot %.0f GFLOP/s; int8 dot %.0f GOP/s",
                dram_gbps, fp32_gflops, bf16_gflops, int8_gops);
  return buf;
}

double attainable_gops(const Roofline& r, bool int8_family, bool bf16_family, double ops_per_byte) {
  double peak = int8_family ? r.int8_gops : (bf16_family && r.bf16_gflops > 0 ? r.bf16_gflops : r.fp32_gflops);
  return std::min(peak, r.dram_gbps * ops_per_byte);
}

}  // namespace qlinear::cli
