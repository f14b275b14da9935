// The small-M FP8 W8A8 routes side by side in one process (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='CudaFp8MmaBench.*'), with the benchmark method of
// src/bench/timing.hpp (CUDA events, L2 flushed before every repetition, medians): from BF16 activations,
// quantization included, the FP8 mma route (fp8_mma_gemm.hpp) with its variants (K split counts, token tiles)
// and the cuBLASLt route, per-channel weights with per-token activations and per-tensor weights with a static scale;
// the anchors cuBLAS BF16 (torch.mm) and cuBLASLt FP8 GEMM-only on pre-quantized operands (torch._scaled_mm).
// Knobs: QL_F8M_MS (default 1,8,16,32,64), QL_F8M_SETS (default llama3-8b,llama3-70b), QL_F8M_SHAPES (substrings
// of the shape names). Lines "F8M <shape> M <name>=<us> ...".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/cuda_anchors.hpp"
#include "bench/shapes.hpp"
#include "bench/timing.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/fp8_mma_gemm.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"

namespace qlinear {
namespace {

// A processed FP8 layer of random weights (the scheme's scales) for `kernel`.
LinearLayer fp8_layer(const LinearKernel& kernel, const char* scheme_name, const bench::LayerShape& sh) {
  const Scheme& scheme = *find_scheme(scheme_name);
  LinearLayer layer;
  layer.name = sh.name;
  layer.config = make_config(scheme, sh.n, sh.k);
  const bool tensor = scheme.weight_key.scale.group.is_per_tensor();
  Tensor codes = Tensor::empty(DType::kF8E4M3, {sh.n, sh.k});
  uint64_t st = 0x9E3779B97F4A7C15ull;
  auto* p = static_cast<uint8_t*>(codes.raw());
  for (int64_t i = 0; i < codes.nbytes(); ++i) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    p[i] = (st & 0x7F) == 0x7F ? 0x3C : static_cast<uint8_t>(st);
  }
  layer.params["weight"] = codes;
  Tensor ws = Tensor::empty(DType::kF32, {tensor ? 1 : sh.n, 1});
  for (int64_t i = 0; i < ws.numel(); ++i) ws.data<float>()[i] = 0.01f * (1 + i % 5);
  layer.params["weight_scale"] = tensor ? ws.reshape({1}).value() : ws;
  if (scheme.activation_key->scale.is_static) {
    Tensor is = Tensor::empty(DType::kF32, {1});
    is.data<float>()[0] = 0.02f;
    layer.params["input_scale"] = is;
  }
  const Status s = kernel.process_weights_after_loading(layer);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return layer;
}

TEST(CudaFp8MmaBench, DISABLED_Variants) {
  QL_REQUIRE_SM90();
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  std::printf("F8MDEV %s\n", timer.describe().c_str());
  const std::vector<int64_t> ms = cuda_test::env_ints("QL_F8M_MS", "1,8,16,32,64");
  const char* only = std::getenv("QL_F8M_SHAPES");
  auto time_us = [&](const std::function<Status()>& fn) {
    auto t = timer.time([&](int) { return fn(); }, 30);
    return t ? t->median_ms * 1000.0 : NAN;
  };
  struct Variant {
    const char* name;
    cuda::Fp8MmaForce force;
  };
  const Variant variants[] = {
      {"mma", {}},
      {"mma_s1", {1, 0}},
      {"mma_s2", {2, 0}},
      {"mma_s4", {4, 0}},
      {"mma_s8", {8, 0}},
      {"mma_tn8", {0, 8}},
  };
  for (const std::string& set_name : cuda_test::env_strings("QL_F8M_SETS", "llama3-8b,llama3-70b")) {
    const bench::ShapeSet* set = bench::find_shape_set(set_name);
    ASSERT_NE(set, nullptr) << set_name;
    for (const bench::LayerShape& sh : set->layers) {
      if (only != nullptr && *only != 0 && std::string(only).find(sh.name) == std::string::npos) continue;
      const LinearLayer mma_ch = fp8_layer(cuda::kSm90Fp8ScaledMMMma, "w8a8-fp8-channel", sh);
      const LinearLayer mma_t = fp8_layer(cuda::kSm90Fp8ScaledMMMma, "w8a8-fp8-tensor", sh);
      const LinearLayer lt_ch = fp8_layer(cuda::kCublasLtFp8ScaledMM, "w8a8-fp8-channel", sh);
      const LinearLayer lt_t = fp8_layer(cuda::kCublasLtFp8ScaledMM, "w8a8-fp8-tensor", sh);
      auto bf16 = bench::CudaAnchor::create("bf16", *find_scheme("w8a8-fp8-channel"), sh.n, sh.k, timer);
      auto v_row = bench::CudaAnchor::create("vendor", *find_scheme("w8a8-fp8-channel"), sh.n, sh.k, timer);
      auto v_ten = bench::CudaAnchor::create("vendor", *find_scheme("w8a8-fp8-tensor"), sh.n, sh.k, timer);
      ASSERT_TRUE(bf16 && v_row && v_ten);
      for (int64_t m : ms) {
        std::string line = "F8M " + sh.name + " " + std::to_string(m);
        auto add = [&](const char* what, double us) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), " %s=%.1f", what, us);
          line += buf;
        };
        auto anchor_us = [&](Result<std::unique_ptr<bench::CudaAnchor>>& a) {
          auto t = (*a)->time(m, 30);
          return t ? t->median_ms * 1000.0 : NAN;
        };
        add("bf16", anchor_us(bf16));
        add("v_row", anchor_us(v_row));
        add("v_ten", anchor_us(v_ten));
        auto x = cuda::to_device(bench::random_rows(DType::kBF16, m, sh.k, 7 + m, 1.0)).value();
        auto out = cuda::empty(DType::kBF16, {m, sh.n}).value();
        auto run = [&](const LinearKernel& kern, const LinearLayer& l) {
          return time_us([&] { return kern.apply(l, Activation::dense(x), nullptr, out); });
        };
        add("lt_ch", run(cuda::kCublasLtFp8ScaledMM, lt_ch));
        add("lt_t", run(cuda::kCublasLtFp8ScaledMM, lt_t));
        for (const Variant& v : variants) {
          cuda::fp8_mma_force(v.force);
          add((std::string(v.name) + "_ch").c_str(), run(cuda::kSm90Fp8ScaledMMMma, mma_ch));
          add((std::string(v.name) + "_t").c_str(), run(cuda::kSm90Fp8ScaledMMMma, mma_t));
        }
        cuda::fp8_mma_force({});
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear
#endif  // QLINEAR_WITH_CUDA
