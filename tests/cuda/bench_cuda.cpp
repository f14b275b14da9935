// GPU benchmark (disabled by default; run with --gtest_also_run_disabled_tests --gtest_filter=CudaBench.*):
// the CUDA kernels against cuBLASLt FP8 and cuBLAS BF16 on the Llama-3.1 8B / 70B shapes of
// ../shared/anchors/GPU.md, in the same process. Medians of CUDA-event timings, L2 flushed (a 256 MiB
// read) before every repetition. Weights are random valid codes (timing does not depend on quantization).
// Each line: "BENCH <shape> N K M <variant> <us> <metric>", the metric being weight GB/s (codes + scales)
// for M <= 64 and TFLOP/s above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "qlinear/platform.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/random.hpp"

namespace qlinear {
namespace {

struct Shape2 {
  const char* name;
  int64_t n, k;
};

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

Tensor f32_filled(Shape shape, float v) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  std::fill(t.data<float>(), t.data<float>() + t.numel(), v);
  return t;
}

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

struct Timer {
  Tensor flush, sink;
  cudaEvent_t a = nullptr, b = nullptr;
  Timer() {
    flush = cuda::empty(DType::kU8, {256 << 20}).value();
    sink = cuda::empty(DType::kF32, {1}).value();
    (void)cuda::fill_bytes(flush, 0x5A);
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Median microseconds of fn; NaN when fn fails (the error is printed).
  double median_us(const std::function<Status()>& fn, int reps = 25) {
    const cudaStream_t s = cuda::current_stream();
    std::vector<double> t;
    for (int i = 0; i < reps + 3; ++i) {
      (void)cuda::l2_flush_read(flush.raw(), static_cast<size_t>(flush.nbytes()), sink.data<float>(), s);
      cudaEventRecord(a, s);
      const Status st = fn();
      cudaEventRecord(b, s);
      if (!st.is_ok()) {
        std::printf("  failed: %s\n", st.message().c_str());
        cudaStreamSynchronize(s);
        return NAN;
      }
      cudaEventSynchronize(b);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (i >= 3) t.push_back(ms * 1000.0);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      std::printf("  failed: %s\n", cudaGetErrorString(err));
      return NAN;
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  }
};

void report(const Shape2& sh, int64_t m, const char* variant, double us, double weight_bytes) {
  const double metric = m <= 64 ? weight_bytes / (us * 1e-6) / 1e9 : 2.0 * m * sh.n * sh.k / (us * 1e-6) / 1e12;
  std::printf("BENCH %-12s %6lld %6lld %5lld %-34s %9.2f us %8.1f %s\n", sh.name, static_cast<long long>(sh.n),
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

TEST(CudaBench, DISABLED_LlamaShapes) {
  auto platform = Platform::cuda_device(0);
  if (!platform) GTEST_SKIP() << "no CUDA device: " << platform.message();
  if (platform->cuda->compute_capability != 90) GTEST_SKIP() << "needs sm_90";
  std::printf("device: %s\n", platform->describe().c_str());
  const std::vector<Shape2> shapes = {{"8b.qkv", 6144, 4096},    {"8b.o", 4096, 4096},
                                      {"8b.gate_up", 28672, 4096}, {"8b.down", 4096, 14336},
                                      {"70b.qkv", 10240, 8192},  {"70b.down", 8192, 28672}};
  Timer timer;
  for (const Shape2& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    // Anchors' operands.
    auto w_bf16 = cuda::to_device(random_normal(DType::kBF16, {n, k}, 1, 0.05)).value();
    auto w_fp8 = cuda::to_device(random_bytes(DType::kF8E4M3, {n, k}, true)).value();
    auto ws_vec = cuda::to_device(f32_filled({n}, 0.01f)).value();
    auto ws_blk = cuda::to_device(f32_filled({(n + 127) / 128, (k + 127) / 128}, 0.01f)).value();
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
    if (sh.n == 6144 || sh.n == 8192) ms = {1, 2, 4, 8, 16, 64, 1024, 4096};
    for (int64_t m : ms) {
      auto x = cuda::to_device(random_normal(DType::kBF16, {m, k}, 2)).value();
      auto xq = cuda::to_device(random_bytes(DType::kF8E4M3, {m, k}, true)).value();
      auto xs = cuda::to_device(f32_filled({m * ((k + 127) / 128)}, 0.02f)).value();
      auto out = cuda::empty(DType::kBF16, {m, n}).value();
      const double fp8_bytes = static_cast<double>(n) * k;
      cuda::LtGemm g;
      g.m = m;
      g.n = n;
      g.k = k;
      g.ld_w = k;
      g.ld_x = k;
      g.out = out.raw();
      g.out_dtype = DType::kBF16;
      g.ab_dtype = DType::kBF16;
      g.w = w_bf16.raw();
      g.x = x.raw();
      report(sh, m, "anchor.cublas.bf16", timer.median_us([&] { return cuda::lt_gemm(g, cuda::current_stream()); }),
             2 * fp8_bytes);
      g.ab_dtype = DType::kF8E4M3;
      g.w = w_fp8.raw();
      g.x = xq.raw();
      g.scale_mode = cuda::LtScaleMode::kScalar;
      g.w_scale = ws_vec.data<float>();
      g.x_scale = xs.data<float>();
      report(sh, m, "anchor.cublaslt.fp8.tensor.gemm", timer.median_us([&] { return cuda::lt_gemm(g, cuda::current_stream()); }),
             fp8_bytes);
      g.fast_accum = true;
      report(sh, m, "anchor.cublaslt.fp8.tensor.fast.gemm",
             timer.median_us([&] { return cuda::lt_gemm(g, cuda::current_stream()); }), fp8_bytes);
      g.fast_accum = false;
      g.scale_mode = cuda::LtScaleMode::kOuterVec;
      report(sh, m, "anchor.cublaslt.fp8.rowwise.gemm",
             timer.median_us([&] { return cuda::lt_gemm(g, cuda::current_stream()); }), fp8_bytes);
      if (m > 1) {
        g.scale_mode = cuda::LtScaleMode::kBlock;
        g.w_scale = ws_blk.data<float>();
        report(sh, m, "anchor.cublaslt.fp8.block.gemm",
               timer.median_us([&] { return cuda::lt_gemm(g, cuda::current_stream()); }), fp8_bytes);
      }
      for (Named& o : ours) {
        if (m > o.max_m) continue;
        const Scheme& s = *find_scheme(o.scheme);
        double bytes = fp8_bytes;
        if (s.weight_key.scale.dtype == DType::kE8M0) bytes = storage_bytes(s.weight_key.dtype, k) * double(n) + n * (k / 32.0);
        report(sh, m, o.variant,
               timer.median_us([&] { return o.kernel->apply(o.layer, Activation::dense(x), nullptr, out); }), bytes);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear
#endif  // QLINEAR_WITH_CUDA
