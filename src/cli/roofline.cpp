#include "cli/roofline.hpp"

#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/timing.hpp"

namespace qlinear::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Vector loads of [begin, end), four independent accumulators, prefetched 4 KiB ahead (as the kernels stream
// weights: the hardware prefetchers stop at each 4 KiB page).
constexpr int kReadPrefetchBytes = 4096;

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* begin, const uint8_t* end) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (const uint8_t* p = begin; p < end; p += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kReadPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + kReadPrefetchBytes + 64), _MM_HINT_T0);
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 96)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* begin, const uint8_t* end) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (const uint8_t* p = begin; p < end; p += 256) {
    for (int line = 0; line < 256; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + kReadPrefetchBytes + line), _MM_HINT_T0);
    }
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + 192));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
  return lanes[0] ^ lanes[7];
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The DRAM read rate a weight-streaming (decode) kernel can at best reach: every thread reads its share of
// a set twice the last-level cache (at least 1 GiB) with vector loads, all threads at once; median of 7 runs
// after one warm-up. A run's time is its slowest thread's CPU time, not the wall clock: on a machine shared
// with other work a preempted thread's wait is not memory time (a quiet machine gives the same figure either
// way). The set is 2 MiB aligned and asks for transparent huge pages (fewer page walks, as a cache-resident
// weight set sees).
double measure_dram_gbps(const CpuFeatures& f) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(int64_t{1} << 30, 2 * bench::last_level_cache_bytes())) &
                       ~size_t{(1 << 21) - 1};
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(size_t{1} << 21, bytes));
  if (p == nullptr) return 0;
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages where refused
  const int threads = omp_get_max_threads();
  const size_t chunk = bytes / static_cast<size_t>(threads) & ~size_t{4095};
  // First touch by the thread that reads the part later (its memory node on a NUMA machine).
#pragma omp parallel num_threads(threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    std::memset(p + t * chunk, static_cast<int>(t + 1), chunk);
  }
  const bool wide = f.avx512f;
  std::vector<double> rates;
  for (int rep = 0; rep < 8; ++rep) {
    uint64_t total = 0;
    double slowest = 0;
#pragma omp parallel num_threads(threads) reduction(^ : total) reduction(max : slowest)
    {
      const uint8_t* b = p + static_cast<size_t>(omp_get_thread_num()) * chunk;
      const double t0 = thread_cpu_seconds();
      total ^= wide ? read_avx512(b, b + chunk) : read_avx2(b, b + chunk);
      slowest = thread_cpu_seconds() - t0;
    }
    if (total == 42) std::puts("");  // keep the loads alive
    if (rep > 0 && slowest > 0) rates.push_back(static_cast<double>(chunk) * threads / slowest / 1e9);
  }
  std::free(p);
  if (rates.empty()) return 0;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
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

Roofline measure_cpu_roofline(const Platform& platform) {
  Roofline r;
  const CpuFeatures& f = platform.cpu;
  if (f.avx2) r.dram_gbps = measure_dram_gbps(f);
  if (f.avx2 && f.fma) {
    r.fp32_gflops = rate(fma_chain_avx2, kFmaChains * 8 * 2) / 1e9;
    r.int8_gops = rate(int8_chain_avx2, 8 * 32 * 2) / 1e9;
  }
  if (f.avx512vnni) r.int8_gops = rate(int8_chain_vnni, 16 * 64 * 2) / 1e9;
  if (f.avx512bf16) r.bf16_gflops = rate(bf16_chain, 16 * 32 * 2) / 1e9;
  return r;
}

std::string Roofline::describe() const {
  // GFLOP/s below 10^4, TFLOP/s above (the GPU's units).
  auto rate = [](double g, const char* unit) {
    char buf[64];
    if (g >= 1e4) {
      std::snprintf(buf, sizeof buf, "%.0f T%s", g / 1e3, unit);
    } else {
      std::snprintf(buf, sizeof buf, "%.0f G%s", g, unit);
    }
    return std::string(buf);
  };
  char dram[64];
  std::snprintf(dram, sizeof dram, "DRAM read %.1f GB/s", dram_gbps);
  std::string out = dram;
  if (fp32_gflops > 0) out += "; fp32 FMA " + rate(fp32_gflops, "FLOP/s");
  if (bf16_gflops > 0) out += "; bf16 " + rate(bf16_gflops, "FLOP/s");
  if (fp8_gflops > 0) out += "; fp8 " + rate(fp8_gflops, "FLOP/s");
  if (int8_gops > 0) out += "; int8 " + rate(int8_gops, "OP/s");
  return out;
}

nlohmann::json Roofline::to_json() const {
  return {{"dram_gbps", dram_gbps}, {"fp32_gflops", fp32_gflops}, {"bf16_gflops", bf16_gflops},
          {"int8_gops", int8_gops}, {"fp8_gflops", fp8_gflops}};
}

double Roofline::peak_gops(const Scheme& scheme) const {
  if (scheme.family == Family::kInt8ScaledMM && int8_gops > 0) return int8_gops;
  const bool fp8_inputs = scheme.activation_key && scheme.activation_key->dtype == DType::kF8E4M3;
  if (fp8_inputs && fp8_gflops > 0) return fp8_gflops;
  return bf16_gflops > 0 ? bf16_gflops : fp32_gflops;
}

double attainable_gops(const Roofline& r, const Scheme& scheme, double ops_per_byte) {
  return std::min(r.peak_gops(scheme), r.dram_gbps * ops_per_byte);
}

}  // namespace qlinear::cli
