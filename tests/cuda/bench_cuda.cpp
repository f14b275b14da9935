// GPU benchmark (disabled by default; run with --gtest_also_run_disabled_tests --gtest_filter=CudaBench.*):
// the CUDA kernels, each route forced, against the anchors of `qlinear bench --compare` (cuBLAS BF16,
// cuBLASLt FP8) on the shapes of src/bench/shapes.hpp (QLINEAR_BENCH_SHAPES=llama3-8b,... picks sets;
// default llama3-8b), in the same process, with the benchmark method of src/bench/timing.hpp (CUDA
// events, L2 flushed before every repetition, medians). Weights are random valid codes (timing does not
// depend on quantization).
// Each line: "BENCH <shape> N K M <variant> <us> <metric>", the metric being weight GB/s (codes + scales)
// for M <= 64 and TFLOP/s above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "bench/cuda_anchors.hpp"
#include "bench/shapes.hpp"
#include "bench/timing.hpp"

#include "qlinear/platform.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/random.hpp"

namespace qlinear {
namespace {

uint64_t g_state = 0x9E3779B97F4A7C15ull;
uint64_t next_u64() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

// Random bytes; E4M3 NaN codes (0x7F, 0xFF) replaced.
Tensor random_bytes(DType d, Shape shape, bool e4m3) {
  Tensor t = Tensor::empty(d, std::move(shape));
  uint8_t* p = static_cast<uint8_t*>(t.raw());
  const int64_t n = t.nbytes();
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v = next_u64();
    std::memcpy(p + i, &v, static_cast<size_t>(std::min<int64_t>(8, n - i)));
  }
  if (e4m3) {
    for (int64_t i = 0; i < n; ++i) {
      if ((p[i] & 0x7F) == 0x7F) p[i] = 0x3C;
    }
  }
  return t;
}

using cuda_test::f32_filled;

// A layer of `scheme` with random codes, ready for process_weights_after_loading.
LinearLayer synthetic_layer(const char* scheme_name, int64_t n, int64_t k) {
  const Scheme& s = *find_scheme(scheme_name);
  LinearLayer l;
  l.name = scheme_name;
  l.config = make_config(s, n, k);
  const QuantKey& wk = s.weight_key;
  if (wk.dtype == DType::kI8) {
    l.params["weight"] = random_bytes(DType::kI8, {n, k}, false);
    l.params["weight_scale"] = f32_filled({n, 1}, 0.01f);
  } else if (wk.dtype == DType::kF8E4M3 && wk.scale.dtype == DType::kF32) {
    l.params["weight"] = random_bytes(DType::kF8E4M3, {n, k}, true);
    if (wk.scale.group.is_per_tensor()) l.params["weight_scale"] = f32_filled({1}, 0.01f);
    else if (wk.scale.group.is_per_channel()) l.params["weight_scale"] = f32_filled({n, 1}, 0.01f);
    else l.params["weight_scale"] = f32_filled({(n + 127) / 128, (k + 127) / 128}, 0.01f);
  } else {
    const bool e4m3 = wk.dtype == DType::kF8E4M3;
    l.params["weight"] = e4m3 ? random_bytes(DType::kF8E4M3, {n, k}, true)
                              : random_bytes(DType::kU8, {n, storage_bytes(wk.dtype, k)}, false);
    Tensor sc = Tensor::empty(DType::kE8M0, {n, k / 32});
    for (int64_t i = 0; i < sc.numel(); ++i) sc.data<uint8_t>()[i] = static_cast<uint8_t>(120 + next_u64() % 8);
    l.params["weight_scale"] = sc;
  }
  if (s.activation_key && s.activation_key->scale.is_static) l.params["input_scale"] = f32_filled({1}, 0.02f);
  return l;
}

// Median microseconds of fn with the benchmark method; NaN when fn fails (the error is printed).
double median_us(bench::DeviceTimer& timer, const std::function<Status()>& fn) {
  auto t = timer.time([&](int) { return fn(); }, 25);
  if (!t) {
    std::printf("  failed: %s\n", t.message().c_str());
    return NAN;
  }
  return t->median_ms * 1000.0;
}

void report(const bench::LayerShape& sh, int64_t m, const char* variant, double us, double weight_bytes) {
  const double metric = m <= 64 ? weight_bytes / (us * 1e-6) / 1e9 : 2.0 * m * sh.n * sh.k / (us * 1e-6) / 1e12;
  std::printf("BENCH %-14s %6lld %6lld %5lld %-34s %9.2f us %8.1f %s\n", sh.name.c_str(), static_cast<long long>(sh.n),
              static_cast<long long>(sh.k), static_cast<long long>(m), variant, us, metric, m <= 64 ? "GB/s" : "TFLOP/s");
  std::fflush(stdout);
}

const cuda::CudaLinearKernel kBenchStreamFp8(Family::kFp8ScaledMM, "bench_stream_fp8_scaled_mm", "",
                                             cuda::Route::kStream);
const cuda::CudaLinearKernel kBenchLtFp8(Family::kFp8ScaledMM, "bench_cublaslt_fp8_scaled_mm", "",
                                         cuda::Route::kCublasLt);

// The BF16-GEMM route forced at small M too, to place the hybrids' switch (stream_max_m) by measurement.
const cuda::CudaLinearKernel kBenchDequantFp8Wo(Family::kFp8WeightOnly, "bench_dequant_fp8_weight_only", "",
                                                cuda::Route::kDequantBf16);
const cuda::CudaLinearKernel kBenchDequantMxfp8(Family::kMxfp8, "bench_dequant_mxfp8", "", cuda::Route::kDequantBf16);
const cuda::CudaLinearKernel kBenchDequantMxfp6(Family::kMxfp6, "bench_dequant_mxfp6", "", cuda::Route::kDequantBf16);
const cuda::CudaLinearKernel kBenchDequantMxfp4(Family::kMxfp4, "bench_dequant_mxfp4", "", cuda::Route::kDequantBf16);

// The read floor (`qlinear bench --compare read`) reads what it is asked to: 256x the bytes take far longer
// (a kernel that skipped its loads, or read a fixed amount, would not), and a 1 GiB read runs between 1 TB/s
// and the H200's 4.8 TB/s datasheet rate.
TEST(CudaBench, ReadFloorReadsTheLayersBytes) {
  QL_REQUIRE_SM90();
  auto timer = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer) << timer.message();
  auto time_read = [&](int64_t bytes) {
    auto a = bench::CudaAnchor::create_read_floor(bytes, 4096, **timer);
    EXPECT_TRUE(a) << a.message();
    auto t = (*a)->time(1, bench::kMinDeviceReps);
    EXPECT_TRUE(t) << t.message();
    return t ? t->median_ms : -1.0;
  };
  const double small = time_read(int64_t{4} << 20), large = time_read(int64_t{1} << 30);
  ASSERT_GT(small, 0);
  EXPECT_GT(large, 8 * small) << small << " ms for 4 MiB, " << large << " ms for 1 GiB";
  const double tbps = (int64_t{1} << 30) / (large * 1e-3) / 1e12;
  EXPECT_GT(tbps, 1.0);
  EXPECT_LT(tbps, 5.0);
}

TEST(CudaBench, DISABLED_LlamaShapes) {
  auto platform = Platform::cuda_device(0);
  if (!platform) GTEST_SKIP() << "no CUDA device: " << platform.message();
  if (platform->cuda->compute_capability != 90) GTEST_SKIP() << "needs sm_90";
  std::printf("device: %s\n", platform->describe().c_str());
  std::vector<bench::LayerShape> shapes;
  const char* sets = std::getenv("QLINEAR_BENCH_SHAPES");
  std::stringstream names(sets != nullptr ? sets : "llama3-8b");
  for (std::string name; std::getline(names, name, ',');) {
    const bench::ShapeSet* set = bench::find_shape_set(name);
    ASSERT_NE(set, nullptr) << "QLINEAR_BENCH_SHAPES: no set " << name << "; sets: " << bench::shape_set_names();
    shapes.insert(shapes.end(), set->layers.begin(), set->layers.end());
  }
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  for (const bench::LayerShape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    // Anchors' operands.
    // The anchors of `qlinear bench --compare bf16,vendor` (src/bench/cuda_anchors.hpp).
    struct NamedAnchor {
      const char* variant;
      const char* kind;
      const char* scheme;
      double bytes_per_weight;
      std::shared_ptr<bench::CudaAnchor> anchor;
    };
    std::vector<NamedAnchor> anchors = {{"anchor.cublas.bf16", "bf16", "w8a16-fp8", 2, nullptr},
                                        {"anchor.cublaslt.fp8.tensor", "vendor", "w8a8-fp8-tensor", 1, nullptr},
                                        {"anchor.cublaslt.fp8.rowwise", "vendor", "w8a8-fp8-channel", 1, nullptr},
                                        {"anchor.cublaslt.fp8.block", "vendor", "w8a8-fp8-block", 1, nullptr},
                                        {"anchor.cublaslt.int8", "vendor", "w8a8-int8-dynamic", 1, nullptr}};
    for (NamedAnchor& a : anchors) {
      auto made = bench::CudaAnchor::create(a.kind, *find_scheme(a.scheme), n, k, timer);
      ASSERT_TRUE(made) << a.variant << ": " << made.message();
      a.anchor = std::move(*made);
    }
    struct Named {
      const char* variant;
      const LinearKernel* kernel;
      const char* scheme;
      int64_t max_m;
      LinearLayer layer;
    };
    std::vector<Named> ours = {
        {"sm90_fp8_scaled_mm.tensor", &cuda::kSm90Fp8ScaledMM, "w8a8-fp8-tensor", 1 << 30, {}},
        {"sm90_fp8_scaled_mm.channel", &cuda::kSm90Fp8ScaledMM, "w8a8-fp8-channel", 1 << 30, {}},
        {"stream.fp8.tensor", &kBenchStreamFp8, "w8a8-fp8-tensor", 16, {}},
        {"cublaslt_fp8_scaled_mm.tensor", &kBenchLtFp8, "w8a8-fp8-tensor", 1 << 30, {}},
        {"sm90_fp8_block_scaled", &cuda::kSm90Fp8BlockScaled, "w8a8-fp8-block", 1 << 30, {}},
        {"sm90_int8_scaled_mm.dynamic", &cuda::kSm90Int8ScaledMM, "w8a8-int8-dynamic", 1 << 30, {}},
        {"sm90_fp8_weight_only_stream", &cuda::kSm90Fp8WeightOnlyStream, "w8a16-fp8", 64, {}},
        {"sm90_fp8_weight_only", &cuda::kSm90Fp8WeightOnly, "w8a16-fp8", 1 << 30, {}},
        {"dequant_bf16.fp8_weight_only", &kBenchDequantFp8Wo, "w8a16-fp8", 64, {}},
        {"sm90_mxfp8_stream.w8a16", &cuda::kSm90Mxfp8Stream, "w8a16-mxfp8", 64, {}},
        {"sm90_mxfp8.w8a16", &cuda::kSm90Mxfp8, "w8a16-mxfp8", 1 << 30, {}},
        {"dequant_bf16.mxfp8.w8a16", &kBenchDequantMxfp8, "w8a16-mxfp8", 64, {}},
        {"sm90_mxfp8_stream.w8a8", &cuda::kSm90Mxfp8Stream, "w8a8-mxfp8", 16, {}},
        {"sm90_mxfp8.w8a8", &cuda::kSm90Mxfp8, "w8a8-mxfp8", 1 << 30, {}},
        {"sm90_mxfp6_stream.e2m3", &cuda::kSm90Mxfp6Stream, "w6a16-mxfp6-e2m3", 64, {}},
        {"sm90_mxfp6.e2m3", &cuda::kSm90Mxfp6, "w6a16-mxfp6-e2m3", 1 << 30, {}},
        {"dequant_bf16.mxfp6.e2m3", &kBenchDequantMxfp6, "w6a16-mxfp6-e2m3", 64, {}},
        {"sm90_mxfp4_stream", &cuda::kSm90Mxfp4Stream, "w4a16-mxfp4", 64, {}},
        {"sm90_mxfp4", &cuda::kSm90Mxfp4, "w4a16-mxfp4", 1 << 30, {}},
        {"dequant_bf16.mxfp4", &kBenchDequantMxfp4, "w4a16-mxfp4", 64, {}},
    };
    for (Named& o : ours) {
      o.layer = synthetic_layer(o.scheme, n, k);
      const Status s = o.kernel->process_weights_after_loading(o.layer);
      ASSERT_TRUE(s.is_ok()) << o.variant << ": " << s.message();
      o.layer.params.clear();  // host copies no longer needed
    }
    std::vector<int64_t> ms = {1, 16, 1024, 4096};
    if (sh.name.ends_with(".qkv")) ms = {1, 2, 4, 8, 16, 64, 1024, 4096};
    for (int64_t m : ms) {
      auto x = cuda::to_device(random_normal(DType::kBF16, {m, k}, 2)).value();
      auto out = cuda::empty(DType::kBF16, {m, n}).value();
      const double fp8_bytes = static_cast<double>(n) * k;
      for (NamedAnchor& a : anchors) {
        auto t = a.anchor->time(m, 25);
        if (!t) std::printf("  %s M=%lld failed: %s\n", a.variant, static_cast<long long>(m), t.message().c_str());
        report(sh, m, a.variant, t ? t->median_ms * 1000.0 : NAN, a.bytes_per_weight * fp8_bytes);
      }
      for (Named& o : ours) {
        if (m > o.max_m) continue;
        const Scheme& s = *find_scheme(o.scheme);
        double bytes = fp8_bytes;
        if (s.weight_key.scale.dtype == DType::kE8M0) bytes = storage_bytes(s.weight_key.dtype, k) * double(n) + n * (k / 32.0);
        report(sh, m, o.variant,
               median_us(timer, [&] { return o.kernel->apply(o.layer, Activation::dense(x), nullptr, out); }), bytes);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear
#endif  // QLINEAR_WITH_CUDA
