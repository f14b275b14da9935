// Quantized activations on the tensor-core decode kernels (W4A4 / W6A6 / W4A6 / W4A8 MX, W8A8 MXFP8, W4A4
// NVFP4 with a static or per-call global scale): the fused activation pass (act_quant_bf16.hpp) bit for bit
// against the reference quantizer, then whole layers against the reference backend on the same inputs
// (fresh random data, seed printed; activations spanning 2^-30 .. 1e3 with all-zero and tiny blocks; outputs
// poisoned with NaN; M across the tile buckets, the 64-token tiles and the widened route; N and K off the
// tile multiples; F16/F32 inputs, bias and output dtypes) and a CUDA-graph capture and replay of each.
// Bound per element: the tensor-core bound of test_mma_decode.cpp (2^-10 of sum |x w| over the reference's
// dequantized operands) plus one output ULP. Skips, with the reason, without an sm_90 device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "qlinear/formats.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/act_quant_bf16.hpp"
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_decode_kernels.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/graph_replay.hpp"
#include "cuda/mma_reference_check.hpp"
#include "cuda/mma_variants.hpp"
#include "qlinear/cuda.hpp"
#endif

namespace qlinear {
namespace {

#if !QLINEAR_WITH_CUDA
TEST(CudaMmaDecodeAct, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend (no nvcc)"; }
#else

using cuda_test::fresh_seed;
using cuda_test::to_dtype;

using cuda_test::kTensorCoreBound;

// Activations over a wide range: per 16-block a magnitude 2^-12 .. 2^8 (every 13th block 2^-30, every 19th
// 2^-135: f32 subnormals, BF16 subnormals or zero; every 17th all zero), and now and then an element near
// +-1e3.
Tensor wide_activations(int64_t m, int64_t k, uint64_t seed, DType dtype) {
  Tensor x = random_normal(DType::kF32, {m, k}, seed, 1.0);
  std::mt19937_64 rng(seed + 7);
  float* p = x.data<float>();
  for (int64_t b = 0; b < m * k / 16; ++b) {
    const int e = b % 19 == 7 ? -135 : b % 13 == 5 ? -30 : static_cast<int>(rng() % 21) - 12;
    for (int64_t i = 0; i < 16; ++i) {
      float& v = p[b * 16 + i];
      v = b % 17 == 3 ? 0.0f : std::ldexp(v, e);
      if (rng() % 97 == 0) v = (rng() % 2 ? 1.0f : -1.0f) * (900.0f + static_cast<float>(rng() % 100));
    }
  }
  return to_dtype(x, dtype);
}

Scheme nvfp4_dynamic_global() {
  return Scheme{"w4a4-nvfp4 (per-call global)", Family::kNvfp4, kNvfp4Static, kNvfp4DynamicGlobal, ""};
}

struct Case {
  Scheme scheme;
  int64_t m, n, k;
  DType in = DType::kBF16;
  DType out = DType::kBF16;
  std::optional<DType> bias;
  bool wide_weights = false;  // weight magnitudes 2^-110 .. 2^90: E8M0 scales outside the fold range
  bool narrow_activations = false;  // plain normal activations (every 128 block fits the FP8 block route)
  std::optional<bool> fp8_route;    // whether apply must take the FP8 block route (mx_fp8_block.hpp)
};

const cuda::MmaDecodeLinearKernel& kernel_for(Family f) {
  switch (f) {
    case Family::kMxfp8: return cuda::kSm90MmaDecodeMxfp8;
    case Family::kMxfp6: return cuda::kSm90MmaDecodeMxfp6;
    case Family::kMxfp4: return cuda::kSm90MmaDecodeMxfp4;
    default: return cuda::kSm90MmaDecodeNvfp4;
  }
}

const LinearKernel& reference_for(Family f) { return *find_kernel("reference_" + std::string(family_name(f))); }

std::string describe(const Case& c, uint64_t seed) {
  return std::string(c.scheme.name) + " M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) +
         " K=" + std::to_string(c.k) + " in=" + std::string(name(c.in)) + " out=" + std::string(name(c.out)) +
         (c.bias ? " bias=" + std::string(name(*c.bias)) : "") + (c.wide_weights ? " wide-weights" : "") +
         (c.narrow_activations ? " narrow-x" : "") +
         " seed=" + std::to_string(seed);
}

struct Prepared {
  LinearLayer raw, ref, mine;  // as quantized; processed by the reference; processed by the kernel
};

std::optional<Prepared> prepare(const Case& c, uint64_t seed) {
  MakeLayerOptions opt;
  opt.out_dtype = c.out;
  opt.input_dtype = c.in;
  opt.dynamic_input_global_scale = c.scheme.activation_key == kNvfp4DynamicGlobal;
  Tensor w = random_normal(DType::kF32, {c.n, c.k}, seed, 0.05);
  if (c.wide_weights) {
    for (int64_t r = 0; r < c.n; ++r) {
      for (int64_t j = 0; j < c.k; ++j) w.data<float>()[r * c.k + j] *= std::ldexp(1.0f, static_cast<int>((r * 37 + (j / 32) * 53) % 201) - 110);
    }
  }
  const Scheme s = opt.dynamic_input_global_scale ? *find_scheme("w4a4-nvfp4") : c.scheme;
  auto layer = quantize_layer("mma_act_test", s, w, opt);
  EXPECT_TRUE(layer) << layer.message();
  if (!layer) return std::nullopt;
  EXPECT_TRUE(layer->config.activation_key == c.scheme.activation_key);
  cuda_test::relabel_mx_weight_scales(c.scheme, *layer);
  Prepared p{*layer, *layer, *layer};
  EXPECT_TRUE(reference_for(c.scheme.family).process_weights_after_loading(p.ref));
  const cuda::MmaDecodeLinearKernel& k = kernel_for(c.scheme.family);
  const Verdict v = k.can_implement(p.mine.config);
  EXPECT_TRUE(v) << v.reason;
  const Status ps = k.process_weights_after_loading(p.mine);
  EXPECT_TRUE(ps.is_ok()) << ps.message();
  if (!v || !ps.is_ok()) return std::nullopt;
  if (c.scheme.family != Family::kNvfp4) {
    EXPECT_EQ(cuda::mma_decode_folds_scales(p.mine), !c.wide_weights);
  }
  return p;
}

// Failures of `got` (host copy of the kernel's output) against the reference's output for x.
int64_t compare(const Case& c, const Prepared& p, const Tensor& x, const Tensor* bias, const Tensor& got,
                double* worst_out) {
  return cuda_test::compare_with_reference(c.scheme.family, p.ref, c.out, c.m, c.n, c.k, x, bias, got, worst_out);
}

// Where the case names it: whether the layer takes the FP8 block route at c.m.
void expect_route(const Case& c, const Prepared& p) {
  const std::string route = cuda::mma_decode_route_for(p.mine, c.m);
  if (c.fp8_route) {
    EXPECT_EQ(route.rfind("activations quantized per 32 and re-scaled per 128 block", 0) == 0, *c.fp8_route) << route;
  }
}

void check(const Case& c) {
  const uint64_t seed = fresh_seed();
  const std::string what = describe(c, seed);
  SCOPED_TRACE(what);
  auto p = prepare(c, seed);
  if (!p) return;
  expect_route(c, *p);
  const Tensor x = c.narrow_activations ? to_dtype(random_normal(DType::kF32, {c.m, c.k}, seed + 1, 1.0), c.in)
                                        : wide_activations(c.m, c.k, seed + 1, c.in);
  const Tensor bias = c.bias ? to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), *c.bias) : Tensor();
  auto xd = cuda::to_device(x).value();
  Tensor bd = c.bias ? cuda::to_device(bias).value() : Tensor();
  auto od = cuda::empty(c.out, {c.m, c.n}).value();
  ASSERT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());  // NaN in every float dtype
  const Status as = kernel_for(c.scheme.family).apply(p->mine, Activation::dense(xd), c.bias ? &bd : nullptr, od);
  ASSERT_TRUE(as.is_ok()) << as.message();
  auto got = cuda::to_host(od);
  ASSERT_TRUE(got) << got.message();
  double worst = 0;
  EXPECT_EQ(compare(c, *p, x, c.bias ? &bias : nullptr, *got, &worst), 0);
  std::printf("[ check ] %-90s worst %.2e (bound %.2e)\n", what.c_str(), worst, kTensorCoreBound);
}

std::vector<Scheme> all_act_schemes() {
  std::vector<Scheme> s;
  for (const char* name : {"w4a4-mxfp4", "w6a6-mxfp6-e2m3", "w6a6-mxfp6-e3m2", "w4a6-mxfp4-mxfp6-e2m3",
                           "w4a8-mxfp4-fp8", "w8a8-mxfp8", "w4a4-nvfp4"}) {
    s.push_back(*find_scheme(name));
  }
  s.push_back(nvfp4_dynamic_global());
  return s;
}

// K off the multiples of 64 and 128 where the block allows (MX: 32, NVFP4: 16).
int64_t odd_k(const Scheme& s) { return s.family == Family::kNvfp4 ? 784 : 800; }

TEST(CudaMmaDecodeAct, MatchesTheReferenceOverM) {
  QL_REQUIRE_SM90();
  for (const Scheme& s : all_act_schemes()) {
    for (int64_t m : {1, 2, 7, 16, 17, 63, 64, 65, 255, 256, 1024}) {
      check({s, m, 256, 1024});
      check({s, m, 200, odd_k(s)});
    }
  }
}

// The first M of the widening route (weights widened to BF16 per call + cuBLASLt), N off the 16-row tiles and
// the row blocks: small enough for compute-sanitizer.
TEST(CudaMmaDecodeAct, WideningRouteAtItsFirstM) {
  QL_REQUIRE_SM90();
  cuda::MmaDecodeForce f;
  f.wgmma = -1;  // the widening route, not the wgmma kernel
  cuda_test::ForceScope force(f);
  for (const Scheme& s : all_act_schemes()) check({s, cuda::kMmaWidenAboveM + 1, 200, odd_k(s), DType::kBF16, DType::kBF16, DType::kBF16});
}

TEST(CudaMmaDecodeAct, SplitKInputDtypesBiasAndOutputDtypes) {
  QL_REQUIRE_SM90();
  for (const Scheme& s : all_act_schemes()) {
    for (int64_t m : {1, 5, 40, 300}) {
      check({s, m, 128, 8192});  // few N blocks, long K: split-K with the fixed-order reduction
      check({s, m, 96, odd_k(s), DType::kF16, DType::kF32, DType::kBF16});
      check({s, m, 96, odd_k(s), DType::kF32, DType::kF16, DType::kF32});
      check({s, m, 72, 512, DType::kBF16, DType::kBF16, DType::kF16});
    }
  }
}

// The swap-AB wgmma kernel forced (every code): the activation factor (static FP8 scale, NVFP4 1/g) and the
// quantized values through its epilogue, split K and dtypes.
TEST(CudaMmaDecodeAct, WgmmaKernelMatchesTheReference) {
  QL_REQUIRE_SM90();
  cuda::MmaDecodeForce f;
  f.wgmma = 1;
  cuda_test::ForceScope force(f);
  for (const Scheme& s : all_act_schemes()) {
    for (int64_t m : {17, 64, 65, 256, 300}) check({s, m, 200, odd_k(s)});
    check({s, 40, 128, 8192});
    check({s, 130, 96, odd_k(s), DType::kF16, DType::kF32, DType::kBF16});
  }
}

// export_processed -> import_processed (the weight cache's path): the imported layer takes the same route at
// c.m and gives the same output bits on each of xs.
void expect_weight_cache_round_trip(const Case& c, const Prepared& p, const std::vector<Tensor>& xs) {
  const LinearKernel& k = kernel_for(c.scheme.family);
  auto exported = k.export_processed(p.mine);
  ASSERT_TRUE(exported) << exported.message();
  LinearLayer imported = p.raw;  // unprocessed, the same checkpoint tensors
  const Status is = k.import_processed(imported, *exported);
  ASSERT_TRUE(is.is_ok()) << is.message();
  EXPECT_EQ(cuda::mma_decode_route_for(imported, c.m), cuda::mma_decode_route_for(p.mine, c.m));
  for (const Tensor& x : xs) {
    auto xd = cuda::to_device(x).value();
    auto a = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    auto b = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    ASSERT_TRUE(k.apply(p.mine, Activation::dense(xd), nullptr, a).is_ok());
    ASSERT_TRUE(k.apply(imported, Activation::dense(xd), nullptr, b).is_ok());
    auto ha = cuda::to_host(a).value();
    auto hb = cuda::to_host(b).value();
    EXPECT_EQ(std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())), 0);
  }
}

// One call captured in a CUDA graph on `stream` (the current stream), then replayed three times with fresh
// activations into a poisoned output: each replay equals a direct call bit for bit and the reference.
void check_graph_replay(const Case& c, cudaStream_t stream) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(c, seed));
  auto p = prepare(c, seed);
  ASSERT_TRUE(p);
  expect_route(c, *p);
  const LinearKernel& k = kernel_for(c.scheme.family);
  const int64_t m = c.m;
  const Tensor bias = to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), DType::kBF16);
  auto bd = cuda::to_device(bias).value();
  auto xd = cuda::empty(DType::kBF16, {m, c.k}).value();
  auto od = cuda::empty(DType::kBF16, {m, c.n}).value();
  auto direct = cuda::empty(DType::kBF16, {m, c.n}).value();
  auto upload_x = [&](uint64_t sd) {
    const Tensor x = wide_activations(m, c.k, sd, DType::kBF16);
    EXPECT_EQ(cudaMemcpyAsync(xd.raw(), x.raw(), static_cast<size_t>(x.nbytes()), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    return x;
  };
  upload_x(seed + 10);
  Tensor x;
  cuda_test::replay_captured_call(
      stream, 3, [&] { return k.apply(p->mine, Activation::dense(xd), &bd, od); },
      [&](int replay) {
        x = upload_x(seed + 20 + replay);
        ASSERT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());
      },
      [&](int replay) {
        ASSERT_TRUE(k.apply(p->mine, Activation::dense(xd), &bd, direct).is_ok());
        auto got = cuda::to_host(od).value();
        auto want = cuda::to_host(direct).value();
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(got.nbytes())), 0) << "replay " << replay;
        EXPECT_EQ(compare(c, *p, x, &bias, got, nullptr), 0) << "replay " << replay;
      });
}

// The FP8 block route (mx_fp8_block.hpp) forced at every M on the schemes it takes: activations whose 128
// blocks all fit E4M3 (the GEMM alone) and the wide ones (most rows recomputed by the repair kernel); input,
// bias and output dtypes (a bias cuBLASLt's FP8 epilogue does not take goes through ours); N off the 128-row
// blocks. Weights beyond the window keep the other routes, and say why.
TEST(CudaMmaDecodeAct, Fp8BlockRouteMatchesTheReference) {
  QL_REQUIRE_SM90();
  cuda::MmaDecodeForce f;
  f.mx_fp8_block = 1;
  cuda_test::ForceScope force(f);
  for (const char* scheme : {"w4a4-mxfp4", "w6a6-mxfp6-e2m3", "w6a6-mxfp6-e3m2", "w4a6-mxfp4-mxfp6-e2m3"}) {
    const Scheme s = *find_scheme(scheme);
    for (int64_t m : {1, 2, 3, 7, 17, 130, 257, 1024}) {
      for (bool narrow : {true, false}) {
        Case c{s, m, 200, 384};
        c.narrow_activations = narrow;
        c.fp8_route = true;
        check(c);
      }
    }
    for (Case c : {Case{s, 33, 256, 1024, DType::kF16, DType::kF32, DType::kBF16},
                   Case{s, 64, 136, 512, DType::kF32, DType::kF16, DType::kF32},
                   Case{s, 48, 128, 256, DType::kBF16, DType::kBF16, DType::kF16}}) {
      c.narrow_activations = true;
      c.fp8_route = true;
      check(c);
    }
    Case wide{s, 40, 144, 1024, DType::kBF16, DType::kBF16, DType::kF32, true};
    wide.fp8_route = false;
    check(wide);
    Case odd_k{s, 40, 144, 800};  // K off 128
    odd_k.fp8_route = false;
    check(odd_k);
  }
}

// By default the route starts above kMmaWidenAboveM; export -> import keeps its plan (bit-identical output).
TEST(CudaMmaDecodeAct, Fp8BlockRouteByDefaultAndThroughTheWeightCache) {
  QL_REQUIRE_SM90();
  const Scheme s = *find_scheme("w4a4-mxfp4");
  Case below{s, cuda::kMmaWidenAboveM, 256, 512};
  below.fp8_route = false;
  check(below);
  Case above{s, cuda::kMmaWidenAboveM + 1, 256, 512};
  above.fp8_route = true;
  above.narrow_activations = true;
  check(above);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(above, seed));
  auto p = prepare(above, seed);
  ASSERT_TRUE(p);
  expect_weight_cache_round_trip(above, *p,
                                 {random_normal(DType::kBF16, {above.m, above.k}, seed + 1, 1.0),
                                  wide_activations(above.m, above.k, seed + 1, DType::kBF16)});
}

// MX weights whose scales leave the fold range: the promoted kernel (block scales on FP32 partial sums) with
// the activation factor in the same epilogue.
TEST(CudaMmaDecodeAct, PromotedWeightScalesTakeTheActivationFactorToo) {
  QL_REQUIRE_SM90();
  for (const Scheme& s : all_act_schemes()) {
    if (s.family == Family::kNvfp4) continue;  // E4M3 block scales always fold
    for (int64_t m : {1, 64, 300}) check({s, m, 144, 1056, DType::kBF16, DType::kBF16, DType::kF32, true});
  }
}

// The pass alone: every BF16 value equals the reference quantizer's dequantized value (code x block scale;
// NVFP4 without 1/g) bit for bit, and the factor is what the reference's remaining scale gives.
TEST(CudaMmaDecodeAct, FusedPassMatchesTheReferenceQuantizerBitForBit) {
  QL_REQUIRE_SM90();
  struct Mode {
    const char* what;
    QuantKey key;
    cuda::ActBf16Args args;
  };
  cuda::ActBf16Args mx;
  mx.mode = cuda::ActBf16Mode::kMx32;
  std::vector<Mode> modes;
  for (auto [elem, key] : {std::pair{cuda::ActElem::kE4M3, kMxfp8Dynamic}, {cuda::ActElem::kE2M3, kMxfp6E2M3Dynamic},
                           {cuda::ActElem::kE3M2, kMxfp6E3M2Dynamic}, {cuda::ActElem::kE2M1, kMxfp4Dynamic}}) {
    for (auto rule : {cuda::ActMxRule::kCeilOverMax, cuda::ActMxRule::kQuarkEven}) {
      cuda::ActBf16Args a = mx;
      a.elem = elem;
      a.rule = rule;
      modes.push_back({rule == cuda::ActMxRule::kQuarkEven ? "mx even" : "mx ceil", key, a});
    }
  }
  cuda::ActBf16Args fp8;
  fp8.mode = cuda::ActBf16Mode::kFp8Static;
  fp8.static_scale = 0.0371f;
  modes.push_back({"fp8 static", kFp8StaticTensorSym, fp8});
  cuda::ActBf16Args nv;
  nv.mode = cuda::ActBf16Mode::kNvfp4;
  nv.global_scale = 2688.0f / 700.0f;
  modes.push_back({"nvfp4 static g", kNvfp4Dynamic, nv});
  nv.dynamic_global = true;
  modes.push_back({"nvfp4 per-call g", kNvfp4DynamicGlobal, nv});
  for (const Mode& md : modes) {
    for (DType in : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (int64_t m : {1, 3, 64, 257}) {
        const int64_t k = 1056;
        const uint64_t seed = fresh_seed();
        const std::string what = std::string(md.what) + " " + std::string(name(md.key.dtype)) + " in=" + std::string(name(in)) +
                                 " M=" + std::to_string(m) + " seed=" + std::to_string(seed);
        SCOPED_TRACE(what);
        const Tensor x = wide_activations(m, k, seed, in);
        QuantizeOptions opt;
        if (md.args.mode == cuda::ActBf16Mode::kMx32) {
          opt.mx_rule = md.args.rule == cuda::ActMxRule::kQuarkEven ? MxScaleRule::kQuarkEven : MxScaleRule::kCeilOverMax;
        }
        if (md.args.mode == cuda::ActBf16Mode::kFp8Static) {
          opt.static_scale = Tensor::scalar_f32(md.args.static_scale).reshape({1}).value();
        }
        if (md.args.mode == cuda::ActBf16Mode::kNvfp4 && !md.args.dynamic_global) {
          opt.nvfp4_global_scale = md.args.global_scale;
        }
        auto q = quantize(x, md.key, opt);
        ASSERT_TRUE(q) << q.message();
        auto xd = cuda::to_device(x).value();
        auto out = cuda::empty(DType::kBF16, {m, k}).value();
        auto factor = cuda::empty(DType::kF64, {2}).value();
        auto amax = cuda::empty(DType::kU8, {4}).value();
        ASSERT_TRUE(cuda::fill_bytes(out, 0xFF).is_ok());
        ASSERT_TRUE(cuda::fill_bytes(factor, 0xFF).is_ok());
        cuda::ActBf16Args a = md.args;
        a.x = xd.raw();
        a.x_dtype = in;
        a.m = m;
        a.k = k;
        a.ld_x = k;
        a.out = out.raw();
        a.ld_out = k;
        a.factor = static_cast<cuda::MmaFactor*>(factor.raw());
        a.amax_scratch = static_cast<uint32_t*>(amax.raw());
        ASSERT_TRUE(cuda::launch_act_quant_bf16(a, cuda::current_stream()).is_ok());
        const Tensor got = cuda::to_host(out).value();
        const Tensor fh = cuda::to_host(factor).value();
        const cuda::MmaFactor f{fh.data<double>()[0], fh.data<double>()[1]};
        const DType elem = md.key.dtype;
        const int64_t block = md.args.mode == cuda::ActBf16Mode::kNvfp4 ? 16 : 32;
        int64_t bad = 0;
        for (int64_t r = 0; r < m; ++r) {
          const uint8_t* row = static_cast<const uint8_t*>(q->data.raw()) + r * storage_bytes(elem, k);
          for (int64_t c = 0; c < k; ++c) {
            double want = decode(elem, is_packed(elem) ? unpack_code(elem, row, c) : row[c]);
            if (md.args.mode == cuda::ActBf16Mode::kMx32) {
              const int e = static_cast<int>(q->scale.data<uint8_t>()[r * (k / 32) + c / 32]) - 127;
              if (elem == DType::kF8E4M3 && e < -124) continue;  // below the stated exact range
              want = std::ldexp(want, e);
            } else if (md.args.mode == cuda::ActBf16Mode::kNvfp4) {
              want *= decode(DType::kF8E4M3, static_cast<const uint8_t*>(q->scale.raw())[r * (k / block) + c / block]);
            }
            const double v = bf16_to_float(got.data<uint16_t>()[r * k + c]);
            if (v != want && bad++ < 5) ADD_FAILURE() << "(" << r << ", " << c << "): " << v << ", reference " << want;
          }
        }
        EXPECT_EQ(bad, 0);
        if (md.args.mode == cuda::ActBf16Mode::kFp8Static) {
          EXPECT_EQ(f.scale, static_cast<double>(md.args.static_scale));  // a multiplier
          EXPECT_EQ(f.divisor, 0.0);
        }
        if (md.args.mode == cuda::ActBf16Mode::kNvfp4) {
          const double g = q->scale2.data<float>()[0];
          EXPECT_EQ(f.scale, 1.0 / g);  // the reciprocal of the exact divisor g, one f64 rounding
          EXPECT_EQ(f.divisor, g);
        }
      }
    }
  }
}

// Captured once into a CUDA graph (after a warm-up call outside capture) and replayed on new inputs written
// into the same buffers: the replay's output equals a direct call's bit for bit, and the reference.
TEST(CudaMmaDecodeAct, CapturesAndReplaysInACudaGraph) {
  QL_REQUIRE_SM90();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(stream);
  for (const Scheme& s : all_act_schemes()) {
    for (int64_t m : {1, 16, 64, 256}) {  // 256: the widening route
      check_graph_replay({s, m, 128, 2048, DType::kBF16, DType::kBF16, DType::kBF16}, stream);
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

// export_processed -> import_processed keeps the static activation scales (W4A8 FP8, NVFP4 static global).
TEST(CudaMmaDecodeAct, ProcessedWeightsRoundTrip) {
  QL_REQUIRE_SM90();
  for (const Scheme& s : all_act_schemes()) {
    const Case c{s, 7, 200, odd_k(s)};
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    auto p = prepare(c, seed);
    ASSERT_TRUE(p);
    expect_weight_cache_round_trip(c, *p, {wide_activations(c.m, c.k, seed + 1, DType::kBF16)});
  }
}

// Device time of the fused pass alone per mode (CUDA events around 50 back-to-back launches, after a
// warm-up; activations L2-resident as in a decode step): what quantized activations add to a layer.
TEST(CudaMmaDecodeAct, DISABLED_FusedPassTime) {
  QL_REQUIRE_SM90();
  struct Mode {
    const char* what;
    cuda::ActBf16Mode mode;
    cuda::ActElem elem;
    bool dynamic_global;
  };
  const Mode modes[] = {{"mxfp4", cuda::ActBf16Mode::kMx32, cuda::ActElem::kE2M1, false},
                        {"mxfp8", cuda::ActBf16Mode::kMx32, cuda::ActElem::kE4M3, false},
                        {"fp8", cuda::ActBf16Mode::kFp8Static, cuda::ActElem::kE4M3, false},
                        {"nvfp4", cuda::ActBf16Mode::kNvfp4, cuda::ActElem::kE2M1, false},
                        {"nvfp4-dyn", cuda::ActBf16Mode::kNvfp4, cuda::ActElem::kE2M1, true}};
  cudaStream_t stream = cuda::current_stream();
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  for (int64_t k : {8192, 28672}) {
    for (int64_t m : {1, 16, 1024}) {
      auto xd = cuda::to_device(wide_activations(m, k, fresh_seed(), DType::kBF16)).value();
      auto out = cuda::empty(DType::kBF16, {m, k}).value();
      auto scratch = cuda::empty(DType::kF64, {3}).value();  // the factor, then the |x| max
      for (const Mode& md : modes) {
        cuda::ActBf16Args a;
        a.x = xd.raw();
        a.m = m;
        a.k = k;
        a.ld_x = k;
        a.mode = md.mode;
        a.elem = md.elem;
        a.rule = cuda::ActMxRule::kQuarkEven;
        a.dynamic_global = md.dynamic_global;
        a.out = out.raw();
        a.ld_out = k;
        a.factor = static_cast<cuda::MmaFactor*>(scratch.raw());
        a.amax_scratch = reinterpret_cast<uint32_t*>(a.factor + 1);
        ASSERT_TRUE(cuda::launch_act_quant_bf16(a, stream).is_ok());
        constexpr int kReps = 50;
        cudaEventRecord(e0, stream);
        for (int i = 0; i < kReps; ++i) ASSERT_TRUE(cuda::launch_act_quant_bf16(a, stream).is_ok());
        cudaEventRecord(e1, stream);
        ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        std::printf("[ pass ] %-17s K=%-6lld M=%-5lld %8.2f us\n", md.what, static_cast<long long>(k),
                    static_cast<long long>(m), 1e3 * ms / kReps);
      }
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
