// GPU benchmarks of the prefill path's pieces (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='CudaPrefillBench.*'), with the benchmark method of
// src/bench/timing.hpp (CUDA events, L2 flushed before every repetition, medians):
//   ActQuant:   each activation quantizer (FP8 modes, INT8 modes): the simple kernels (act_quant_simple.hpp)
//               against the entry points (the vector kernels, or the simple ones where they measured faster)
//               in the same process; GB/s of the minimal traffic (activations read once, codes and scales
//               written once). Lines "AQ <mode> K M simple_us entry_us simple_GB/s entry_GB/s general ..."
//               (general: the entry point with its aligned-BF16 row kernel turned off).
//               Knobs (to profile one kernel): QL_AQ_KS, QL_AQ_MS, QL_AQ_MODES (mode names as printed).
//   LtCandidates: every cuBLASLt heuristic candidate (up to 16) of FP8 with fast accumulation (and with
//               QLINEAR_LT_BENCH=all the kinds `qlinear tune` measures) at llama3-8b shapes; lines
//               "LT <kind> <shape> M heur us best us ...", and the INT8 epilogue combinations (scales in
//               cuBLASLt's epilogue, BF16/F32 output) cuBLASLt accepts on this GPU ("LTPROBE" when none).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>
#include <vector>

#include "bench/shapes.hpp"
#include "bench/timing.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/act_quant_simple.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "backends/cuda/wgmma_int8_gemm.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"

namespace qlinear {
namespace {

bool have_sm90() {
  auto platform = Platform::cuda_device(0);
  return platform && platform->cuda->compute_capability == 90;
}

double median_us(bench::DeviceTimer& timer, const std::function<Status()>& fn, int reps = 30) {
  auto t = timer.time([&](int) { return fn(); }, reps);
  if (!t) {
    std::printf("  failed: %s\n", t.message().c_str());
    return NAN;
  }
  return t->median_ms * 1000.0;
}

TEST(CudaPrefillBench, DISABLED_ActQuant) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  const cuda::Stream s = cuda::current_stream();
  const std::vector<std::string> modes = cuda_test::env_strings("QL_AQ_MODES", "");
  const auto wanted = [&](const char* name) {
    return modes.empty() || std::find(modes.begin(), modes.end(), name) != modes.end();
  };
  for (int64_t k : cuda_test::env_ints("QL_AQ_KS", "4096,14336")) {
    for (int64_t m : cuda_test::env_ints("QL_AQ_MS", "16,256,1024,4096,8192")) {
      auto x = cuda::to_device(bench::random_rows(DType::kBF16, m, k, 3, 1.0)).value();
      auto codes = cuda::empty(DType::kU8, {m, k}).value();
      auto scales = cuda::empty(DType::kF32, {m * (k / 32 + 1)}).value();
      auto zps = cuda::empty(DType::kI32, {m}).value();
      auto amax = cuda::empty(DType::kU8, {4}).value();
      struct Fp8Mode {
        const char* name;
        cuda::ActQuantMode mode;
        int group;
      };
      for (const Fp8Mode& md : {Fp8Mode{"fp8.static", cuda::ActQuantMode::kStaticTensor, 0},
                                Fp8Mode{"fp8.dyn_tensor", cuda::ActQuantMode::kDynamicTensor, 0},
                                Fp8Mode{"fp8.dyn_token", cuda::ActQuantMode::kDynamicToken, 0},
                                Fp8Mode{"fp8.group128", cuda::ActQuantMode::kDynamicGroup128, 128},
                                Fp8Mode{"mxfp8.block32", cuda::ActQuantMode::kMx32, 32}}) {
        if (!wanted(md.name)) continue;
        cuda::ActQuantArgs a;
        a.x = x.raw();
        a.x_dtype = DType::kBF16;
        a.m = m;
        a.k = k;
        a.ld_x = k;
        a.mode = md.mode;
        a.static_scale = 0.02f;
        a.codes = codes.raw();
        a.ld_codes = k;
        a.amax_scratch = reinterpret_cast<uint32_t*>(amax.raw());
        const int64_t groups = md.group ? k / md.group : 1;
        if (md.group) {
          a.scale = {scales.raw(), groups, 1, false};
        } else {
          a.scale = {scales.raw(), md.mode == cuda::ActQuantMode::kDynamicToken ? 1 : 0, 0, false};
        }
        const double old_us = median_us(timer, [&] { return cuda::launch_act_quant_simple(a, s); });
        const double new_us = median_us(timer, [&] { return cuda::launch_act_quant(a, s); });
        cuda::act_quant_allow_rows_kernel(false);
        const double general_us = median_us(timer, [&] { return cuda::launch_act_quant(a, s); });
        cuda::act_quant_allow_rows_kernel(true);
        const double bytes = static_cast<double>(m) * k * 3 + static_cast<double>(m) * groups * 4;
        std::printf("AQ %-14s %6lld %5lld %8.2f %8.2f %7.0f %7.0f  general %8.2f us %7.0f GB/s\n", md.name,
                    static_cast<long long>(k), static_cast<long long>(m), old_us, new_us, bytes / old_us / 1e3,
                    bytes / new_us / 1e3, general_us, bytes / general_us / 1e3);
      }
      struct Int8Mode {
        const char* name;
        cuda::Int8ActMode mode;
      };
      for (const Int8Mode& md : {Int8Mode{"int8.static", cuda::Int8ActMode::kStaticSym},
                                 Int8Mode{"int8.static_asym", cuda::Int8ActMode::kStaticAsym},
                                 Int8Mode{"int8.dyn_token", cuda::Int8ActMode::kDynamicTokenSym},
                                 Int8Mode{"int8.dyn_token_asym", cuda::Int8ActMode::kDynamicTokenAsym}}) {
        if (!wanted(md.name)) continue;
        cuda::Int8QuantArgs a;
        a.x = x.raw();
        a.x_dtype = DType::kBF16;
        a.m = m;
        a.k = k;
        a.ld_x = k;
        a.mode = md.mode;
        a.static_scale = 0.02f;
        a.static_zero_point = 3;
        a.codes = static_cast<int8_t*>(codes.raw());
        a.ld_codes = k;
        a.scales = static_cast<float*>(scales.raw());
        a.zero_points = static_cast<int32_t*>(zps.raw());
        const double old_us = median_us(timer, [&] { return cuda::launch_int8_act_quant_simple(a, s); });
        const double new_us = median_us(timer, [&] { return cuda::launch_int8_act_quant(a, s); });
        cuda::act_quant_allow_rows_kernel(false);
        const double general_us = median_us(timer, [&] { return cuda::launch_int8_act_quant(a, s); });
        cuda::act_quant_allow_rows_kernel(true);
        const double bytes = static_cast<double>(m) * k * 3 + static_cast<double>(m) * 8;
        std::printf("AQ %-14s %6lld %5lld %8.2f %8.2f %7.0f %7.0f  general %8.2f us %7.0f GB/s\n", md.name,
                    static_cast<long long>(k), static_cast<long long>(m), old_us, new_us, bytes / old_us / 1e3,
                    bytes / new_us / 1e3, general_us, bytes / general_us / 1e3);
      }
      std::fflush(stdout);
    }
  }
}

// Random one-byte codes (cuda_test::random_codes; the timing does not depend on them).
Tensor random_codes(DType d, int64_t rows, int64_t cols) {
  return cuda_test::random_codes(d, rows, cols, 0x9E3779B97F4A7C15ull);
}

Tensor f32_filled(int64_t n, float v) {
  Tensor t = Tensor::empty(DType::kF32, {n});  // [n]
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v;
  return t;
}

TEST(CudaPrefillBench, DISABLED_LtCandidates) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  const cuda::Stream s = cuda::current_stream();
  const bench::ShapeSet* set = bench::find_shape_set("llama3-8b");
  ASSERT_NE(set, nullptr);
  bool probed = false;
  for (const bench::LayerShape& sh : set->layers) {
    const int64_t n = sh.n, k = sh.k;
    auto w8 = cuda::to_device(random_codes(DType::kF8E4M3, n, k)).value();
    auto wi = cuda::to_device(random_codes(DType::kI8, n, k)).value();
    auto w_scale = cuda::to_device(f32_filled(n, 0.01f)).value();
    for (int64_t m : {16, 256, 1024, 4096}) {
      auto x8 = cuda::to_device(random_codes(DType::kF8E4M3, m, k)).value();
      auto xi = cuda::to_device(random_codes(DType::kI8, m, k)).value();
      auto x_scale = cuda::to_device(f32_filled(m, 0.02f)).value();
      auto out = cuda::empty(DType::kF32, {m, n}).value();
      struct Kind {
        const char* name;
        DType ab;
        cuda::LtScaleMode mode;
        DType out;
        bool fast;
      };
      // QLINEAR_LT_BENCH=all: also the kinds `qlinear tune` measures (tensor, rowwise, INT32 INT8).
      const char* all_env = std::getenv("QLINEAR_LT_BENCH");
      const bool all = all_env != nullptr && std::string(all_env) == "all";
      std::vector<Kind> kinds = {{"fp8.tensor.fastacc", DType::kF8E4M3, cuda::LtScaleMode::kScalar, DType::kBF16, true}};
      if (all) {
        kinds.push_back({"fp8.tensor", DType::kF8E4M3, cuda::LtScaleMode::kScalar, DType::kBF16, false});
        kinds.push_back({"fp8.rowwise", DType::kF8E4M3, cuda::LtScaleMode::kOuterVec, DType::kBF16, false});
        kinds.push_back({"int8.i32", DType::kI8, cuda::LtScaleMode::kNone, DType::kI32, false});
      }
      if (!probed) {
        // INT8 with the scales in cuBLASLt's epilogue: which combinations have kernels on this GPU.
        kinds.push_back({"int8.rowwise.bf16", DType::kI8, cuda::LtScaleMode::kOuterVec, DType::kBF16, false});
        kinds.push_back({"int8.tensor.bf16", DType::kI8, cuda::LtScaleMode::kScalar, DType::kBF16, false});
        kinds.push_back({"int8.none.bf16", DType::kI8, cuda::LtScaleMode::kNone, DType::kBF16, false});
        kinds.push_back({"int8.none.f32", DType::kI8, cuda::LtScaleMode::kNone, DType::kF32, false});
        kinds.push_back({"int8.alphavec.bf16", DType::kI8, cuda::LtScaleMode::kNone, DType::kBF16, false});
        kinds.push_back({"int8.alphavec.f32", DType::kI8, cuda::LtScaleMode::kNone, DType::kF32, false});
      }
      for (const Kind& kd : kinds) {
        const bool fp8 = kd.ab == DType::kF8E4M3;
        cuda::LtGemm g;
        g.ab_dtype = kd.ab;
        g.w = fp8 ? w8.raw() : wi.raw();
        g.ld_w = k;
        g.x = fp8 ? x8.raw() : xi.raw();
        g.ld_x = k;
        g.m = m;
        g.n = n;
        g.k = k;
        g.scale_mode = kd.mode;
        g.w_scale = static_cast<const float*>(w_scale.raw());
        g.x_scale = static_cast<const float*>(x_scale.raw());
        if (kd.mode == cuda::LtScaleMode::kScalar) g.x_scale = g.w_scale;
        g.out = out.raw();
        g.out_dtype = kd.out;
        g.fast_accum = kd.fast;
        g.use_table = false;
        if (std::strstr(kd.name, "alphavec") != nullptr) g.alpha_vector = static_cast<const float*>(w_scale.raw());
        auto cands = cuda::lt_candidates(g, 16, 32u << 20);
        if (!cands || cands->empty()) {
          std::printf("LTPROBE %-20s %-10s M=%lld: no algorithm (%s)\n", kd.name, sh.name.c_str(),
                      static_cast<long long>(m), cands ? "none found" : cands.message().c_str());
          continue;
        }
        const double heur_us = median_us(timer, [&] { return cuda::lt_gemm(g, s); });
        double best = INFINITY;
        size_t best_i = 0;
        std::string cfgs;
        for (size_t i = 0; i < cands->size(); ++i) {
          cuda::LtGemm gi = g;
          gi.algo = &(*cands)[i];
          const double us = median_us(timer, [&] { return cuda::lt_gemm(gi, s); }, 20);
          char buf[32];
          std::snprintf(buf, sizeof(buf), " %.1f", us);
          cfgs += buf;
          if (us < best) {
            best = us;
            best_i = i;
          }
        }
        const double tflops = 2.0 * m * n * k / (best * 1e-6) / 1e12;
        std::printf("LT %-20s %-11s %5lld heur %8.2f best %8.2f (%5.0f T) rank %zu/%zu [%s] all:%s\n", kd.name,
                    sh.name.c_str(), static_cast<long long>(m), heur_us, best, tflops, best_i, cands->size(),
                    cuda::describe((*cands)[best_i]).c_str(), cfgs.c_str());
        std::fflush(stdout);
      }
      probed = true;
    }
  }
}

// The FP8 W8A8 route end to end (activation quantization + cuBLASLt with the tuned table) next to its
// parts in the same process: the quantizer alone, the GEMM alone with the tuned algorithm and with the
// heuristic's (the vendor anchor). Lines "F8ROUTE <scheme> <shape> M route_us quant_us gemm_tuned_us
// gemm_heur_us".
TEST(CudaPrefillBench, DISABLED_Fp8Route) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  const cuda::Stream s = cuda::current_stream();
  const bench::ShapeSet* set = bench::find_shape_set("llama3-8b");
  ASSERT_NE(set, nullptr);
  for (const bench::LayerShape& sh : set->layers) {
    for (const char* scheme_name : {"w8a8-fp8-tensor", "w8a8-fp8-channel"}) {
      const Scheme& scheme = *find_scheme(scheme_name);
      const bool tensor = scheme.weight_key.scale.group.is_per_tensor();
      LinearLayer layer;
      layer.name = sh.name;
      layer.config = make_config(scheme, sh.n, sh.k);
      layer.params["weight"] = random_codes(DType::kF8E4M3, sh.n, sh.k);
      Tensor ws = tensor ? f32_filled(1, 0.01f) : Tensor::empty(DType::kF32, {sh.n, 1});
      if (!tensor) {
        for (int64_t i = 0; i < sh.n; ++i) ws.data<float>()[i] = 0.01f;
      }
      layer.params["weight_scale"] = ws;
      if (scheme.activation_key->scale.is_static) layer.params["input_scale"] = f32_filled(1, 0.02f);
      const Status st = cuda::kSm90Fp8ScaledMM.process_weights_after_loading(layer);
      ASSERT_TRUE(st.is_ok()) << st.message();
      auto w = cuda::to_device(random_codes(DType::kF8E4M3, sh.n, sh.k)).value();
      auto w_scale = cuda::to_device(f32_filled(sh.n, 0.01f)).value();
      for (int64_t m : {16, 1024, 4096}) {
        auto x = cuda::to_device(bench::random_rows(DType::kBF16, m, sh.k, 5, 1.0)).value();
        auto out = cuda::empty(DType::kBF16, {m, sh.n}).value();
        auto codes = cuda::empty(DType::kU8, {m, sh.k}).value();
        auto x_scale = cuda::to_device(f32_filled(m, 0.02f)).value();
        const double route_us = median_us(timer, [&] {
          return cuda::kSm90Fp8ScaledMM.apply(layer, Activation::dense(x), nullptr, out);
        });
        cuda::ActQuantArgs q;
        q.x = x.raw();
        q.m = m;
        q.k = sh.k;
        q.ld_x = sh.k;
        q.mode = tensor ? cuda::ActQuantMode::kStaticTensor : cuda::ActQuantMode::kDynamicToken;
        q.static_scale = 0.02f;
        q.codes = codes.raw();
        q.ld_codes = sh.k;
        q.scale = {x_scale.raw(), tensor ? 0 : 1, 0, false};
        const double quant_us = median_us(timer, [&] { return cuda::launch_act_quant(q, s); });
        cuda::LtGemm g;
        g.w = w.raw();
        g.ld_w = sh.k;
        g.x = codes.raw();
        g.ld_x = sh.k;
        g.m = m;
        g.n = sh.n;
        g.k = sh.k;
        g.scale_mode = tensor ? cuda::LtScaleMode::kScalar : cuda::LtScaleMode::kOuterVec;
        g.w_scale = static_cast<const float*>(w_scale.raw());
        g.x_scale = static_cast<const float*>(x_scale.raw());
        g.out = out.raw();
        const double tuned_us = median_us(timer, [&] { return cuda::lt_gemm(g, s); });
        g.use_table = false;
        const double heur_us = median_us(timer, [&] { return cuda::lt_gemm(g, s); });
        std::printf("F8ROUTE %-17s %-11s %5lld %9.2f %8.2f %9.2f %9.2f\n", scheme_name, sh.name.c_str(),
                    static_cast<long long>(m), route_us, quant_us, tuned_us, heur_us);
        std::fflush(stdout);
      }
    }
  }
}

// The wgmma INT8 GEMM with the fused epilogue against cuBLASLt's INT32 GEMM + launch_int8_epilogue on the
// same codes: outputs must agree bit for bit (exact accumulation, the same FP64 epilogue); times of the
// fused kernel, of the two-pass path and of cuBLASLt's GEMM alone (torch._int_mm's work). Lines
// "WI <tile> <case> M N K fused_us twopass_us gemm_us differing".
TEST(CudaPrefillBench, DISABLED_WgmmaInt8) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  const cuda::Stream s = cuda::current_stream();
  struct Case {
    const char* name;
    int64_t n, k;
    std::vector<int64_t> ms;
    bool asym_bias;
    DType out;
  };
  const std::vector<Case> cases = {{"odd.asym", 200, 320, {1, 7, 257}, true, DType::kBF16},
                                   {"odd.f32", 136, 4096, {33}, true, DType::kF32},
                                   {"8b.qkv", 6144, 4096, {256, 1024, 4096, 8192}, false, DType::kBF16},
                                   {"8b.o", 4096, 4096, {1024, 4096}, false, DType::kBF16},
                                   {"8b.gate_up", 28672, 4096, {1024, 4096}, false, DType::kBF16},
                                   {"8b.down", 4096, 14336, {1024, 4096}, false, DType::kBF16}};
  for (const Case& c : cases) {
    const Tensor w_host = random_codes(DType::kI8, c.n, c.k);
    Tensor colsum = Tensor::empty(DType::kI64, {c.n});
    Tensor ws_host = Tensor::empty(DType::kF32, {c.n});
    Tensor bias_host = Tensor::empty(DType::kBF16, {c.n});
    for (int64_t r = 0; r < c.n; ++r) {
      int64_t sum = 0;
      for (int64_t q = 0; q < c.k; ++q) sum += static_cast<const int8_t*>(w_host.raw())[r * c.k + q];
      colsum.data<int64_t>()[r] = sum;
      ws_host.data<float>()[r] = 0.001f * (1 + r % 5);
      static_cast<uint16_t*>(bias_host.raw())[r] = static_cast<uint16_t>(0x3F80 + (r % 17));  // ~1.0 .. 1.13
    }
    auto w = cuda::to_device(w_host).value();
    auto w_scale = cuda::to_device(ws_host).value();
    auto w_colsum = cuda::to_device(colsum).value();
    auto bias = cuda::to_device(bias_host).value();
    for (int64_t m : c.ms) {
      auto x = cuda::to_device(random_codes(DType::kI8, m, c.k)).value();
      Tensor xs_host = Tensor::empty(DType::kF32, {m});
      Tensor zp_host = Tensor::empty(DType::kI32, {m});
      for (int64_t r = 0; r < m; ++r) {
        xs_host.data<float>()[r] = 0.01f * (1 + r % 3);
        zp_host.data<int32_t>()[r] = static_cast<int32_t>(r % 11) - 5;
      }
      auto x_scale = cuda::to_device(xs_host).value();
      auto x_zp = cuda::to_device(zp_host).value();
      auto acc = cuda::empty(DType::kI32, {m, c.n}).value();
      auto out_ref = cuda::empty(c.out, {m, c.n}).value();
      auto out_wg = cuda::empty(c.out, {m, c.n}).value();
      cuda::LtGemm g;
      g.ab_dtype = DType::kI8;
      g.w = w.raw();
      g.ld_w = c.k;
      g.x = x.raw();
      g.ld_x = c.k;
      g.m = m;
      g.n = c.n;
      g.k = c.k;
      g.out = acc.raw();
      g.out_dtype = DType::kI32;
      cuda::Int8EpilogueArgs e;
      e.acc = static_cast<const int32_t*>(acc.raw());
      e.m = m;
      e.n = c.n;
      e.x_scale = static_cast<const float*>(x_scale.raw());
      e.x_scale_per_row = true;
      e.x_zero_point = c.asym_bias ? static_cast<const int32_t*>(x_zp.raw()) : nullptr;
      e.x_zero_point_per_row = true;
      e.w_scale = static_cast<const float*>(w_scale.raw());
      e.w_colsum = c.asym_bias ? static_cast<const int64_t*>(w_colsum.raw()) : nullptr;
      e.bias = c.asym_bias ? bias.raw() : nullptr;
      e.bias_dtype = DType::kBF16;
      e.out = out_ref.raw();
      e.out_dtype = c.out;
      const auto two_pass = [&] {
        QL_RETURN_IF_ERROR(cuda::lt_gemm(g, s));
        return cuda::launch_int8_epilogue(e, s);
      };
      ASSERT_TRUE(two_pass().is_ok());
      auto ref = cuda::to_host(out_ref).value();
      const double two_us = median_us(timer, two_pass);
      const double gemm_us = median_us(timer, [&] { return cuda::lt_gemm(g, s); });
      cuda::WgmmaInt8Args a;
      a.x = x.raw();
      a.ld_x = c.k;
      a.w = w.raw();
      a.ld_w = c.k;
      a.m = m;
      a.n = c.n;
      a.k = c.k;
      a.x_scale = e.x_scale;
      a.x_scale_per_row = true;
      a.x_zero_point = e.x_zero_point;
      a.x_zero_point_per_row = true;
      a.w_scale = e.w_scale;
      a.w_colsum = e.w_colsum;
      a.bias = e.bias;
      a.bias_dtype = DType::kBF16;
      a.out = out_wg.raw();
      a.out_dtype = c.out;
      for (int variant = 0; variant < 3; ++variant) {
        const int tile = variant == 0 ? 128 : 256;
        a.tile_n = tile;
        a.cluster_m = variant == 2 ? 2 : 1;
        const char* vname = variant == 0 ? "128" : variant == 1 ? "256" : "256c2";
        ASSERT_TRUE(cuda::fill_bytes(out_wg, 0xFF).is_ok());
        const Status st = cuda::launch_wgmma_int8_gemm(a, s);
        if (!st.is_ok()) {
          std::printf("WI %s %s failed: %s\n", vname, c.name, st.message().c_str());
          return;
        }
        auto got = cuda::to_host(out_wg).value();
        int64_t differing = 0;
        const int64_t bytes = got.nbytes() / (m * c.n);
        for (int64_t i = 0; i < m * c.n; ++i) {
          if (std::memcmp(static_cast<const uint8_t*>(got.raw()) + i * bytes,
                          static_cast<const uint8_t*>(ref.raw()) + i * bytes, static_cast<size_t>(bytes)) != 0) {
            ++differing;
          }
        }
        const double fused_us = median_us(timer, [&] { return cuda::launch_wgmma_int8_gemm(a, s); });
        std::printf("WI %-5s %-10s %5lld %6lld %6lld %9.2f %9.2f %9.2f %lld\n", vname, c.name,
                    static_cast<long long>(m), static_cast<long long>(c.n), static_cast<long long>(c.k), fused_us,
                    two_us, gemm_us, static_cast<long long>(differing));
        std::fflush(stdout);
      }
    }
  }
}

// The INT8 route (quantize, IMMA GEMM into INT32, epilogue) end to end. Lines "I8ROUTE <scheme> <shape> M 0
// us".
TEST(CudaPrefillBench, DISABLED_Int8Route) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  auto timer_or = bench::DeviceTimer::create(0);
  ASSERT_TRUE(timer_or) << timer_or.message();
  bench::DeviceTimer& timer = **timer_or;
  const bench::ShapeSet* set = bench::find_shape_set("llama3-8b");
  ASSERT_NE(set, nullptr);
  for (const char* scheme_name : {"w8a8-int8-dynamic", "w8a8-int8-static-asym"}) {
    const Scheme& scheme = *find_scheme(scheme_name);
    for (const bench::LayerShape& sh : set->layers) {
      LinearLayer layer;
      layer.name = sh.name;
      layer.config = make_config(scheme, sh.n, sh.k);
      layer.params["weight"] = random_codes(DType::kI8, sh.n, sh.k);
      Tensor ws = Tensor::empty(DType::kF32, {sh.n, 1});
      for (int64_t i = 0; i < sh.n; ++i) ws.data<float>()[i] = 0.01f;
      layer.params["weight_scale"] = ws;
      if (scheme.activation_key->scale.is_static) {
        layer.params["input_scale"] = f32_filled(1, 0.02f);
        Tensor z = Tensor::empty(DType::kI32, {1});
        z.data<int32_t>()[0] = 3;
        layer.params["input_zero_point"] = z;
      }
      const Status st = cuda::kSm90Int8ScaledMM.process_weights_after_loading(layer);
      ASSERT_TRUE(st.is_ok()) << st.message();
      for (int64_t m : {256, 1024, 4096}) {
        auto x = cuda::to_device(bench::random_rows(DType::kBF16, m, sh.k, 5, 1.0)).value();
        auto out = cuda::empty(DType::kBF16, {m, sh.n}).value();
        {
          const char* mib = "0";
          const double us = median_us(timer, [&] {
            return cuda::kSm90Int8ScaledMM.apply(layer, Activation::dense(x), nullptr, out);
          });
          std::printf("I8ROUTE %-22s %-11s %5lld %5s %9.2f\n", scheme_name, sh.name.c_str(), static_cast<long long>(m),
                      mib, us);
        }
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear

#else
TEST(CudaPrefillBench, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend"; }
#endif
