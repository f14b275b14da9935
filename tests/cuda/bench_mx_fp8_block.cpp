// Where the FP8 block route's time goes (disabled by default; run with --gtest_also_run_disabled_tests
// --gtest_filter='CudaMxFp8BlockBench.*'), with the benchmark method of src/bench/timing.hpp (CUDA events, L2
// flushed before every repetition, medians), per layer shape and M:
//   bf16    cuBLAS BF16 on the unquantized weights (the anchor of the goals)
//   route   a W4A4 MXFP4 layer's apply on the FP8 block route (pass, widening, GEMM, repair launch)
//   bf16rt  the same layer on the BF16 routes (QLINEAR_MX_FP8_BLOCK's "off")
//   pass, widen, ingemm, repair   the route with every other stage skipped (probes; the memset included)
//   gemm    cuBLASLt's block-scaled FP8 GEMM alone on operands already in E4M3 (the route's floor)
//   rowwise cuBLASLt's FP8 GEMM with per-row x per-column scales (torch._scaled_mm) on the same operands
// Knobs: QL_FB_MS (default 256,1024,4096), QL_FB_SHAPES (substrings of the shape names; default every
// llama3-8b layer and 70b.qkv, 70b.o). Lines "FB <shape> M <name>=<us> ...".
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
#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_decode_kernels.hpp"
#include "backends/cuda/mx_fp8_block.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/mma_variants.hpp"
#include "qlinear/cuda.hpp"

namespace qlinear {
namespace {

using cuda_test::e4m3_codes;
using cuda_test::f32_filled;

TEST(CudaMxFp8BlockBench, DISABLED_Stages) {
  auto platform = Platform::cuda_device(0);
  if (!platform || platform->cuda->compute_capability != 90) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  std::printf("FBDEV %s\n", timer.describe().c_str());
  const cuda::Stream s = cuda::current_stream();
  const std::vector<int64_t> ms = cuda_test::env_ints("QL_FB_MS", "256,1024,4096");
  const char* only_env = std::getenv("QL_FB_SHAPES");
  const std::string only = only_env != nullptr ? only_env : "8b.,70b.qkv,70b.o";
  auto wanted = [&](const std::string& name) {
    size_t at = 0;
    while (at <= only.size()) {
      const size_t end = std::min(only.find(',', at), only.size());
      if (name.find(only.substr(at, end - at)) != std::string::npos) return true;
      at = end + 1;
    }
    return false;
  };
  const Scheme& scheme = *find_scheme("w4a4-mxfp4");
  auto time_us = [&](const std::function<Status()>& fn) {
    auto t = timer.time([&](int) { return fn(); }, 20);
    return t ? t->median_ms * 1000.0 : NAN;
  };
  for (const char* set_name : {"llama3-8b", "llama3-70b"}) {
    for (const bench::LayerShape& sh : bench::find_shape_set(set_name)->layers) {
      if (!wanted(sh.name)) continue;
      const int64_t n = sh.n, k = sh.k;
      auto bf16 = bench::CudaAnchor::create("bf16", scheme, n, k, timer);
      ASSERT_TRUE(bf16) << bf16.message();
      auto layer = quantize_layer(sh.name, scheme, random_normal(DType::kF32, {n, k}, 3, 0.05), MakeLayerOptions{});
      ASSERT_TRUE(layer) << layer.message();
      ASSERT_TRUE(cuda::kSm90MmaDecodeMxfp4.process_weights_after_loading(*layer).is_ok());
      auto w8 = cuda::to_device(e4m3_codes(n, k, 5)).value();
      const int64_t kb = k / 128, nb = (n + 127) / 128;
      auto w_blk = cuda::to_device(f32_filled({nb, (kb + 3) / 4 * 4}, 1.0f)).value();
      auto w_col = cuda::to_device(f32_filled({n}, 1.0f)).value();
      for (int64_t m : ms) {
        std::string line;
        auto add = [&](const char* what, double us) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), " %s=%.1f", what, us);
          line += buf;
        };
        auto t = (*bf16)->time(m, 20);
        add("bf16", t ? t->median_ms * 1000.0 : NAN);
        auto xb = cuda::to_device(bench::random_rows(DType::kBF16, m, k, 5, 1.0)).value();
        auto out = cuda::empty(DType::kBF16, {m, n}).value();
        struct Run {
          const char* name;
          int route, probe;
        };
        for (const Run& r : {Run{"route", 1, 0}, Run{"bf16rt", -1, 0},
                             Run{"pass", 1, cuda::kProbeNoWiden | cuda::kProbeNoGemm | cuda::kProbeNoRepair},
                             Run{"widen", 1, cuda::kProbeNoPass | cuda::kProbeNoGemm | cuda::kProbeNoRepair},
                             Run{"ingemm", 1, cuda::kProbeNoPass | cuda::kProbeNoWiden | cuda::kProbeNoRepair},
                             Run{"repair", 1, cuda::kProbeNoPass | cuda::kProbeNoWiden | cuda::kProbeNoGemm}}) {
          cuda::MmaDecodeForce f;
          f.mx_fp8_block = r.route;
          f.mx_fp8_probe = r.probe;
          cuda_test::ForceScope force(f);
          add(r.name, time_us([&] { return cuda::kSm90MmaDecodeMxfp4.apply(*layer, Activation::dense(xb), nullptr, out); }));
        }
        auto x8 = cuda::to_device(e4m3_codes(m, k, 7)).value();
        auto x_blk = cuda::to_device(f32_filled({kb * m}, 1.0f)).value();
        auto x_row = cuda::to_device(f32_filled({m}, 1.0f)).value();
        cuda::LtGemm g;
        g.w = w8.raw();
        g.ld_w = k;
        g.x = x8.raw();
        g.ld_x = k;
        g.m = m;
        g.n = n;
        g.k = k;
        g.out = out.raw();
        g.scale_mode = cuda::LtScaleMode::kBlock;
        g.w_scale = static_cast<const float*>(w_blk.raw());
        g.x_scale = static_cast<const float*>(x_blk.raw());
        add("gemm", time_us([&] { return cuda::lt_gemm(g, s); }));
        g.scale_mode = cuda::LtScaleMode::kOuterVec;
        g.w_scale = static_cast<const float*>(w_col.raw());
        g.x_scale = static_cast<const float*>(x_row.raw());
        g.use_table = false;
        add("rowwise", time_us([&] { return cuda::lt_gemm(g, s); }));
        std::printf("FB %s %lld%s\n", sh.name.c_str(), static_cast<long long>(m), line.c_str());
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear

#endif  // QLINEAR_WITH_CUDA
