// The FP engine's BF16 kernels: AMX-BF16 (x86_amx_bf16_*) and, for CPUs without AMX, AVX-512 BF16 register tiles
// on the same decoded words (x86_avx512bf16_{fp8_scaled_mm, fp8_block_scaled, mxfp8, mxfp6, mxfp4, nvfp4}): weights
// and quantized activations decoded to BF16, against the reference on the same quantized layer, at M around the
// 6-row register tile, the 16-row AMX tile and the 32-row block edges, N off the 16-column panels and 64-column
// blocks and K off the 32-wide tile step (NVFP4: K a multiple of 16 only; FP8 128x128 blocks: K off 128 and off 16,
// more than one scale block); every family's scheme with BF16 and with quantized activations. Each case also
// checks that the tile path (or below its M range the weight stream) ran: a fallback to the AVX2 code gives the
// same numbers. Skipped, with the reason, where the CPU or the OS lacks the ISA.
#include <cmath>
#include <cstring>
#include <string_view>
#include <tuple>

#include "backends/x86/amx_isa.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

constexpr int64_t kMs[] = {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 127, 128, 129, 257};

// f32 accumulation of K exact BF16 products (tdpbf16ps / vdpbf16ps), the scales and the bias.
double f32_sum_rel(int64_t k) { return static_cast<double>(k + 16) * 0x1p-24; }

const Scheme kNvfp4A16{"nvfp4-a16", Family::kNvfp4, kNvfp4Static, std::nullopt, ""};
const Scheme kMxfp4A8{"mxfp4-a8", Family::kMxfp4, kMxfp4Static, kMxfp8Dynamic, ""};
const Scheme kMxfp6A8{"mxfp6-e3m2-a8", Family::kMxfp6, kMxfp6E3M2Static, kMxfp8Dynamic, ""};
const Scheme kFp8DynTensor{"fp8-dyn-tensor", Family::kFp8ScaledMM, kFp8StaticChannelSym, kFp8DynamicTensorSym, ""};

enum class KStep { kAny, kMx32, kNv16, kBlock128 };

struct FamilyCase {
  const LinearKernel* kernel;
  std::vector<const Scheme*> schemes;
  KStep k_step;
};

bool on_amx(const LinearKernel& k) { return k.name().substr(0, 12) == "x86_amx_bf16"; }

// The tile GEMMs the kernel's engine has started on this thread (AMX tiles, or AVX-512 BF16 register tiles).
int64_t tile_gemms(const LinearKernel& k) {
  return on_amx(k) ? x86::amx_bf16_gemms_on_this_thread() : x86::avx512bf16_gemms_on_this_thread();
}

std::vector<FamilyCase> families() {
  std::vector<FamilyCase> out;
  for (const bool amx : {true, false}) {
    out.push_back({amx ? &x86::kAmxBf16Nvfp4 : &x86::kAvx512Bf16Nvfp4, {find_scheme("w4a4-nvfp4"), &kNvfp4A16},
                   KStep::kNv16});
    out.push_back({amx ? &x86::kAmxBf16Mxfp6 : &x86::kAvx512Bf16Mxfp6,
                   {find_scheme("w6a16-mxfp6-e2m3"), find_scheme("w6a16-mxfp6-e3m2"), find_scheme("w6a6-mxfp6-e2m3"),
                    find_scheme("w6a6-mxfp6-e3m2"), &kMxfp6A8},
                   KStep::kMx32});
    out.push_back({amx ? &x86::kAmxBf16Mxfp4 : &x86::kAvx512Bf16Mxfp4,
                   {find_scheme("w4a4-mxfp4"), find_scheme("w4a6-mxfp4-mxfp6-e2m3"), find_scheme("w4a8-mxfp4-fp8"),
                    &kMxfp4A8, find_scheme("w4a16-mxfp4")},
                   KStep::kMx32});
  }
  // test_amx.cpp covers the AMX FP8 W8A8 and MXFP8 kernels.
  out.push_back({&x86::kAvx512Bf16Fp8ScaledMM,
                 {find_scheme("w8a8-fp8-channel"), find_scheme("w8a8-fp8-tensor"), &kFp8DynTensor}, KStep::kAny});
  out.push_back({&x86::kAvx512Bf16Mxfp8, {find_scheme("w8a8-mxfp8"), find_scheme("w8a16-mxfp8")}, KStep::kMx32});
  out.push_back({&x86::kAvx512Bf16Fp8BlockScaled, {find_scheme("w8a8-fp8-block")}, KStep::kBlock128});
  return out;
}

// Every M of kMs, N and K cycling through and off the tile multiples, outputs and bias varied.
std::vector<Case> sweep(KStep step) {
  static const int64_t ns[] = {67, 96, 33, 129};
  static const int64_t ks_mx[] = {96, 256, 544, 32};  // MX: multiples of 32
  static const int64_t ks_nv[] = {80, 256, 336, 16};  // NVFP4: 16 off the 32-wide tile step
  static const int64_t ks_any[] = {161, 256, 300, 40};
  // 128x128 blocks: a partial last block off 16 (161: the activations' scalar quantizer) and on it (336: the SIMD
  // one); K = 40 only with N = 129 (ns[3]), so that no layer has a single [1, 1] scale block (the reference reads
  // that as per-tensor).
  static const int64_t ks_block[] = {40, 256, 336, 161};
  const int64_t* ks = step == KStep::kMx32      ? ks_mx
                      : step == KStep::kNv16     ? ks_nv
                      : step == KStep::kBlock128 ? ks_block
                                                 : ks_any;
  const DType outs[] = {DType::kBF16, DType::kF16, DType::kF32};
  std::vector<Case> cases;
  int i = 0;
  for (int64_t m : kMs) {
    cases.push_back({m, ns[i % 4], ks[(i + 1) % 4], DType::kBF16, outs[i % 3], i % 2 == 0});
    ++i;
  }
  return cases;
}

// Matches the reference, and ran on tiles when M reaches the kernel's tile range, else the weight stream.
void expect_amx_matches(const LinearKernel& k, const Scheme& s, const Case& c, uint64_t seed) {
  const int64_t tiles_before = tile_gemms(k);
  const int64_t streams_before = x86::amx_bf16_streams_on_this_thread();
  x86_test::expect_matches_reference(k, s, c, seed, f32_sum_rel(c.k));
  const std::vector<MRoute> routes = k.m_routes(x86_test::make_layer(s, c, seed).config);
  const bool tiles = c.m >= routes.back().m_min;
  EXPECT_EQ(tile_gemms(k) - tiles_before, tiles ? 1 : 0)
      << k.name() << " " << s.name << " " << x86_test::describe(c) << ": the tile path "
      << (tiles ? "did not run" : "ran below its M range");
  const bool stream = routes.front().contains(c.m);  // between them (NVFP4 M = 2, 3 without AMX): the AVX2 code
  EXPECT_EQ(x86::amx_bf16_streams_on_this_thread() - streams_before, stream ? 1 : 0)
      << k.name() << " " << s.name << " " << x86_test::describe(c) << ": the weight stream "
      << (stream ? "did not run" : "ran where it should not");
}

class AmxFp : public ::testing::TestWithParam<int> {};

TEST_P(AmxFp, MatchesReferenceAcrossSchemesAndShapes) {
  const FamilyCase fc = families()[GetParam()];
  QL_SKIP_UNLESS_SUPPORTED(*fc.kernel);
  uint64_t seed = 9000 + 100 * GetParam();
  for (const Scheme* s : fc.schemes) {
    ASSERT_NE(s, nullptr);
    for (const Case& c : sweep(fc.k_step)) expect_amx_matches(*fc.kernel, *s, c, seed += 7);
    // f32 input quantized first (the tiles see the quantized values); BF16-only for weight-only schemes.
    const int64_t k = fc.k_step == KStep::kBlock128 ? 256 : 128;  // 128x128: more than one scale block
    if (s->activation_key) expect_amx_matches(*fc.kernel, *s, {20, 40, k, DType::kF32, DType::kBF16, true}, seed += 7);
    // M = 1 over two items of the streams (amx_int_stream.cpp: 32 panels, the last group 3 panels), K past the
    // streams' 2 KiB prefetch distance (prefetches cannot change a result; the item and group split can).
    expect_amx_matches(*fc.kernel, *s, {1, 1000, 4128}, seed += 7);
    if (fc.k_step == KStep::kBlock128) {  // f16 input, K on and off the SIMD quantizer's 16-element steps
      expect_amx_matches(*fc.kernel, *s, {7, 40, 208, DType::kF16, DType::kF16, false}, seed += 7);
      expect_amx_matches(*fc.kernel, *s, {1, 40, 210, DType::kF16, DType::kF32, true}, seed += 7);
    }
  }
  // Several 32-row blocks over whole-K decoded panels, rows split between threads, and the K-outer path
  // (activation rows over 1 MiB per thread: chunks of 1024 and a tail).
  expect_amx_matches(*fc.kernel, *fc.schemes[0], {300, 40, 1024}, seed += 7);
  expect_amx_matches(*fc.kernel, *fc.schemes[0], {129, 200, 4160, DType::kBF16, DType::kBF16, true}, seed += 7);
}

TEST_P(AmxFp, ThreadsAndRoundTrip) {
  const FamilyCase fc = families()[GetParam()];
  QL_SKIP_UNLESS_SUPPORTED(*fc.kernel);
  for (const Scheme* s : fc.schemes) x86_test::expect_thread_safe(*fc.kernel, *s, {33, 200, 384}, 11);
  x86_test::expect_round_trip(*fc.kernel, *fc.schemes[0], {1, 35, 160}, 12);
}

INSTANTIATE_TEST_SUITE_P(X86, AmxFp, ::testing::Range(0, static_cast<int>(families().size())), [](const ::testing::TestParamInfo<int>& i) {
  return std::string(families()[static_cast<size_t>(i.param)].kernel->name());
});

// Every E4M3 block-scale code (0 .. 126: zero, subnormal, normal, the largest; some negative) through the
// NVFP4 decode's (scale mantissa, code) lookup and exponent add.
class BothNvfp4 : public ::testing::TestWithParam<const LinearKernel*> {};

TEST_P(BothNvfp4, EveryBlockScaleCode) {
  const LinearKernel& k = *GetParam();
  QL_SKIP_UNLESS_SUPPORTED(k);
  for (const Scheme* s : {&kNvfp4A16, find_scheme("w4a4-nvfp4")}) {
    for (const int64_t m : {40, 1}) {  // the tiles (scales multiplied into the words) and the stream (per block)
      const Case c{m, 48, 2048, DType::kBF16, DType::kF32, true};
      const int64_t tiles = tile_gemms(k), streams = x86::amx_bf16_streams_on_this_thread();
      // Even columns: only subnormal scale codes (so that their outputs' tolerance is theirs alone); odd ones
      // every code.
      auto r = x86_test::run_with_edited_scales(k, *s, c, 31, [&](uint8_t* e, int64_t count) {
        for (int64_t i = 0; i < count; ++i) {
          const bool sub = (i / (c.k / 16)) % 2 == 0;
          e[i] = static_cast<uint8_t>((sub ? i % 8 : (i * 7) % 127) | (i % 5 == 0 ? 0x80 : 0));
        }
      });
      ASSERT_TRUE(r);
      EXPECT_EQ(tile_gemms(k) - tiles, m > 1 ? 1 : 0);
      EXPECT_EQ(x86::amx_bf16_streams_on_this_thread() - streams, m > 1 ? 0 : 1);
      auto wd = reference::dequantized_weight(r->ref_layer);
      auto xd = reference::effective_activation(r->ref_layer, Activation::dense(r->x));
      ASSERT_TRUE(wd && xd);
      int bad = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double mag = 0;
          for (int64_t kk = 0; kk < c.k; ++kk) mag += std::fabs(xd->data<double>()[i * c.k + kk] * wd->data<double>()[j * c.k + kk]);
          const double g = r->got.data<float>()[i * c.n + j], want = r->want.data<float>()[i * c.n + j];
          bad += !(std::fabs(g - want) <= f32_sum_rel(c.k) * mag + std::ldexp(std::fabs(want), -23));
        }
      }
      EXPECT_EQ(bad, 0) << s->name << " m " << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(X86, BothNvfp4, ::testing::Values(&x86::kAmxBf16Nvfp4, &x86::kAvx512Bf16Nvfp4),
                         [](const ::testing::TestParamInfo<const LinearKernel*>& i) { return std::string(i.param->name()); });

// MX scales far from 1 on both sides, still inside BF16's normal range once folded.
TEST(X86AmxFp, MxScalesFarFromOneStayExact) {
  for (const auto& [kernel, scheme] : {std::pair{&x86::kAmxBf16Mxfp6, "w6a6-mxfp6-e3m2"},
                                       std::pair{&x86::kAmxBf16Mxfp4, "w4a4-mxfp4"},
                                       std::pair{&x86::kAvx512Bf16Mxfp6, "w6a6-mxfp6-e3m2"},
                                       std::pair{&x86::kAvx512Bf16Mxfp4, "w4a4-mxfp4"}}) {
    if (!kernel->is_supported(Platform::host_cpu())) continue;
    for (const int64_t m : {17, 1}) {  // the tiles (scales folded into the words) and the stream (per block)
      const Case c{m, 40, 256, DType::kBF16, DType::kF32, false};
      auto r = x86_test::run_with_edited_scales(*kernel, *find_scheme(scheme), c, 41, [](uint8_t* e, int64_t count) {
        for (int64_t i = 0; i < count; ++i) e[i] = i % 3 == 0 ? 200 : (i % 3 == 1 ? 20 : 127);
      });
      ASSERT_TRUE(r);
      EXPECT_EQ(kernel->apply_route(r->layer, Activation::dense(r->x)), kernel->name());
      for (int64_t i = 0; i < c.m * c.n; ++i) {
        const double g = r->got.data<float>()[i], want = r->want.data<float>()[i];
        EXPECT_LE(std::fabs(g - want), std::ldexp(std::fabs(want), -16) + 1e-30) << scheme << " m " << m << " " << i;
      }
    }
  }
}

// FP8 128x128 blocks with their scales spread out: weight block scales over ~2^-49 .. 2^21 and activation 1x128
// groups over 2^-30 .. 2^30 of magnitude (their scales with them), all-zero groups (the 1e-10 amax floor), a partial
// last K block and partial column blocks, outputs poisoned; the stream (M = 1) and the register tiles. The two
// scales' product stays a normal f32 here: the kernel multiplies them in f32, as x86_avx2_fp8_block_scaled does.
TEST(X86AmxFp, Fp8BlockScalesSpanTheirRange) {
  const LinearKernel& k = x86::kAvx512Bf16Fp8BlockScaled;
  QL_SKIP_UNLESS_SUPPORTED(k);
  const Scheme& s = *find_scheme("w8a8-fp8-block");
  const LinearKernel& ref = x86_test::reference_for(s.family);
  for (const int64_t m : {1, 2, 17}) {
    const Case c{m, 200, 1040, DType::kF32, DType::kF32, true};
    SCOPED_TRACE(x86_test::describe(c));
    LinearLayer layer = x86_test::make_layer(s, c, 81 + m);
    Tensor& ws = layer.params.at("weight_scale");  // f32 [ceil(n / 128), ceil(k / 128)]
    ASSERT_EQ(ws.dtype(), DType::kF32);
    float* wsv = static_cast<float*>(ws.raw());
    for (int64_t i = 0; i < ws.numel(); ++i) wsv[i] = std::ldexp(wsv[i], static_cast<int>((i * 29) % 71) - 40);
    LinearLayer ref_layer = layer;
    ASSERT_TRUE(k.process_weights_after_loading(layer));
    ASSERT_TRUE(ref.process_weights_after_loading(ref_layer));
    Tensor x = random_normal(DType::kF32, {m, c.k}, 91 + m, 1.0);
    float* xv = x.data<float>();
    for (int64_t i = 0; i < m * c.k; ++i) {
      const int64_t group = (i / c.k) * 16 + (i % c.k) / 128;  // (row, 1x128 group)
      xv[i] = group % 7 == 3 ? 0.0f : std::ldexp(xv[i], static_cast<int>((group * 37) % 61) - 30);
    }
    const Tensor bias = random_normal(DType::kF32, {c.n}, 93, 0.5);
    Tensor got = x86_test::poisoned(c.out, m, c.n), want = x86_test::poisoned(c.out, m, c.n);
    const int64_t tiles = tile_gemms(k), streams = x86::amx_bf16_streams_on_this_thread();
    ASSERT_TRUE(k.apply(layer, Activation::dense(x), &bias, got));
    EXPECT_EQ(tile_gemms(k) - tiles, m > 1 ? 1 : 0);
    EXPECT_EQ(x86::amx_bf16_streams_on_this_thread() - streams, m > 1 ? 0 : 1);
    EXPECT_EQ(k.apply_route(layer, Activation::dense(x)), k.name());
    ASSERT_TRUE(ref.apply(ref_layer, Activation::dense(x), &bias, want));
    x86_test::expect_within_tolerance(ref_layer, x, &bias, got, want, c, f32_sum_rel(c.k));
  }
}

// FP8 128x128 blocks whose scales' f32 product would leave the normal range (weight block scales near 2^-110
// meeting activation groups near 2^-30 of magnitude: products near 2^-147, subnormals of two or three bits in
// f32, which the kernels' f32 product would give the outputs): the kernels hand the call to the reference
// (fp_common.cpp, block_scale_products_normal) and equal it bit for bit, for the AVX2 and the AVX-512 BF16
// kernel, at M = 1 (the stream) and 17 (the register tiles); with the check removed the outputs differ. A
// layer whose products stay normal keeps running on the kernel (the test above).
TEST(X86AmxFp, Fp8BlockScaleProductsBeyondF32TakeTheReference) {
  const Scheme& s = *find_scheme("w8a8-fp8-block");
  const LinearKernel& ref = x86_test::reference_for(s.family);
  for (const LinearKernel* k : {static_cast<const LinearKernel*>(&x86::kAvx2Fp8BlockScaled),
                                static_cast<const LinearKernel*>(&x86::kAvx512Bf16Fp8BlockScaled)}) {
    if (!k->is_supported(Platform::host_cpu())) continue;
    for (const int64_t m : {1, 17}) {
      const Case c{m, 200, 1040, DType::kF32, DType::kF32, true};
      SCOPED_TRACE(std::string(k->name()) + " " + x86_test::describe(c));
      LinearLayer layer = x86_test::make_layer(s, c, 121 + m);
      Tensor& ws = layer.params.at("weight_scale");
      float* wsv = static_cast<float*>(ws.raw());
      for (int64_t i = 0; i < ws.numel(); ++i) wsv[i] = std::ldexp(std::fabs(wsv[i]) + 0.5f, -110);
      LinearLayer ref_layer = layer, imported = layer;
      ASSERT_TRUE(k->process_weights_after_loading(layer));
      ASSERT_TRUE(ref.process_weights_after_loading(ref_layer));
      // The weights' scale range is derived again on import (the processed state does not store it).
      auto exported = k->export_processed(layer);
      ASSERT_TRUE(exported) << exported.message();
      ASSERT_TRUE(k->import_processed(imported, *exported));
      Tensor x = random_normal(DType::kF32, {m, c.k}, 131 + m, 1.0);
      for (int64_t i = 0; i < m * c.k; ++i) x.data<float>()[i] = std::ldexp(x.data<float>()[i], -30);
      Tensor want = x86_test::poisoned(c.out, m, c.n);
      ASSERT_TRUE(ref.apply(ref_layer, Activation::dense(x), nullptr, want));
      for (const LinearLayer* l : {&layer, &imported}) {
        Tensor got = x86_test::poisoned(c.out, m, c.n);
        const int64_t tiles = tile_gemms(*k), streams = x86::amx_bf16_streams_on_this_thread();
        ASSERT_TRUE(k->apply(*l, Activation::dense(x), nullptr, got));
        EXPECT_EQ(tile_gemms(*k) - tiles, 0);  // neither the tiles nor the stream ran
        EXPECT_EQ(x86::amx_bf16_streams_on_this_thread() - streams, 0);
        int64_t nonzero = 0;
        for (int64_t i = 0; i < m * c.n; ++i) {
          EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << (l == &layer ? "processed " : "imported ") << i;
          nonzero += want.data<float>()[i] != 0.0f;
        }
        EXPECT_GT(nonzero, m * c.n / 2);  // tiny outputs (f32 subnormals), not all flushed to zero
      }
    }
  }
}

// The AMX path's MX activation quantizer (amx_act_bf16.cpp) gives the reference quantizer's values bit for bit:
// blocks spread over 2^-150 .. 2^123 of magnitude (underflow, saturation, the exponent clamps), exact ties of
// every element grid, zeros, f32 / bf16 / f16 input; and refuses (false) where a value is not a normal BF16.
TEST(X86AmxFp, MxActivationsEqualTheReferenceQuantizer) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx512Bf16Mxfp4);  // the quantizer needs AVX-512 BF16 + VBMI, not AMX
  const int64_t m = 7, k = 640;
  for (const char* scheme : {"w4a4-mxfp4", "w6a6-mxfp6-e2m3", "w6a6-mxfp6-e3m2", "w8a8-mxfp8"}) {
    const Scheme& s = *find_scheme(scheme);
    for (const auto& [in, wide] : {std::pair{DType::kF32, false}, std::pair{DType::kBF16, false},
                                   std::pair{DType::kF16, false}, std::pair{DType::kF32, true},
                                   std::pair{DType::kBF16, true}}) {
      SCOPED_TRACE(std::string(scheme) + " " + std::string(name(in)) + (wide ? " wide" : ""));
      LinearLayer layer = x86_test::make_layer(s, {m, 64, k, in, DType::kF32}, 61);
      ASSERT_TRUE(x86_test::reference_for(s.family).process_weights_after_loading(layer));
      Tensor x = random_normal(DType::kF32, {m, k}, 62, 1.0);
      float* xv = x.data<float>();
      for (int64_t i = 0; i < m * k; ++i) {
        const int64_t block = i / 32;
        // Narrow: every folded value a normal BF16, so the quantizer must accept; wide: down to underflow.
        const int shift = in == DType::kF16 ? static_cast<int>(block % 9) - 4
                          : wide            ? static_cast<int>((block * 37) % 274) - 150
                                            : static_cast<int>((block * 37) % 121) - 60;
        xv[i] = std::ldexp(xv[i], shift);
        if (i % 5 == 0) xv[i] = std::ldexp(static_cast<float>(2 * (i % 13) + 1), shift - 4);  // ties of coarse grids
        if (i % 97 == 0) xv[i] = 0.0f;
      }
      Tensor xin = in == DType::kF32 ? x : Tensor::empty(in, {m, k});
      for (int64_t i = 0; in != DType::kF32 && i < m * k; ++i) {
        xin.data<uint16_t>()[i] = in == DType::kBF16 ? float_to_bf16(xv[i]) : float_to_f16(xv[i]);
      }
      x86::FpActQuant q;
      q.x = xin.raw();
      q.x_kind = static_cast<x86::FloatKind>(x86::float_kind_of(in));
      q.m = m;
      q.k = k;
      q.ldx = k;
      q.k_pad = k;
      q.mode = x86::FpActMode::kMxDyn;
      q.elem = s.activation_key->dtype == DType::kF4E2M1   ? x86::FpElem::kE2M1
               : s.activation_key->dtype == DType::kF6E2M3 ? x86::FpElem::kE2M3
               : s.activation_key->dtype == DType::kF6E3M2 ? x86::FpElem::kE3M2
                                                           : x86::FpElem::kE4M3;
      q.mx_rule = default_mx_rule(*s.activation_key) == MxScaleRule::kQuarkEven ? x86::FpMxRule::kQuarkEven
                                                                                : x86::FpMxRule::kCeilOverMax;
      std::vector<uint16_t> act(static_cast<size_t>(16 * k), 0xFFFF);
      const bool ok = x86::amx_prepare_bf16_activations(q, act.data());
      auto want = reference::effective_activation(layer, Activation::dense(xin));
      ASSERT_TRUE(want) << want.message();
      bool representable = true;  // every reference value a normal BF16 or zero
      int bad = 0;
      for (int64_t i = 0; i < m * k; ++i) {
        const double w = want->data<double>()[i];
        const float wf = static_cast<float>(w);
        uint32_t bits;
        std::memcpy(&bits, &wf, 4);
        if (static_cast<double>(wf) != w || (bits & 0xFFFF) != 0 || (w != 0 && (bits & 0x7F800000) == 0)) representable = false;
        const uint32_t got = static_cast<uint32_t>(act[static_cast<size_t>(i)]) << 16;
        float g;
        std::memcpy(&g, &got, 4);
        if (ok && static_cast<double>(g) != w && bad++ < 5) ADD_FAILURE() << "element " << i << ": " << g << ", reference " << w;
      }
      EXPECT_EQ(ok, representable) << "the quantizer must refuse exactly the activations that are not BF16 values";
      if (!wide) EXPECT_TRUE(ok) << "the narrow range must be compared value for value";
      for (int64_t i = m * k; i < 16 * k; ++i) ASSERT_EQ(act[static_cast<size_t>(i)], 0) << "padding row element " << i;
    }
  }
}

// Every mode the AMX quantizer takes gives fp_prepare_activations_avx2's values (which test_avx2_fp.cpp holds
// bit-identical to the reference quantizers) and row / group scales, bit for bit: NVFP4 with a given and a per-call
// global scale, FP8 static / per-token / per-tensor / per 1x128 group, MX; blocks of very different magnitudes,
// ties, zeros.
TEST(X86AmxFp, QuantizedActivationsEqualTheAvx2Path) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx512Bf16Nvfp4);
  const int64_t m = 9, k = 384;
  Tensor x = random_normal(DType::kF32, {m, k}, 71, 1.0);
  float* xv = x.data<float>();
  for (int64_t i = 0; i < m * k; ++i) {
    const int shift = static_cast<int>((i / 16 * 29) % 41) - 20;
    xv[i] = std::ldexp(i % 7 == 0 ? static_cast<float>(2 * (i % 11) + 1) * 0.125f : xv[i], shift);
    if (i % 89 == 0) xv[i] = 0.0f;
  }
  for (int64_t i = 5 * k; i < 6 * k; ++i) xv[i] = 0.0f;  // an all-zero row
  struct Mode {
    x86::FpActMode mode;
    bool dynamic_global;
    x86::FpElem elem;
  };
  const Mode modes[] = {{x86::FpActMode::kNvfp4Dyn, false, x86::FpElem::kE2M1},
                        {x86::FpActMode::kNvfp4Dyn, true, x86::FpElem::kE2M1},
                        {x86::FpActMode::kFp8Static, false, x86::FpElem::kE4M3},
                        {x86::FpActMode::kFp8DynToken, false, x86::FpElem::kE4M3},
                        {x86::FpActMode::kFp8DynTensor, false, x86::FpElem::kE4M3},
                        {x86::FpActMode::kFp8Dyn1x128, false, x86::FpElem::kE4M3},
                        {x86::FpActMode::kMxDyn, false, x86::FpElem::kE2M3},
                        {x86::FpActMode::kMxDyn, false, x86::FpElem::kE4M3}};
  for (const Mode& md : modes) {
    SCOPED_TRACE(static_cast<int>(md.mode) * 10 + (md.dynamic_global ? 1 : 0));
    x86::FpActQuant q;
    q.x = xv;
    q.x_kind = x86::FloatKind::kF32;
    q.m = m;
    q.k = k;
    q.ldx = k;
    q.k_pad = k;
    q.mode = md.mode;
    q.elem = md.elem;
    q.mx_rule = md.elem == x86::FpElem::kE4M3 ? x86::FpMxRule::kCeilOverMax : x86::FpMxRule::kQuarkEven;
    q.static_scale = 0.0137f;
    q.global_scale = 1234.5f;
    q.dynamic_global = md.dynamic_global;
    std::vector<float> want(static_cast<size_t>(m * k)), want_scale(m, -1.0f), got_scale(m, -1.0f);
    std::vector<float> want_groups(m * k / 128, -1.0f), got_groups(m * k / 128, -2.0f);  // 1x128 scales
    uint8_t bad = 0, inexact = 0;
    x86::FpActQuant ref = q;
    ref.act = want.data();
    ref.row_scale = want_scale.data();
    ref.block_scale = want_groups.data();
    ref.bad_input = &bad;
    ref.inexact = &inexact;
    x86::fp_prepare_activations_avx2(ref);
    ASSERT_EQ(bad | inexact, 0);
    std::vector<uint16_t> got(static_cast<size_t>(16 * k), 0xFFFF);
    q.row_scale = got_scale.data();
    q.block_scale = got_groups.data();
    ASSERT_TRUE(x86::amx_prepare_bf16_activations(q, got.data()));
    int mismatches = 0;
    for (int64_t i = 0; i < m * k; ++i) {
      const uint32_t bits = static_cast<uint32_t>(got[static_cast<size_t>(i)]) << 16;
      float g;
      std::memcpy(&g, &bits, 4);
      if (g != want[static_cast<size_t>(i)] && mismatches++ < 5) {
        ADD_FAILURE() << "element " << i << ": " << g << ", AVX2 path " << want[static_cast<size_t>(i)];
      }
    }
    if (md.mode != x86::FpActMode::kMxDyn) {
      for (int64_t r = 0; r < m; ++r) EXPECT_EQ(got_scale[r], want_scale[r]) << "row scale " << r;
    }
    if (md.mode == x86::FpActMode::kFp8Dyn1x128) EXPECT_EQ(got_groups, want_groups) << "1x128 group scales";
  }
}

// At M = 1 the E2M1 / E2M3 weight streams run in integers where the activations are per-block integers (W4A4,
// W4A6, W6A6 E2M3: amx_int_stream.cpp): bit-identical to the BF16 stream, which runs where they are not (dense
// BF16 activations, E3M2 weights, activations so small that the integer step would leave f32's normal range).
TEST(X86AmxFp, IntegerStreamEqualsTheBf16Stream) {
  struct Run {
    const LinearKernel* kernel;
    const char* scheme;
    bool integers;  // whether the integer stream applies
    double x_scale;
  };
  const Run runs[] = {{&x86::kAmxBf16Mxfp4, "w4a4-mxfp4", true, 1.0},
                      {&x86::kAmxBf16Mxfp4, "w4a6-mxfp4-mxfp6-e2m3", true, 1.0},
                      {&x86::kAmxBf16Mxfp4, "w4a4-mxfp4", true, 0x1p-90},
                      {&x86::kAmxBf16Mxfp4, "w4a4-mxfp4", false, 0x1p-125},
                      {&x86::kAmxBf16Mxfp4, "w4a16-mxfp4", false, 1.0},
                      {&x86::kAmxBf16Nvfp4, "w4a4-nvfp4", true, 1.0},
                      {&x86::kAmxBf16Nvfp4, "w4a4-nvfp4", true, 0x1p40},
                      {&x86::kAmxBf16Mxfp6, "w6a6-mxfp6-e2m3", true, 1.0},
                      {&x86::kAmxBf16Mxfp6, "w6a6-mxfp6-e3m2", false, 1.0},
                      {&x86::kAmxBf16Mxfp6, "w6a16-mxfp6-e2m3", false, 1.0},
                      {&x86::kAvx512Bf16Mxfp4, "w4a4-mxfp4", true, 1.0},
                      {&x86::kAvx512Bf16Nvfp4, "w4a4-nvfp4", true, 1.0},
                      {&x86::kAvx512Bf16Mxfp6, "w6a6-mxfp6-e2m3", true, 1.0}};
  // 1000 x 4128: two items of the integer stream (32 panels, the second 31: a group of 3 last), K past the 2 KiB
  // prefetch distance and not a multiple of 128 (the prefetches into the next group's panels run; what can
  // fail is the item and group split).
  const x86_test::Case shapes[] = {{1, 67, 96}, {1, 129, 544, DType::kBF16, DType::kF32, true}, {1, 16, 32},
                                   {1, 200, 1024, DType::kF32, DType::kBF16, true}, {1, 1000, 4128}};
  uint64_t seed = 4400;
  int ran = 0;
  for (const Run& r : runs) {
    if (!r.kernel->is_supported(Platform::host_cpu())) continue;
    const Scheme& s = *find_scheme(r.scheme);
    for (x86_test::Case c : shapes) {
      if (s.family == Family::kNvfp4 && c.k % 16 != 0) continue;
      if (!s.activation_key) c.in = DType::kBF16;  // the BF16 engines take weight-only layers' BF16 input only
      SCOPED_TRACE(std::string(r.kernel->name()) + " " + r.scheme + " " + x86_test::describe(c) + " x scale " +
                   std::to_string(std::log2(r.x_scale)));
      LinearLayer layer = x86_test::make_layer(s, c, seed += 3);
      ASSERT_TRUE(r.kernel->process_weights_after_loading(layer));
      // x_scale is a power of two: the scaled values are exact in either input type.
      Tensor x = random_normal(c.in, {c.m, c.k}, seed + 1, 1.0);
      for (int64_t i = 0; i < c.k; ++i) {
        float v = c.in == DType::kF32 ? x.data<float>()[i] : 0.0f;
        if (c.in == DType::kBF16) {
          const uint32_t bits = static_cast<uint32_t>(x.data<uint16_t>()[i]) << 16;
          std::memcpy(&v, &bits, 4);
        }
        v = i >= 32 && i < 64 && c.k >= 64 ? 0.0f : v * static_cast<float>(r.x_scale);  // k 32..63: an all-zero block
        if (c.in == DType::kF32) {
          x.data<float>()[i] = v;
        } else {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          x.data<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
        }
      }
      const Tensor bias = random_normal(DType::kF32, {c.n}, seed + 2, 0.5);
      const Tensor* b = c.bias ? &bias : nullptr;
      Tensor with_int = x86_test::poisoned(c.out, c.m, c.n), without = x86_test::poisoned(c.out, c.m, c.n);
      const int64_t before = x86::amx_int_streams_on_this_thread();
      ASSERT_TRUE(r.kernel->apply(layer, Activation::dense(x), b, with_int));
      EXPECT_EQ(x86::amx_int_streams_on_this_thread() - before, r.integers ? 1 : 0) << "the integer stream";
      x86::set_int_stream_enabled(false);
      const Status st = r.kernel->apply(layer, Activation::dense(x), b, without);
      x86::set_int_stream_enabled(true);
      ASSERT_TRUE(st) << st.message();
      EXPECT_EQ(std::memcmp(with_int.raw(), without.raw(), static_cast<size_t>(with_int.nbytes())), 0)
          << "the integer stream's output differs from the BF16 stream's";
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no AMX-BF16 or AVX-512 BF16 + VBMI kernel runs on this CPU";
}

// Where AMX runs, the priority list picks these kernels for quantized-activation MX and NVFP4 layers, and
// explain shows their M ranges.
TEST(X86AmxFp, SelectedWithTheirMRanges) {
  if (!x86::kAmxBf16Nvfp4.is_supported(Platform::host_cpu())) GTEST_SKIP() << "no AMX-BF16 here";
  for (const auto& [scheme, kernel] : {std::pair{"w4a4-nvfp4", "x86_amx_bf16_nvfp4"},
                                       std::pair{"w4a4-mxfp4", "x86_amx_bf16_mxfp4"},
                                       std::pair{"w6a16-mxfp6-e2m3", "x86_amx_bf16_mxfp6"},
                                       std::pair{"w4a16-mxfp4", "x86_amx_bf16_mxfp4_w4a16"}}) {
    LinearLayer l = x86_test::make_layer(*find_scheme(scheme), {16, 64, 64}, 51);
    const Selection sel = explain_selection(l.config, Platform::host_cpu());
    ASSERT_NE(sel.kernel, nullptr) << scheme;
    EXPECT_EQ(sel.kernel->name(), kernel);
    if (sel.kernel->name() != "x86_amx_bf16_mxfp4_w4a16") {
      EXPECT_NE(sel.explain().find("AMX-BF16 tiles"), std::string::npos) << sel.explain();
    }
  }
}

// Without AMX (AVX-512 BF16 + VBMI: Zen 4 / 5, Xeons whose AMX is not exposed) the AVX-512 BF16 kernels take the
// quantized-activation MX / NVFP4 / FP8 (per tensor, channel, 128x128 block) layers and MXFP6 weight-only, with
// the weight stream at M = 1 and register tiles from M = 2; the A16 MXFP8 / MXFP4 layers keep their weight-only
// kernels. With AVX-512 masked away (QLINEAR_CPU_ISA=avx2, AVX2-only CPUs such as Zen 3) the AVX2 kernels run;
// with AMX the AMX ones (FP8 128x128 blocks: still x86_avx512bf16_fp8_block_scaled, test_selection.cpp).
TEST(X86AmxFp, Avx512Bf16KernelsSelectedWithoutAmx) {
  CpuFeatures f = detect_cpu_features();
  if (!f.avx512bf16 || !f.avx512vbmi) GTEST_SKIP() << "no AVX-512 BF16 + VBMI here";
  f.amx_tile = f.amx_int8 = f.amx_bf16 = false;
  const Platform no_amx = Platform::synthetic_cpu(f);
  CpuFeatures avx2 = f;
  avx2.avx512f = avx2.avx512bw = avx2.avx512vl = avx2.avx512dq = avx2.avx512vnni = avx2.avx512bf16 = false;
  avx2.avx512vbmi = avx2.avx512fp16 = false;
  const Platform avx2_only = Platform::synthetic_cpu(avx2);
  CpuFeatures no_vbmi_f = f;
  no_vbmi_f.avx512vbmi = false;
  const Platform no_vbmi = Platform::synthetic_cpu(no_vbmi_f);
  for (const auto& [scheme, kernel, fallback] :
       {std::tuple{"w4a4-nvfp4", "x86_avx512bf16_nvfp4", "x86_avx2_nvfp4"},
        std::tuple{"w4a4-mxfp4", "x86_avx512bf16_mxfp4", "x86_avx2_mxfp4"},
        std::tuple{"w4a8-mxfp4-fp8", "x86_avx512bf16_mxfp4", "x86_avx2_mxfp4"},
        std::tuple{"w4a6-mxfp4-mxfp6-e2m3", "x86_avx512bf16_mxfp4", "x86_avx2_mxfp4"},
        std::tuple{"w6a6-mxfp6-e2m3", "x86_avx512bf16_mxfp6", "x86_avx2_mxfp6"},
        std::tuple{"w6a16-mxfp6-e3m2", "x86_avx512bf16_mxfp6", "x86_avx2_mxfp6"},
        std::tuple{"w8a8-mxfp8", "x86_avx512bf16_mxfp8", "x86_avx2_mxfp8"},
        std::tuple{"w8a8-fp8-tensor", "x86_avx512bf16_fp8_scaled_mm", "x86_avx2_fp8_scaled_mm"},
        std::tuple{"w8a8-fp8-channel", "x86_avx512bf16_fp8_scaled_mm", "x86_avx2_fp8_scaled_mm"},
        std::tuple{"w8a8-fp8-block", "x86_avx512bf16_fp8_block_scaled", "x86_avx2_fp8_block_scaled"},
        std::tuple{"w4a16-mxfp4", "x86_avx512bf16_mxfp4_w4a16", "x86_avx2_mxfp4"},
        std::tuple{"w8a16-mxfp8", "x86_avx512bf16_mxfp8_w8a16", "x86_avx2_mxfp8"}}) {
    SCOPED_TRACE(scheme);
    LinearLayer l = x86_test::make_layer(*find_scheme(scheme), {16, 64, 64}, 52);
    const Selection sel = explain_selection(l.config, no_amx);
    ASSERT_NE(sel.kernel, nullptr);
    EXPECT_EQ(sel.kernel->name(), kernel) << sel.explain();
    if (std::string_view(kernel).find("_w") == std::string_view::npos) {
      EXPECT_NE(sel.explain().find("AVX-512 BF16 register tiles"), std::string::npos) << sel.explain();
    }
    if (std::string_view(scheme) == "w4a4-nvfp4") {  // M = 2, 3: the AVX2 code, faster there
      const std::vector<MRoute> routes = sel.kernel->m_routes(l.config);
      ASSERT_EQ(routes.size(), 3u);
      EXPECT_EQ(routes[1].kernel, "x86_avx2_nvfp4");
      EXPECT_EQ(routes[1].m_min, 2);
      EXPECT_EQ(routes[1].m_max, 3);
      EXPECT_EQ(routes[2].m_min, 4);
      for (const int64_t m : {1, 2, 3, 4}) {
        LinearLayer p = l;
        ASSERT_TRUE(sel.kernel->process_weights_after_loading(p));
        const Tensor x = random_normal(DType::kBF16, {m, 64}, 53, 1.0);
        EXPECT_EQ(sel.kernel->apply_route(p, Activation::dense(x)), m == 2 || m == 3 ? "x86_avx2_nvfp4" : kernel);
      }
    }
    const Selection low = explain_selection(l.config, avx2_only);
    ASSERT_NE(low.kernel, nullptr);
    EXPECT_EQ(low.kernel->name(), fallback) << low.explain();
    if (std::string_view(kernel).find("_w") == std::string_view::npos) {
      const Selection nv = explain_selection(l.config, no_vbmi);
      ASSERT_NE(nv.kernel, nullptr);
      EXPECT_EQ(nv.kernel->name(), fallback) << nv.explain();
      EXPECT_NE(nv.explain().find("VBMI"), std::string::npos) << nv.explain();
    }
  }
}

}  // namespace
}  // namespace qlinear
