// The FP8 W8A8 prefill GEMMs side by side in one process (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='CudaFp8PrefillBench.*'), with the benchmark method of
// src/bench/timing.hpp (CUDA events, L2 flushed before every repetition, medians):
//   anchors   cuBLAS BF16 (torch.mm), cuBLASLt FP8 GEMM-only on pre-quantized operands with the heuristic's
//             algorithm (torch._scaled_mm: rowwise outer-vector scales, and per-tensor scalar scales);
//   ours      the persistent wgmma GEMM (wgmma_fp8_gemm.hpp) on the same pre-quantized operands, each tile
//             width and the automatic choice; its output compared with cuBLASLt's on the first 512 rows;
//   routes    from BF16 activations, quantization included: the cuBLASLt route and the wgmma route, FP8
//             per-channel (dynamic per-token) and per-tensor (static), and the quantizer alone.
// Knobs: QL_PF_MS (default 1024,4096,8192), QL_PF_SHAPES (substrings of the llama3-8b shape names),
// QL_PF_GROUP (group_m of the wgmma rasterization, default the kernel's).
// Lines "PF <shape> M <name>=<us> ..." and "PFX <shape> M <key ratios>".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda_anchors.hpp"
#include "bench/shapes.hpp"
#include "bench/timing.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/wgmma_fp8_gemm.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"

namespace qlinear {
namespace {

bool have_sm90() {
  auto platform = Platform::cuda_device(0);
  return platform && platform->cuda->compute_capability == 90;
}

using cuda_test::e4m3_codes;
using cuda_test::f32_filled;

double bf16_at(const Tensor& t, int64_t i) {
  const uint32_t u = static_cast<uint32_t>(static_cast<const uint16_t*>(t.raw())[i]) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A processed FP8 layer of random codes (per-channel or per-tensor weight scales) for `kernel`.
LinearLayer fp8_layer(const LinearKernel& kernel, const char* scheme_name, const bench::LayerShape& sh) {
  const Scheme& scheme = *find_scheme(scheme_name);
  const bool tensor = scheme.weight_key.scale.group.is_per_tensor();
  LinearLayer layer;
  layer.name = sh.name;
  layer.config = make_config(scheme, sh.n, sh.k);
  layer.params["weight"] = e4m3_codes(sh.n, sh.k, 11);
  Tensor ws = tensor ? f32_filled({1}, 0.01f) : Tensor::empty(DType::kF32, {sh.n, 1});
  for (int64_t i = 0; !tensor && i < sh.n; ++i) ws.data<float>()[i] = 0.01f * (1 + i % 5);
  layer.params["weight_scale"] = ws;
  if (scheme.activation_key->scale.is_static) layer.params["input_scale"] = f32_filled({1}, 0.02f);
  const Status st = kernel.process_weights_after_loading(layer);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return layer;
}

TEST(CudaFp8PrefillBench, DISABLED_VersusCublasLt) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  std::printf("PFDEV %s\n", timer.describe().c_str());
  const cuda::Stream s = cuda::current_stream();
  const std::vector<int64_t> ms = cuda_test::env_ints("QL_PF_MS", "1024,4096,8192");
  const std::vector<int64_t> groups = cuda_test::env_ints("QL_PF_GROUP", "0");
  const char* only = std::getenv("QL_PF_SHAPES");
  const bench::ShapeSet* set = bench::find_shape_set("llama3-8b");
  ASSERT_NE(set, nullptr);
  auto time_us = [&](const std::function<Status()>& fn) {
    auto t = timer.time([&](int) { return fn(); }, 30);
    return t ? t->median_ms * 1000.0 : NAN;
  };
  const Scheme& channel = *find_scheme("w8a8-fp8-channel");
  const Scheme& tensor = *find_scheme("w8a8-fp8-tensor");
  for (const bench::LayerShape& sh : set->layers) {
    if (only != nullptr && *only != 0 && std::string(only).find(sh.name) == std::string::npos) continue;
    const int64_t n = sh.n, k = sh.k;
    auto bf16 = bench::CudaAnchor::create("bf16", channel, n, k, timer);
    auto lt_row = bench::CudaAnchor::create("vendor", channel, n, k, timer);
    auto lt_ten = bench::CudaAnchor::create("vendor", tensor, n, k, timer);
    ASSERT_TRUE(bf16 && lt_row && lt_ten);
    auto w = cuda::to_device(e4m3_codes(n, k, 5)).value();
    Tensor ws_host = Tensor::empty(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i) ws_host.data<float>()[i] = 0.01f * (1 + i % 7);
    auto w_scale = cuda::to_device(ws_host).value();
    const LinearLayer lt_ch = fp8_layer(cuda::kCublasLtFp8ScaledMM, "w8a8-fp8-channel", sh);
    const LinearLayer wg_ch = fp8_layer(cuda::kSm90Fp8ScaledMMWgmma, "w8a8-fp8-channel", sh);
    const LinearLayer lt_t = fp8_layer(cuda::kCublasLtFp8ScaledMM, "w8a8-fp8-tensor", sh);
    const LinearLayer wg_t = fp8_layer(cuda::kSm90Fp8ScaledMMWgmma, "w8a8-fp8-tensor", sh);
    for (int64_t m : ms) {
      std::string line;
      auto add = [&](const char* what, double us) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), " %s=%.1f", what, us);
        line += buf;
        return us;
      };
      auto anchor_us = [](Result<std::unique_ptr<bench::CudaAnchor>>& a, int64_t mm) {
        auto t = (*a)->time(mm, 30);
        return t ? t->median_ms * 1000.0 : NAN;
      };
      const double t_bf16 = add("bf16", anchor_us(bf16, m));
      const double t_lt_row = add("lt_row", anchor_us(lt_row, m));
      const double t_lt_ten = add("lt_ten", anchor_us(lt_ten, m));

      auto x = cuda::to_device(e4m3_codes(m, k, 7 + m)).value();
      Tensor xs_host = Tensor::empty(DType::kF32, {m});
      for (int64_t i = 0; i < m; ++i) xs_host.data<float>()[i] = 0.02f * (1 + i % 3);
      auto x_scale = cuda::to_device(xs_host).value();
      auto out_lt = cuda::empty(DType::kBF16, {m, n}).value();
      auto out_wg = cuda::empty(DType::kBF16, {m, n}).value();
      cuda::LtGemm g;
      g.w = w.raw();
      g.ld_w = k;
      g.x = x.raw();
      g.ld_x = k;
      g.m = m;
      g.n = n;
      g.k = k;
      g.scale_mode = cuda::LtScaleMode::kOuterVec;
      g.w_scale = static_cast<const float*>(w_scale.raw());
      g.x_scale = static_cast<const float*>(x_scale.raw());
      g.out = out_lt.raw();
      g.use_table = false;
      ASSERT_TRUE(cuda::lt_gemm(g, s).is_ok());
      const int64_t rows = std::min<int64_t>(m, 512);
      auto lt_h = cuda::to_host(out_lt).value();
      double rms = 0;
      for (int64_t i = 0; i < rows * n; ++i) rms += bf16_at(lt_h, i) * bf16_at(lt_h, i);
      rms = std::sqrt(rms / static_cast<double>(rows * n)) + 1e-30;

      cuda::WgmmaFp8Args a;
      a.x = x.raw();
      a.ld_x = k;
      a.w = w.raw();
      a.ld_w = k;
      a.m = m;
      a.n = n;
      a.k = k;
      a.x_scale = g.x_scale;
      a.x_scale_per_row = true;
      a.w_scale = g.w_scale;
      a.w_scale_per_col = true;
      a.out = out_wg.raw();
      double t_auto = NAN;
      int64_t bad_total = 0;
      double worst_total = 0;
      struct Var {
        const char* name;
        cuda::WgmmaFp8Tile tile;
        int cluster;
        bool fast;
      };
      for (int64_t gm : groups) {
        a.group_m = static_cast<int>(gm);
        for (const Var& v : {Var{"wg_auto", cuda::WgmmaFp8Tile::kAuto, 0, false},
                             Var{"wg128", cuda::WgmmaFp8Tile::kN128, 1, false},
                             Var{"wg192", cuda::WgmmaFp8Tile::kN192, 1, false},
                             Var{"wg256", cuda::WgmmaFp8Tile::kN256, 1, false},
                             Var{"wg192c2", cuda::WgmmaFp8Tile::kN192, 2, false},
                             Var{"wg256c2", cuda::WgmmaFp8Tile::kN256, 2, false},
                             Var{"wg256fast", cuda::WgmmaFp8Tile::kN256, 1, true}}) {
          a.tile = v.tile;
          a.cluster_m = v.cluster;
          a.fast_accum = v.fast;
          ASSERT_TRUE(cuda::fill_bytes(out_wg, 0xFF).is_ok());
          const Status st = cuda::launch_wgmma_fp8_gemm(a, s);
          ASSERT_TRUE(st.is_ok()) << v.name << ": " << st.message();
          auto wg_h = cuda::to_host(out_wg).value();
          int64_t bad = 0;
          for (int64_t i = 0; i < rows * n; ++i) {
            const double d = std::fabs(bf16_at(wg_h, i) - bf16_at(lt_h, i));
            if (!v.fast) worst_total = std::max(worst_total, d / rms);
            if (!(d <= 1.0 / 64 * std::fabs(bf16_at(lt_h, i)) + 1e-3 * rms)) ++bad;
          }
          if (!v.fast) bad_total += bad;
          std::string name = v.name;
          if (groups.size() > 1) name += ".g" + std::to_string(gm);
          if (bad > 0) name += "(bad" + std::to_string(bad) + ")";
          const double us = add(name.c_str(), time_us([&] { return cuda::launch_wgmma_fp8_gemm(a, s); }));
          if (v.tile == cuda::WgmmaFp8Tile::kAuto && std::isnan(t_auto)) t_auto = us;
        }
      }
      a.cluster_m = 0;
      a.fast_accum = false;
      a.tile = cuda::WgmmaFp8Tile::kAuto;
      a.group_m = 0;
      a.x_scale_per_row = false;
      a.w_scale_per_col = false;
      const double t_wg_ten = add("wg_ten", time_us([&] { return cuda::launch_wgmma_fp8_gemm(a, s); }));

      // Routes from BF16 activations (quantization included) and the quantizer alone.
      auto xb = cuda::to_device(bench::random_rows(DType::kBF16, m, k, 5, 1.0)).value();
      auto out = cuda::empty(DType::kBF16, {m, n}).value();
      auto run = [&](const LinearKernel& kern, const LinearLayer& l) {
        return time_us([&] { return kern.apply(l, Activation::dense(xb), nullptr, out); });
      };
      const double r_lt_ch = add("rt_lt_ch", run(cuda::kCublasLtFp8ScaledMM, lt_ch));
      const double r_wg_ch = add("rt_wg_ch", run(cuda::kSm90Fp8ScaledMMWgmma, wg_ch));
      const double r_lt_t = add("rt_lt_t", run(cuda::kCublasLtFp8ScaledMM, lt_t));
      const double r_wg_t = add("rt_wg_t", run(cuda::kSm90Fp8ScaledMMWgmma, wg_t));
      auto codes = cuda::empty(DType::kU8, {m, k}).value();
      cuda::ActQuantArgs q;
      q.x = xb.raw();
      q.m = m;
      q.k = k;
      q.ld_x = k;
      q.codes = codes.raw();
      q.ld_codes = k;
      q.mode = cuda::ActQuantMode::kDynamicToken;
      q.scale = {x_scale.raw(), 1, 0, false};
      const double q_tok = add("q_tok", time_us([&] { return cuda::launch_act_quant(q, s); }));
      // The quantizer and the GEMM in sequence, plain and with the GEMM's programmatic dependent launch.
      a.x = codes.raw();
      a.x_scale_per_row = true;
      a.w_scale_per_col = true;
      const auto seq = [&](bool pdl) {
        a.pdl = pdl;
        return time_us([&] {
          QL_RETURN_IF_ERROR(cuda::launch_act_quant(q, s));
          return cuda::launch_wgmma_fp8_gemm(a, s);
        });
      };
      add("seq", seq(false));
      add("seq_pdl", seq(true));
      a.pdl = false;
      // The quantization fused into the GEMM (per-token, then static), ready counters zeroed each call.
      const int64_t blocks = (m + 127) / 128;
      auto ready = cuda::empty(DType::kI32, {blocks}).value();
      a.q_src = xb.raw();
      a.q_ld_src = k;
      a.ready = static_cast<int*>(ready.raw());
      const auto fused = [&](cuda::WgmmaFp8Args::FusedQuant mode) {
        a.q_mode = mode;
        return time_us([&] {
          QL_CUDA_CHECK(cudaMemsetAsync(ready.raw(), 0, sizeof(int) * static_cast<size_t>(blocks), s));
          return cuda::launch_wgmma_fp8_gemm(a, s);
        });
      };
      const double f_tok = add("fused_tok", fused(cuda::WgmmaFp8Args::FusedQuant::kToken));
      a.q_static_scale = 0.02f;
      const double f_st = add("fused_st", fused(cuda::WgmmaFp8Args::FusedQuant::kStatic));
      a.q_mode = cuda::WgmmaFp8Args::FusedQuant::kNone;
      q.mode = cuda::ActQuantMode::kStaticTensor;
      q.static_scale = 0.02f;
      q.scale = {x_scale.raw(), 0, 0, false};
      add("q_st", time_us([&] { return cuda::launch_act_quant(q, s); }));
      std::printf("PF %s %lld%s bad=%lld worst=%.2e\n", sh.name.c_str(), static_cast<long long>(m), line.c_str(),
                  static_cast<long long>(bad_total), worst_total);
      const double tf = 2.0 * static_cast<double>(m) * n * k / 1e6;  // MFLOP: / us = TFLOPS
      // Compact: TFLOPS of cuBLAS BF16, cuBLASLt rowwise and ours (auto tile), GEMM-only ratios (lt / ours: > 1 is ours
      // faster) rowwise and per-tensor, routes from BF16 over the GEMM-only anchor, outputs out of bounds.
      std::printf("PFX %-10s %5lld %4.0f %4.0f %4.0f g %.2f %.2f r %.2f>%.2f %.2f>%.2f f %.2f %.2f q %.0f b %lld\n",
                  sh.name.c_str(), static_cast<long long>(m), tf / t_bf16, tf / t_lt_row, tf / t_auto,
                  t_lt_row / t_auto, t_lt_ten / t_wg_ten,
                  t_lt_row / r_lt_ch, t_lt_row / r_wg_ch, t_lt_ten / r_lt_t, t_lt_ten / r_wg_t, t_lt_row / f_tok,
                  t_lt_ten / f_st, q_tok,
                  static_cast<long long>(bad_total));
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace qlinear

#else
TEST(CudaFp8PrefillBench, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend"; }
#endif
