// The fused activation pass's arithmetic on the CPU (no GPU needed): act_quant_bf16_math.hpp is the code the
// CUDA kernel runs, compiled here for the host and checked bit for bit against the reference quantizers
// (quantize() of src/quant) on data built to hit the hard cases -- blocks from 2^-140 to 2^100, f32
// subnormals, all-zero blocks, values exactly on rounding midpoints and on the scale rules' binade edges --
// for every MX element with both scale rules, NVFP4 with static and per-call global scales, and static FP8.
// Also: the BF16 exactness predicate against brute force over every code and exponent, and that selection
// on a (synthetic) sm_90 GPU picks the tensor-core decode kernels for the quantized-activation schemes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/act_quant_bf16_math.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/quantize.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {
namespace {

using cuda::ActElem;
using cuda::ActMxRule;
constexpr auto dtype_of = cuda_test::act_elem_dtype;
constexpr auto dynamic_mx_key = cuda_test::act_elem_mx_key;

// A code of a quantized row: one byte (E4M3) or unpacked from the FP6/FP4 packing.
uint32_t code_at(const QuantizedTensor& q, DType elem, int64_t r, int64_t c) {
  const uint8_t* data = static_cast<const uint8_t*>(q.data.raw());
  if (!is_packed(elem)) return data[r * q.cols + c];
  return unpack_code(elem, data + r * storage_bytes(elem, q.cols), c);
}

// Rows of `cols` f32 values whose blocks of `block` elements span a wide range of magnitudes: random
// normals, multiples of a quarter of the element grid step (many exact rounding midpoints), the block's
// largest value on a binade edge, f32 subnormals, zero blocks.
Tensor hard_activations(int64_t rows, int64_t cols, int64_t block, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp_dist(-140, 100), kind_dist(0, 5), small(-40, 40);
  Tensor x = Tensor::empty(DType::kF32, {rows, cols});
  float* p = x.data<float>();
  for (int64_t b = 0; b < rows * cols / block; ++b) {
    const int e = exp_dist(rng);
    const int kind = kind_dist(rng);
    for (int64_t i = 0; i < block; ++i) {
      float v = 0.0f;
      switch (kind) {
        case 0: v = std::ldexp(normal(rng), e); break;
        case 1: v = std::ldexp(static_cast<float>(small(rng)), e - 4); break;  // on quarter steps: ties
        case 2: v = i == 0 ? std::ldexp(1.0f, e) * (rng() % 2 ? 1.75f : 1.9375f) : std::ldexp(normal(rng), e - 3); break;
        case 3: v = std::ldexp(normal(rng), -140); break;  // f32 subnormals
        case 4: v = 0.0f; break;
        default: v = std::ldexp(normal(rng), rng() % 2 ? 0 : 10); break;  // ordinary activations up to ~1e3
      }
      p[b * block + i] = v;
    }
  }
  return x;
}

TEST(ActQuantBf16Math, MxMatchesTheReferenceQuantizerBitForBit) {
  const int64_t rows = 16, cols = 32 * 96;
  for (ActElem elem : {ActElem::kE4M3, ActElem::kE2M3, ActElem::kE3M2, ActElem::kE2M1}) {
    for (ActMxRule rule : {ActMxRule::kCeilOverMax, ActMxRule::kQuarkEven}) {
      const uint64_t seed = std::random_device{}();
      SCOPED_TRACE("elem " + std::string(name(dtype_of(elem))) + " rule " + std::to_string(static_cast<int>(rule)) +
                   " seed " + std::to_string(seed));
      const Tensor x = hard_activations(rows, cols, 32, seed);
      QuantizeOptions opt;
      opt.mx_rule = rule == ActMxRule::kQuarkEven ? MxScaleRule::kQuarkEven : MxScaleRule::kCeilOverMax;
      auto q = quantize(x, dynamic_mx_key(elem), opt);
      ASSERT_TRUE(q) << q.message();
      const cuda::ActGrid grid = cuda::act_grid(elem);
      const float* xp = x.data<float>();
      int64_t bad = 0, inexact_blocks = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < cols / 32; ++b) {
          float amax = 0.0f;
          for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xp[r * cols + b * 32 + i]));
          const int e = cuda::act_mx_exponent(amax, elem, rule);
          const int e_ref = static_cast<int>(q->scale.data<uint8_t>()[r * (cols / 32) + b]) - 127;
          if (e != e_ref && bad++ < 5) ADD_FAILURE() << "block (" << r << ", " << b << ") amax " << amax << ": e " << e << ", reference " << e_ref;
          const bool exact = cuda::act_mx_bf16_exact(elem, e);
          inexact_blocks += exact ? 0 : 1;
          for (int64_t i = 0; i < 32; ++i) {
            const int64_t c = b * 32 + i;
            const double got = cuda::act_mx_value(xp[r * cols + c], e, grid);
            const double want = decode(dtype_of(elem), code_at(*q, dtype_of(elem), r, c)) * std::ldexp(1.0, e_ref);
            if (got != want && bad++ < 5) {
              ADD_FAILURE() << "x[" << r << ", " << c << "] = " << xp[r * cols + c] << ": value " << got << ", reference " << want;
            }
            if (exact && bf16_to_float(float_to_bf16(static_cast<float>(got))) != got && bad++ < 5) {
              ADD_FAILURE() << "value " << got << " (e " << e << ") is not exact in BF16";
            }
          }
        }
      }
      EXPECT_EQ(bad, 0);
      // The E4M3 data reach blocks below the exact range (2^-140 magnitudes); the others never leave it.
      if (elem != ActElem::kE4M3) {
        EXPECT_EQ(inexact_blocks, 0);
      }
    }
  }
}

// act_mx_bf16_exact against every code value times every E8M0 scale.
// The add-and-subtract rounding the passes use equals the reference-shaped act_round_f32 on every grid: every
// finite BF16 input scaled by 2^-12 .. 2^12 (grid midpoints and binade edges among them), and 4M random f32s
// (subnormals, near max, beyond it).
TEST(ActQuantBf16Math, AddRoundingEqualsTheReferenceRounding) {
  std::mt19937_64 rng(20261206);
  int64_t checked = 0, bad = 0;
  for (ActElem e : {ActElem::kE4M3, ActElem::kE2M3, ActElem::kE3M2, ActElem::kE2M1}) {
    const cuda::ActGrid g = cuda::act_grid(e);
    auto check = [&](float t) {
      const float want = cuda::act_round_f32(t, g), got = cuda::act_round_f32_add(t, g);
      ++checked;
      if (std::memcmp(&want, &got, 4) != 0 && bad++ < 5) {
        ADD_FAILURE() << name(dtype_of(e)) << " t=" << t << ": " << got << ", act_round_f32 " << want;
      }
    };
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const uint32_t u = b << 16;
      float t;
      std::memcpy(&t, &u, 4);
      if (!std::isfinite(t)) continue;
      for (int s = -12; s <= 12; s += 4) check(std::ldexp(t, s));
    }
    for (int i = 0; i < 1 << 20; ++i) {
      uint32_t u = static_cast<uint32_t>(rng());
      float t;
      std::memcpy(&t, &u, 4);
      if (!std::isfinite(t)) continue;
      check(t);
      check(std::ldexp(std::fabs(t) / std::ldexp(1.0f, std::ilogb(t)), static_cast<int>(rng() % 24) - 14));
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(checked, 4000000);
}

TEST(ActQuantBf16Math, Bf16ExactnessPredicateMatchesBruteForce) {
  for (ActElem elem : {ActElem::kE4M3, ActElem::kE2M3, ActElem::kE3M2, ActElem::kE2M1}) {
    const DType d = dtype_of(elem);
    const uint32_t codes = 1u << traits(d).bits;
    for (int e = -127; e <= 127; ++e) {
      bool all = true;
      for (uint32_t code = 0; code < codes; ++code) {
        const double v = decode(d, code);
        if (!std::isfinite(v)) continue;  // E4M3's NaN codes
        const double scaled = v * std::ldexp(1.0, e);
        if (std::fabs(scaled) > std::numeric_limits<float>::max()) {
          all = false;
          continue;
        }
        const float f = static_cast<float>(scaled);
        all = all && static_cast<double>(f) == scaled && std::isfinite(bf16_to_float(float_to_bf16(f))) &&
              bf16_to_float(float_to_bf16(f)) == f;
      }
      EXPECT_EQ(cuda::act_mx_bf16_exact(elem, e), all) << name(d) << " e=" << e;
    }
  }
  EXPECT_TRUE(cuda::act_mx_bf16_exact(ActElem::kE4M3, -124));
  EXPECT_FALSE(cuda::act_mx_bf16_exact(ActElem::kE4M3, -125));
  EXPECT_TRUE(cuda::act_mx_bf16_exact(ActElem::kE2M1, -127));
}

TEST(ActQuantBf16Math, Nvfp4MatchesTheReferenceQuantizerBitForBit) {
  const int64_t rows = 8, cols = 16 * 80;
  for (bool dynamic : {true, false}) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE(std::string(dynamic ? "per-call" : "static") + " global scale, seed " + std::to_string(seed));
    Tensor x = hard_activations(rows, cols, 16, seed);
    // Keep the magnitudes within what one global scale spans, as real activations do, plus some tiny blocks.
    float* xp = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (std::fabs(xp[i]) > 1e4f) xp[i] = std::ldexp(std::fmod(xp[i], 8.0f), 7);
    }
    QuantizeOptions opt;
    if (!dynamic) opt.nvfp4_global_scale = 2688.0f / 900.0f;
    auto q = quantize(x, dynamic ? kNvfp4DynamicGlobal : kNvfp4Dynamic, opt);
    ASSERT_TRUE(q) << q.message();
    float amax_all = 0.0f;
    for (int64_t i = 0; i < x.numel(); ++i) amax_all = std::max(amax_all, std::fabs(xp[i]));
    const float g = dynamic ? cuda::act_nvfp4_dynamic_global(amax_all) : *opt.nvfp4_global_scale;
    EXPECT_EQ(g, q->scale2.data<float>()[0]);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / 16; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xp[r * cols + b * 16 + i]));
        const double sf = cuda::act_nvfp4_block_scale(amax, g);
        const uint8_t sf_code = static_cast<const uint8_t*>(q->scale.raw())[r * (cols / 16) + b];
        if (sf != decode(DType::kF8E4M3, sf_code) && bad++ < 5) ADD_FAILURE() << "block scale " << sf << " code " << int{sf_code};
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t c = b * 16 + i;
          const double v = cuda::act_nvfp4_element(xp[r * cols + c], g, sf);
          const double want = decode(DType::kF4E2M1, code_at(*q, DType::kF4E2M1, r, c));
          if (v != want && bad++ < 5) ADD_FAILURE() << "x " << xp[r * cols + c] << ": " << v << ", reference " << want;
          const float bf = static_cast<float>(v * sf);  // the BF16 value the pass writes: always exact
          if (bf16_to_float(float_to_bf16(bf)) != bf && bad++ < 5) ADD_FAILURE() << bf << " is not exact in BF16";
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(ActQuantBf16Math, StaticFp8MatchesTheReferenceQuantizerBitForBit) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor x = hard_activations(8, 1024, 32, seed);
  const float s = 0.37f;
  QuantizeOptions opt;
  opt.static_scale = Tensor::scalar_f32(s).reshape({1}).value();
  auto q = quantize(x, kFp8StaticTensorSym, opt);
  ASSERT_TRUE(q) << q.message();
  const cuda::ActGrid grid = cuda::act_grid(ActElem::kE4M3);
  int64_t bad = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double got = cuda::act_round_f64(static_cast<double>(x.data<float>()[i]) / s, grid);
    const double want = decode(DType::kF8E4M3, static_cast<const uint8_t*>(q->data.raw())[i]);
    if (got != want && bad++ < 5) ADD_FAILURE() << "x " << x.data<float>()[i] << ": " << got << ", reference " << want;
  }
  EXPECT_EQ(bad, 0);
}

// On an sm_90 GPU (simulated: selection needs no device) the quantized-activation schemes run on the
// tensor-core decode kernels, whose M routes say how the activations are made.
TEST(ActQuantBf16Math, SelectionOnSm90PicksTheTensorCoreDecodeKernels) {
  if (!built_with_cuda()) GTEST_SKIP() << "the CUDA kernels are not registered in this build";
  const Platform sm90 = Platform::synthetic_cuda(90);
  const std::pair<const char*, const char*> cases[] = {
      {"w4a4-mxfp4", "sm90_mma_decode_mxfp4"},          {"w6a6-mxfp6-e2m3", "sm90_mma_decode_mxfp6"},
      {"w6a6-mxfp6-e3m2", "sm90_mma_decode_mxfp6"},     {"w4a6-mxfp4-mxfp6-e2m3", "sm90_mma_decode_mxfp4"},
      {"w4a8-mxfp4-fp8", "sm90_mma_decode_mxfp4"},      {"w4a4-nvfp4", "sm90_mma_decode_nvfp4"},
      {"w8a8-mxfp8", "sm90_mma_decode_mxfp8"},
  };
  for (const auto& [scheme, kernel] : cases) {
    for (DType in : {DType::kBF16, DType::kF16, DType::kF32}) {
      const LinearConfig c = make_config(*find_scheme(scheme), 4096, 4096, in);
      auto chosen = select_kernel(c, sm90);
      ASSERT_TRUE(chosen) << scheme << ": " << chosen.message();
      EXPECT_EQ(chosen.value()->name(), kernel) << scheme;
      const std::vector<MRoute> routes = chosen.value()->m_routes(c);
      ASSERT_FALSE(routes.empty());
      for (const MRoute& r : routes) EXPECT_NE(r.why.find("activations quantized"), std::string::npos) << scheme << ": " << r.why;
    }
  }
  // What the kernels decline, with the reason: static FP8 activations on MXFP6 weights.
  LinearConfig c = make_config(*find_scheme("w6a6-mxfp6-e2m3"), 256, 256);
  c.activation_key = kFp8StaticTensorSym;
  const Verdict v = find_kernel("sm90_mma_decode_mxfp6")->can_implement(c);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("quantized activations"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace qlinear
