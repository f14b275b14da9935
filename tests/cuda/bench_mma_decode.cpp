// Timing of the tensor-core decode kernels against cuBLAS BF16 (cublasGemmEx, as torch.mm) on the
// unquantized weights, in the same process, with the benchmark method of `qlinear bench` (bench/timing.hpp:
// CUDA events around each call, the L2 flushed by a write before every call, median of at least 20).
// Synthetic layers (random valid codes and scales) on Llama-3.1-70B and Llama-3-8B shapes. Disabled by
// default (needs an H200 and a minute or two):
//   QL_MMA_BENCH_CSV=out.csv test_cuda --gtest_also_run_disabled_tests --gtest_filter='*MmaDecodeBench*'
// prints one line per (layer, M, scheme) and writes the CSV. QL_MMA_BENCH_ONLY="70b.down,w4a16-mxfp4" keeps
// the layers and schemes named there; QL_MMA_BENCH_MS="1,16,256" the token counts;
// QL_MMA_BENCH_VARIANTS="cl2,ps" the forced variants (default: every one of cuda_test::mma_variants() for the
// M, rows "scheme/variant"; "none": no variant; "read": a plain streaming read of the layer's bytes, the
// ceiling at that size, rows "scheme/read"). The table's choice and the anchor are timed a second time
// after a flush that also reads the buffer back (QLINEAR_BENCH_L2_FLUSH=clean: clean lines in the L2), the
// columns "clean". TB/s counts the bytes the kernel reads: packed codes with their padding, and scales.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "qlinear/platform.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_decode_kernels.hpp"
#include "bench/cuda_anchors.hpp"
#include "bench/timing.hpp"
#include "cuda/mma_variants.hpp"
#include "qlinear/scheme.hpp"
#include "qlinear/cuda.hpp"
#endif

namespace qlinear {
namespace {

#if QLINEAR_WITH_CUDA

struct BenchLayer {
  const char* name;
  int64_t n, k;
};
const BenchLayer kLayers[] = {  // 70B and 8B interleaved: a run cut short still has both
    {"70b.down", 8192, 28672}, {"8b.qkv", 6144, 4096},   {"70b.qkv", 10240, 8192},      {"8b.gate_up", 28672, 4096},
    {"70b.o", 8192, 8192},     {"8b.down", 4096, 14336}, {"70b.gate_up", 57344, 8192}, {"8b.o", 4096, 4096},
};
std::vector<int64_t> bench_ms() {
  const char* env = std::getenv("QL_MMA_BENCH_MS");
  std::vector<int64_t> ms;
  for (const char* p = env; p != nullptr && *p != '\0';) {
    char* end = nullptr;
    const long long v = std::strtoll(p, &end, 10);
    if (end == p) break;
    if (v > 0) ms.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  if (ms.empty()) ms = {1, 16, 64, 256, 1024};
  return ms;
}

struct BenchScheme {
  const char* name;
  const cuda::MmaDecodeLinearKernel* kernel;
  QuantKey key;
  std::optional<QuantKey> activation_key;
  const char* old_bf16_kernel;  // the family's older BF16 route (row-major codes), or null
};

// Whether a name passes QL_MMA_BENCH_ONLY (a comma list of layer and scheme names; unset: everything). A
// list naming no layer (or no scheme) keeps every layer (scheme).
bool selected(const std::string& name, bool is_layer) {
  const char* only = std::getenv("QL_MMA_BENCH_ONLY");
  if (only == nullptr || *only == '\0') return true;
  const std::string list = std::string(",") + only + ",";
  bool any_of_kind = false;
  size_t start = 1;
  while (start < list.size()) {
    const size_t end = list.find(',', start);
    const std::string item = list.substr(start, end - start);
    const bool item_is_layer = item.find('.') != std::string::npos;
    if (item_is_layer == is_layer) {
      any_of_kind = true;
      if (item == name) return true;
    }
    start = end + 1;
  }
  return !any_of_kind;
}

// Whether a variant passes QL_MMA_BENCH_VARIANTS (a comma list; unset: every variant; "none": none).
bool variant_selected(const std::string& name) {
  const char* only = std::getenv("QL_MMA_BENCH_VARIANTS");
  if (only == nullptr || *only == '\0') return true;
  const std::string list = std::string(",") + only + ",";
  return list.find("," + name + ",") != std::string::npos;
}

Tensor random_u8(Shape shape, DType dtype, uint64_t seed, uint8_t lo, uint8_t hi, bool e4m3) {
  Tensor t = Tensor::empty(dtype, shape);
  uint8_t* p = static_cast<uint8_t*>(t.raw());
  const int64_t n = t.nbytes();
#pragma omp parallel
  {
    std::mt19937_64 rng(seed + 7919 * static_cast<uint64_t>(omp_get_thread_num()));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint8_t b = static_cast<uint8_t>(lo + rng() % (static_cast<unsigned>(hi - lo) + 1));
      if (e4m3 && (b & 0x7F) == 0x7F) b = 0x7E;
      p[i] = b;
    }
  }
  return t;
}

LinearLayer synthetic_layer(const BenchScheme& s, int64_t n, int64_t k) {
  LinearLayer l;
  l.name = "bench";
  l.config.family = s.kernel->family();
  l.config.weight_key = s.key;
  l.config.activation_key = s.activation_key;
  l.config.n = n;
  l.config.k = k;
  l.config.input_dtype = DType::kBF16;
  l.config.out_dtype = DType::kBF16;
  const DType wd = s.key.dtype;
  const bool packed = wd == DType::kF6E2M3 || wd == DType::kF6E3M2 || wd == DType::kF4E2M1;
  l.params["weight"] = random_u8({n, storage_bytes(wd, k)}, packed ? DType::kU8 : DType::kF8E4M3, 1, 0, 255,
                                 wd == DType::kF8E4M3);
  if (s.key.scale.dtype == DType::kE8M0) {
    l.params["weight_scale"] = random_u8({n, k / 32}, DType::kE8M0, 2, 118, 126, false);
  } else if (s.key.scale.dtype == DType::kF8E4M3) {
    l.params["weight_scale"] = random_u8({n, k / 16}, DType::kF8E4M3, 3, 0x20, 0x50, true);
    Tensor g = Tensor::empty(DType::kF32, {1});
    g.data<float>()[0] = 448.0f * 6.0f;
    l.params["weight_global_scale"] = g;
  } else {
    Tensor sc = Tensor::empty(DType::kF32, {n, 1});
    for (int64_t i = 0; i < n; ++i) sc.data<float>()[i] = 1e-3f * static_cast<float>(1 + i % 7);
    l.params["weight_scale"] = sc;
  }
  return l;
}

TEST(CudaMmaDecodeBench, DISABLED_VersusCublasBf16) {
  auto platform = Platform::cuda_device(0);
  if (!platform || platform->cuda->compute_capability != 90) GTEST_SKIP() << "needs an sm_90 GPU";
  auto act = [](const char* scheme) { return find_scheme(scheme)->activation_key; };
  const BenchScheme schemes[] = {
      {"w8a16-fp8", &cuda::kSm90MmaDecodeFp8WeightOnly, kFp8StaticChannelSym, std::nullopt, "sm90_fp8_weight_only_bf16"},
      {"w8a16-mxfp8", &cuda::kSm90MmaDecodeMxfp8, kMxfp8Static, std::nullopt, "sm90_mxfp8_bf16"},
      {"w8a8-mxfp8", &cuda::kSm90MmaDecodeMxfp8, kMxfp8Static, kMxfp8Dynamic, nullptr},
      {"w6a16-mxfp6-e2m3", &cuda::kSm90MmaDecodeMxfp6, kMxfp6E2M3Static, std::nullopt, "sm90_mxfp6_bf16"},
      {"w6a6-mxfp6-e2m3", &cuda::kSm90MmaDecodeMxfp6, kMxfp6E2M3Static, act("w6a6-mxfp6-e2m3"), nullptr},
      {"w4a16-mxfp4", &cuda::kSm90MmaDecodeMxfp4, kMxfp4Static, std::nullopt, "sm90_mxfp4_bf16"},
      {"w4a4-mxfp4", &cuda::kSm90MmaDecodeMxfp4, kMxfp4Static, act("w4a4-mxfp4"), nullptr},
      {"w4a16-nvfp4", &cuda::kSm90MmaDecodeNvfp4, kNvfp4Static, std::nullopt, nullptr},
  };
  const std::vector<int64_t> kBenchMs = bench_ms();
  std::vector<cuda_test::MmaVariant> variants = cuda_test::mma_variants();
  for (const cuda_test::MmaVariant& v : cuda_test::mma_probe_variants()) variants.push_back(v);
  const char* csv_path = std::getenv("QL_MMA_BENCH_CSV");
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "layer,n,k,m,scheme,us,bf16_us,clean_us,bf16_clean_us,splits,bytes,tbps\n");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(stream);
  // Two timers: the write flush of `qlinear bench` (as triton's do_bench), and the same followed by a read.
  const char* flush_env = std::getenv("QLINEAR_BENCH_L2_FLUSH");
  const std::string flush_was = flush_env ? flush_env : "";
  unsetenv("QLINEAR_BENCH_L2_FLUSH");
  auto timer = bench::DeviceTimer::create(0);
  setenv("QLINEAR_BENCH_L2_FLUSH", "clean", 1);
  auto clean_timer = bench::DeviceTimer::create(0);
  if (flush_env) {
    setenv("QLINEAR_BENCH_L2_FLUSH", flush_was.c_str(), 1);
  } else {
    unsetenv("QLINEAR_BENCH_L2_FLUSH");
  }
  ASSERT_TRUE(timer && clean_timer);
  std::printf("[ bench ] %s; %s\n", (*timer)->describe().c_str(), (*timer)->method().c_str());
  const Scheme& bf16_scheme = *find_scheme("w8a16-fp8");  // any scheme: the bf16 anchor ignores it
  auto read_buf = cuda::empty(DType::kU8, {int64_t{512} << 20}).value();  // the largest layer's bytes and more
  ASSERT_TRUE(cuda::fill_bytes(read_buf, 0).is_ok());
  auto sink = cuda::empty(DType::kF32, {1024}).value();
  float* sink_p = static_cast<float*>(sink.raw());
  for (const BenchLayer& bl : kLayers) {
    if (!selected(bl.name, true)) continue;
    std::vector<double> lt_us, lt_clean_us;
    {
      auto anchor = bench::CudaAnchor::create("bf16", bf16_scheme, bl.n, bl.k, **timer);
      auto anchor_clean = bench::CudaAnchor::create("bf16", bf16_scheme, bl.n, bl.k, **clean_timer);
      ASSERT_TRUE(anchor && anchor_clean) << (anchor ? anchor_clean.message() : anchor.message());
      for (int64_t m : kBenchMs) {
        auto t = (*anchor)->time(m, bench::kMinDeviceReps);
        auto tc = (*anchor_clean)->time(m, bench::kMinDeviceReps);
        ASSERT_TRUE(t && tc);
        lt_us.push_back(1000.0 * t->median_ms);
        lt_clean_us.push_back(1000.0 * tc->median_ms);
      }
    }
    for (const BenchScheme& s : schemes) {
      if (!selected(s.name, false)) continue;
      LinearLayer layer = synthetic_layer(s, bl.n, bl.k);
      // The older BF16 route processes its own copy of the checkpoint tensors (row-major codes).
      const LinearKernel* old_kernel = s.old_bf16_kernel ? find_kernel(s.old_bf16_kernel) : nullptr;
      LinearLayer old_layer;
      if (old_kernel != nullptr && kBenchMs.back() > 64 && variant_selected("oldbf16")) {
        old_layer = layer;
        if (!old_kernel->process_weights_after_loading(old_layer).is_ok()) old_kernel = nullptr;
        old_layer.params.clear();
      }
      const Status ps = s.kernel->process_weights_after_loading(layer);
      if (!ps.is_ok()) {
        std::printf("[ bench ] %s %s: %s\n", bl.name, s.name, ps.message().c_str());
        continue;
      }
      layer.params.clear();  // host copies are not needed for timing
      const double bytes = static_cast<double>(cuda::mma_decode_weight_bytes(layer));
      for (size_t mi = 0; mi < kBenchMs.size(); ++mi) {
        const int64_t m = kBenchMs[mi];
        auto x = cuda::empty(DType::kBF16, {m, bl.k}).value();
        ASSERT_TRUE(cuda::fill_bytes(x, 0x3C).is_ok());
        auto y = cuda::empty(DType::kBF16, {m, bl.n}).value();
        auto row = [&](const std::string& name, const LinearKernel& kernel, const LinearLayer& l, bool clean) {
          const bench::TimedCall call = [&](int) { return kernel.apply(l, Activation::dense(x), nullptr, y); };
          auto t = (*timer)->time(call, bench::kMinDeviceReps);
          if (!t) {
            std::printf("[ bench ] %s M=%lld %s: %s\n", bl.name, static_cast<long long>(m), name.c_str(),
                        t.message().c_str());
            return;
          }
          const double us = 1000.0 * t->median_ms;
          double clean_us = 0;
          if (clean) {
            auto tc = (*clean_timer)->time(call, bench::kMinDeviceReps);
            if (tc) clean_us = 1000.0 * tc->median_ms;
          }
          const int splits = cuda::mma_decode_splits_for(layer, m);
          const double tbps = bytes / (us * 1e6);
          std::printf("[ bench ] %-11s M=%-4lld %-26s %8.1f us  bf16 %8.1f us  x%.2f  clean %6.1f / %6.1f  "
                      "splits %d  %5.2f TB/s\n",
                      bl.name, static_cast<long long>(m), name.c_str(), us, lt_us[mi], lt_us[mi] / us, clean_us,
                      lt_clean_us[mi], splits, tbps);
          if (csv) {
            std::fprintf(csv, "%s,%lld,%lld,%lld,%s,%.2f,%.2f,%.2f,%.2f,%d,%.0f,%.3f\n", bl.name,
                         static_cast<long long>(bl.n), static_cast<long long>(bl.k), static_cast<long long>(m),
                         name.c_str(), us, lt_us[mi], clean_us, lt_clean_us[mi], splits, bytes, tbps);
            std::fflush(csv);
          }
        };
        row(s.name, *s.kernel, layer, true);
        if (m == kBenchMs.front() && variant_selected("read")) {
          // The ceiling at this size: the read floor of `qlinear bench --compare read` over the same bytes.
          auto t = (*timer)->time(
              [&](int) {
                return cuda::dram_read_floor(read_buf.raw(), static_cast<size_t>(bytes) / 16 * 16, sink_p, stream);
              },
              bench::kMinDeviceReps);
          if (t) {
            const double us = 1000.0 * t->median_ms;
            std::printf("[ bench ] %-11s %-31s %8.1f us  %5.2f TB/s\n", bl.name, (std::string(s.name) + "/read").c_str(),
                        us, bytes / (us * 1e6));
            if (csv) {
              std::fprintf(csv, "%s,%lld,%lld,0,%s/read,%.2f,%.2f,0,0,0,%.0f,%.3f\n", bl.name,
                           static_cast<long long>(bl.n), static_cast<long long>(bl.k), s.name, us, lt_us[mi], bytes,
                           bytes / (us * 1e6));
            }
          }
        }
        for (const cuda_test::MmaVariant& v : variants) {
          if (m < v.min_m || m > v.max_m || !variant_selected(v.name)) continue;
          cuda_test::ForceScope force(v.force);
          row(std::string(s.name) + "/" + v.name, *s.kernel, layer, false);
        }
        if (old_kernel != nullptr && m > 64 && variant_selected("oldbf16")) row(std::string(s.name) + "/oldbf16", *old_kernel, old_layer, false);
      }
    }
  }
  if (csv) std::fclose(csv);
  cudaStreamDestroy(stream);
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
