// Where every output of a layer is one exact product (a weight with one nonzero per row, as the identity
// layers of the real-model check, docs/REAL_MODEL.md), the tensor-core decode kernels give the reference
// backend's output bit for bit: the FP32 sum is exact and the f64 epilogue (mma_epilogue_math.hpp) gives the
// reference's f64 value, or one that rounds alike. Checked for NVFP4 W4A4 (a static and a per-call input
// global scale, neither a power of two) and W4A16, and for the other factors of the epilogue (FP8 per
// channel, MXFP4 with static FP8 activations); weights with power-of-two nonzeros (each q * sf / g exact, as
// an identity weight's: equal always) or random ones (equal but for a chance of ~2^-41 per BF16 output);
// activations over 1e-3 .. 1e4; outputs poisoned with NaN; M across every route; the table's route and every
// forced variant (mma_variants.hpp); BF16, F16 and F32 outputs, a bias. Counted: outputs whose value differs
// from the reference's (0 expected). Skips, with the reason, without an sm_90 device.
//
// That the NVFP4 checks can fail: the same exact sums through an f32 epilogue (the two global scales' factors
// rounded to f32, their product and the scaling each rounded to f32) are computed on the host too; on this
// data they differ from the reference on about 1e-5 .. 1e-4 of the outputs, and the NVFP4 sweeps assert that
// their data meets such outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "qlinear/formats.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/quantize.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_decode_kernels.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/mma_variants.hpp"
#include "qlinear/cuda.hpp"
#endif

namespace qlinear {
namespace {

#if !QLINEAR_WITH_CUDA
TEST(CudaMmaDecodeExact, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend (no nvcc)"; }
#else

using cuda_test::fresh_seed;
using cuda_test::to_dtype;

// Row r's nonzero: +-2^j, j in [-8, 0] (row 0 holds 1, so the weight's amax is 1 and an NVFP4 weight global
// scale is 2688: not a power of two, while every q * sf / g is the exact power of two), or random magnitudes
// N(0, 1) x 2^[-4, 0] (a random global scale; q * sf / g inexact).
enum class Nonzeros { kPowersOfTwo, kRandom };

int64_t nonzero_column(int64_t row, int64_t k) { return (row * 53 + 11) % k; }

Tensor single_nonzero_weight(int64_t n, int64_t k, Nonzeros kind, uint64_t seed) {
  Tensor w = Tensor::zeros(DType::kF32, {n, k});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float sign = rng() % 2 ? 1.0f : -1.0f;
    const float v = kind == Nonzeros::kPowersOfTwo
                        ? sign * std::ldexp(1.0f, r == 0 ? 0 : -static_cast<int>(rng() % 9))
                        : normal(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 5));
    w.data<float>()[r * k + nonzero_column(r, k)] = v == 0.0f ? 1.0f : v;
  }
  return w;
}

// Per 16-element block a magnitude 10^[-3, 4] times N(0, 1) values, within +-6e4 (finite in F16).
Tensor spread_activations(int64_t m, int64_t k, uint64_t seed, DType dtype) {
  Tensor x = random_normal(DType::kF32, {m, k}, seed, 1.0);
  std::mt19937_64 rng(seed + 7);
  std::uniform_real_distribution<double> decade(-3.0, 4.0);
  float* p = x.data<float>();
  for (int64_t b = 0; b < m * k / 16; ++b) {
    const float scale = static_cast<float>(std::pow(10.0, decade(rng)));
    for (int64_t i = 0; i < 16; ++i) p[b * 16 + i] = std::clamp(p[b * 16 + i] * scale, -6e4f, 6e4f);
  }
  return to_dtype(x, dtype);
}

struct Case {
  const char* scheme;  // a registered scheme, or "w4a16-nvfp4"
  const cuda::MmaDecodeLinearKernel* kernel;
  Nonzeros nonzeros = Nonzeros::kPowersOfTwo;
  bool dynamic_global = false;  // NVFP4 W4A4: the input global scale per call (kNvfp4DynamicGlobal)
  DType in = DType::kBF16, out = DType::kBF16;
  std::optional<DType> bias;
  int64_t n = 200, k = 784;  // N off the 16-row tiles, K off the 64 / 128 multiples
};

Scheme scheme_of(const Case& c) {
  if (std::string(c.scheme) == "w4a16-nvfp4") return Scheme{"w4a16-nvfp4", Family::kNvfp4, kNvfp4Static, std::nullopt, ""};
  return *find_scheme(c.scheme);
}

std::string describe(const Case& c, int64_t m, uint64_t seed) {
  return std::string(c.scheme) + (c.dynamic_global ? " (per-call global)" : "") +
         (c.nonzeros == Nonzeros::kPowersOfTwo ? " pow2-nonzeros" : " random-nonzeros") + " M=" + std::to_string(m) +
         " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) + " in=" + std::string(name(c.in)) +
         " out=" + std::string(name(c.out)) + (c.bias ? " bias=" + std::string(name(*c.bias)) : "") +
         " seed=" + std::to_string(seed);
}

struct Layers {
  LinearLayer raw, ref, mine;  // as quantized; processed by the reference; processed by the kernel
};

std::optional<Layers> make_layers(const Case& c, uint64_t seed) {
  MakeLayerOptions opt;
  opt.input_dtype = c.in;
  opt.out_dtype = c.out;
  // A calibrated range of 8e3 .. 1.6e4 (static scales amax / 448, g = 2688 / amax: one more global scale per
  // layer, since an f32 epilogue's error is one per (g_w, g_x) pair).
  opt.input_max = 8000.0f * (1.0f + static_cast<float>(seed % 1000) / 1000.0f) + 0.123f;
  opt.input_min = -opt.input_max;
  opt.dynamic_input_global_scale = c.dynamic_global;
  auto layer = quantize_layer("exact_test", scheme_of(c), single_nonzero_weight(c.n, c.k, c.nonzeros, seed), opt);
  EXPECT_TRUE(layer) << layer.message();
  if (!layer) return std::nullopt;
  Tensor& ws = layer->params["weight_scale"];
  if (layer->config.weight_key.scale.dtype == DType::kE8M0 && ws.dtype() == DType::kU8) {
    ws = Tensor::from_blob(ws.raw(), DType::kE8M0, ws.shape(), ws.owner());
  }
  Layers l{*layer, *layer, *layer};
  EXPECT_TRUE(find_kernel("reference_" + std::string(family_name(l.ref.config.family)))->process_weights_after_loading(l.ref));
  const Verdict v = c.kernel->can_implement(l.mine.config);
  EXPECT_TRUE(v) << v.reason;
  const Status ps = v ? c.kernel->process_weights_after_loading(l.mine) : Status::error(v.reason);
  EXPECT_TRUE(ps.is_ok()) << ps.message();
  if (!ps.is_ok()) return std::nullopt;
  return l;
}

float first_f32(const LinearLayer& l, const char* name) { return l.params.at(name).contiguous().data<float>()[0]; }

// The outputs of an f32 epilogue on the same exact sums (NVFP4 without bias): sum = q_w sf_w 2^-8 times the
// activation value the kernel multiplies (the quantized q sf, or the BF16 input), then
// f32(f32(sum) * f32(f32(2^8 / g_w) * f32(1 / g_x))) rounded to the output dtype. Counts the outputs where
// that differs from the reference's.
int64_t f32_epilogue_differences(const Layers& l, const Tensor& x, const Tensor& ref_out, DType out) {
  const LinearConfig& c = l.raw.config;
  const int64_t m = x.size(0), n = c.n, k = c.k;
  std::vector<double> xv(static_cast<size_t>(m * k));
  float x_factor = 1.0f;
  if (c.activation_key) {
    QuantizeOptions opt;
    if (l.raw.params.count("input_global_scale")) opt.nvfp4_global_scale = first_f32(l.raw, "input_global_scale");
    auto q = quantize(x, *c.activation_key, opt);
    EXPECT_TRUE(q) << q.message();
    if (!q) return 0;
    x_factor = static_cast<float>(1.0 / static_cast<double>(q->scale2.data<float>()[0]));
    const uint8_t* codes = static_cast<const uint8_t*>(q->data.raw());
    const uint8_t* scales = static_cast<const uint8_t*>(q->scale.raw());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        xv[r * k + j] = decode(DType::kF4E2M1, unpack_code(DType::kF4E2M1, codes + r * (k / 2), j)) *
                        decode(DType::kF8E4M3, scales[r * (k / 16) + j / 16]);
      }
    }
  } else {
    for (int64_t i = 0; i < m * k; ++i) xv[i] = element_as_double(x, i);
  }
  const float row_factor = static_cast<float>(256.0 / static_cast<double>(first_f32(l.raw, "weight_global_scale")));
  const float scale = row_factor * x_factor;
  const Tensor w = l.raw.params.at("weight").contiguous();
  const Tensor ws = l.raw.params.at("weight_scale").contiguous();
  int64_t differences = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t col = nonzero_column(j, k);
    const double wq = decode(DType::kF4E2M1, unpack_code(DType::kF4E2M1, static_cast<const uint8_t*>(w.raw()) + j * (k / 2), col)) *
                      decode(DType::kF8E4M3, static_cast<const uint8_t*>(ws.raw())[j * (k / 16) + col / 16]) / 256.0;
    for (int64_t r = 0; r < m; ++r) {
      const float y = static_cast<float>(wq * xv[r * k + col]) * scale;
      const double rounded = out == DType::kF32 ? y : out == DType::kBF16 ? bf16_to_float(float_to_bf16(y)) : f16_to_float(float_to_f16(y));
      differences += rounded != element_as_double(ref_out, r * n + j);
    }
  }
  return differences;
}

struct SweepResult {
  int64_t outputs = 0, differing = 0;          // over every route run
  int64_t reference_outputs = 0, f32_epilogue_differing = 0;  // over the reference's outputs
};

// One case at M = ms: the reference's output once, then the kernel's with the table's route and with every
// forced variant whose M range holds M, each compared value for value.
SweepResult sweep(const Case& c, const std::vector<int64_t>& ms) {
  SweepResult res;
  for (int64_t m : ms) {
    const uint64_t seed = fresh_seed();
    const std::string what = describe(c, m, seed);
    SCOPED_TRACE(what);
    auto l = make_layers(c, seed);
    if (!l) return res;
    const Tensor x = spread_activations(m, c.k, seed + 1, c.in);
    const Tensor bias = c.bias ? to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), *c.bias) : Tensor();
    Tensor want = Tensor::empty(c.out, {m, c.n});
    const LinearKernel& ref = *find_kernel("reference_" + std::string(family_name(l->ref.config.family)));
    const Status rs = ref.apply(l->ref, Activation::dense(x), c.bias ? &bias : nullptr, want);
    EXPECT_TRUE(rs.is_ok()) << rs.message();
    if (!rs.is_ok()) return res;
    res.reference_outputs += m * c.n;
    if (l->raw.config.family == Family::kNvfp4 && !c.bias) {
      res.f32_epilogue_differing += f32_epilogue_differences(*l, x, want, c.out);
    }
    auto xd = cuda::to_device(x).value();
    Tensor bd = c.bias ? cuda::to_device(bias).value() : Tensor();
    auto od = cuda::empty(c.out, {m, c.n}).value();
    std::vector<cuda_test::MmaVariant> variants{{"table", 1, 1 << 20, {}}};
    for (const cuda_test::MmaVariant& v : cuda_test::mma_variants()) {
      if (m >= v.min_m && m <= v.max_m) variants.push_back(v);
    }
    int64_t bad_here = 0;
    for (const cuda_test::MmaVariant& v : variants) {
      cuda_test::ForceScope force(v.force);
      EXPECT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());  // NaN in every float dtype
      const Status as = c.kernel->apply(l->mine, Activation::dense(xd), c.bias ? &bd : nullptr, od);
      EXPECT_TRUE(as.is_ok()) << v.name << ": " << as.message();
      const Tensor got = cuda::to_host(od).value();
      int64_t bad = 0;
      for (int64_t i = 0; i < m * c.n; ++i) {
        const double g = element_as_double(got, i), r = element_as_double(want, i);
        if (g == r) continue;  // NaN (an unwritten output) never equals
        if (bad++ < 3) {
          ADD_FAILURE() << v.name << ": out(" << i / c.n << ", " << i % c.n << ") = " << g << ", reference " << r;
        }
      }
      res.outputs += m * c.n;
      res.differing += bad;
      bad_here += bad;
    }
    std::printf("[ exact ] %-100s %2zu routes, %lld differing\n", what.c_str(), variants.size(),
                static_cast<long long>(bad_here));
  }
  return res;
}

const std::vector<int64_t> kMs = {1, 2, 7, 16, 17, 64, 65, 96, 128, 129, 256, 1024};

void expect_exact(const Case& c, const std::vector<int64_t>& ms = kMs) {
  const SweepResult r = sweep(c, ms);
  EXPECT_EQ(r.differing, 0) << c.scheme << ": " << r.differing << " of " << r.outputs << " outputs differ";
  if (scheme_of(c).family == Family::kNvfp4 && !c.bias) {
    std::printf("[ exact ] %s%s: an f32 epilogue on the same sums differs from the reference on %lld outputs\n",
                c.scheme, c.dynamic_global ? " (per-call global)" : "", static_cast<long long>(r.f32_epilogue_differing));
  }
}

// NVFP4 W4A4, the real-model check's case (power-of-two nonzeros: an identity weight's q * sf / g are exact)
// and random nonzeros, static and per-call input global scales, every route and variant, BF16 and (power-of-two
// nonzeros, where the f64 epilogue's result is the reference's own) F32 outputs. The f32-epilogue count shows
// the data would catch the rounding the f64 epilogue removes: few BF16 outputs per sweep (an f32 epilogue's
// error is one per pair of global scales, and a single product takes few distinct significands), thousands
// of F32 ones; their sum is asserted.
TEST(CudaMmaDecodeExact, Nvfp4W4A4SingleProductsEqualTheReference) {
  QL_REQUIRE_SM90();
  int64_t f32_differing = 0;
  for (bool dynamic : {false, true}) {
    for (auto [nz, out] : {std::pair{Nonzeros::kPowersOfTwo, DType::kBF16}, {Nonzeros::kRandom, DType::kBF16},
                           {Nonzeros::kPowersOfTwo, DType::kF32}}) {
      Case c{"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz, dynamic, DType::kBF16, out};
      const SweepResult r = sweep(c, kMs);
      EXPECT_EQ(r.differing, 0) << r.differing << " of " << r.outputs << " outputs differ";
      f32_differing += r.f32_epilogue_differing;
      std::printf("[ exact ] w4a4-nvfp4%s%s %s: an f32 epilogue on the same sums differs on %lld of %lld outputs\n",
                  dynamic ? " (per-call global)" : "", nz == Nonzeros::kRandom ? " random" : " pow2",
                  std::string(name(out)).c_str(), static_cast<long long>(r.f32_epilogue_differing),
                  static_cast<long long>(r.reference_outputs));
    }
  }
  EXPECT_GT(f32_differing, 0) << "the data meets no output that an f32 epilogue rounds otherwise";
  // The real-model check's shapes (SmolLM2: K = 576 and 1536, N = K through an identity weight) at its M = 128,
  // every token tile full.
  for (bool dynamic : {false, true}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{576, 576}, {1536, 576}, {576, 1536}}) {
      Case c{"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, Nonzeros::kPowersOfTwo, dynamic};
      c.n = n;
      c.k = k;
      const SweepResult r = sweep(c, {128});
      EXPECT_EQ(r.differing, 0) << r.differing << " of " << r.outputs << " outputs differ";
    }
  }
}

// NVFP4 W4A16 (BF16 activations as given). With power-of-two nonzeros every output is a BF16 value times a
// power of two, which no epilogue rounding moves; with random ones an f32 epilogue errs on ~1e-5 of the BF16
// outputs (printed; test_mma_epilogue_math.cpp asserts it on more).
TEST(CudaMmaDecodeExact, Nvfp4W4A16SingleProductsEqualTheReference) {
  QL_REQUIRE_SM90();
  for (Nonzeros nz : {Nonzeros::kPowersOfTwo, Nonzeros::kRandom}) {
    Case c{"w4a16-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz};
    const SweepResult r = sweep(c, kMs);
    EXPECT_EQ(r.differing, 0) << r.differing << " of " << r.outputs << " outputs differ";
    std::printf("[ exact ] w4a16-nvfp4: an f32 epilogue on the same sums differs on %lld outputs\n",
                static_cast<long long>(r.f32_epilogue_differing));
  }
}

// F16 and F32 inputs, F16 / F32 outputs, BF16 / F32 bias (F32 outputs where mma_epilogue_math.hpp's
// argument covers them: power-of-two nonzeros; W4A16).
TEST(CudaMmaDecodeExact, Nvfp4OutputDtypesAndBias) {
  QL_REQUIRE_SM90();
  const std::vector<int64_t> ms = {1, 16, 17, 65, 256};
  for (bool dynamic : {false, true}) {
    for (Nonzeros nz : {Nonzeros::kPowersOfTwo, Nonzeros::kRandom}) {
      expect_exact({"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz, dynamic, DType::kF16, DType::kF16, DType::kBF16}, ms);
      expect_exact({"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz, dynamic, DType::kBF16, DType::kBF16, DType::kF32}, ms);
      expect_exact({"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz, dynamic, DType::kF32, DType::kF16}, ms);
    }
    expect_exact({"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, Nonzeros::kPowersOfTwo, dynamic, DType::kF32, DType::kF32}, ms);
    expect_exact({"w4a4-nvfp4", &cuda::kSm90MmaDecodeNvfp4, Nonzeros::kPowersOfTwo, dynamic, DType::kBF16, DType::kF32, DType::kF32}, ms);
  }
  for (Nonzeros nz : {Nonzeros::kPowersOfTwo, Nonzeros::kRandom}) {
    expect_exact({"w4a16-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz, false, DType::kBF16, DType::kF16, DType::kBF16}, ms);
    expect_exact({"w4a16-nvfp4", &cuda::kSm90MmaDecodeNvfp4, nz, false, DType::kBF16, DType::kF32}, ms);
  }
}

// The other scales of the epilogue: FP8 per-channel row scales (W8A16) and the static FP8 activation scale of
// MXFP4 W4A8: an f32 scale times an exact sum is exact in f64, so these equal the reference with any bias and
// output dtype.
TEST(CudaMmaDecodeExact, Fp8RowScalesAndStaticFp8ActivationsEqualTheReference) {
  QL_REQUIRE_SM90();
  const std::vector<int64_t> ms = {1, 16, 17, 65, 256};
  for (Nonzeros nz : {Nonzeros::kPowersOfTwo, Nonzeros::kRandom}) {
    expect_exact({"w8a16-fp8", &cuda::kSm90MmaDecodeFp8WeightOnly, nz, false, DType::kBF16, DType::kBF16, {}, 200, 800});
    expect_exact({"w8a16-fp8", &cuda::kSm90MmaDecodeFp8WeightOnly, nz, false, DType::kBF16, DType::kF32, DType::kF32, 200, 800}, ms);
    expect_exact({"w8a16-fp8", &cuda::kSm90MmaDecodeFp8WeightOnly, nz, false, DType::kBF16, DType::kF16, DType::kBF16, 200, 800}, ms);
    expect_exact({"w4a8-mxfp4-fp8", &cuda::kSm90MmaDecodeMxfp4, nz, false, DType::kBF16, DType::kBF16, {}, 200, 800});
    expect_exact({"w4a8-mxfp4-fp8", &cuda::kSm90MmaDecodeMxfp4, nz, false, DType::kF16, DType::kF32, DType::kBF16, 200, 800}, ms);
  }
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
