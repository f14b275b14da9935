// x86 AVX2 FP8 / MX / NVFP4 kernels (x86_avx2_*: f32 decode, FMA, f32 accumulation) against the reference
// on the same quantized layers; their activation quantizer against the reference quantizer (bit for bit);
// threads, round trips, the exact-range fallback and rejections.
#include <cmath>
#include <cstring>

#include "backends/x86/fp_isa.hpp"
#include "qlinear/make_layer.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

// f32 accumulation of K exact products, the per-chunk / per-block partial sums and the epilogue's
// scale and bias: (K + 16) roundings of 2^-24 at most.
double f32_sum_rel(int64_t k) { return static_cast<double>(k + 16) * 0x1p-24; }

// K at and off multiples of 32 / 128 where the family allows it (block formats: multiples only; FP8
// blocks: more than one block, since the reference cannot dequantize a single-block [1, 1] scale).
enum class KRule { kAny, kBlock128, kMx };

std::vector<Case> sweep(KRule rule) {
  std::vector<Case> cases;
  const int64_t ms[] = {1, 2, 3, 7, 16, 17, 64, 257};
  const DType outs[] = {DType::kBF16, DType::kF16, DType::kF32};
  const DType ins[] = {DType::kBF16, DType::kF32, DType::kF16};
  int i = 0;
  for (int64_t m : ms) {
    const int64_t n = (i % 2) ? 67 : 96;
    int64_t k = 0;
    switch (rule) {
      case KRule::kAny: k = (i % 3 == 0) ? 256 : (i % 3 == 1) ? 300 : 61; break;
      case KRule::kBlock128: k = (i % 3 == 0) ? 256 : (i % 3 == 1) ? 300 : 161; break;
      case KRule::kMx: k = (i % 3 == 0) ? 256 : (i % 3 == 1) ? 96 : 544; break;
    }
    cases.push_back({m, n, k, ins[i % 3], outs[i % 3], i % 2 == 0});
    ++i;
  }
  cases.push_back({5, 300, 128 + 160, DType::kBF16, DType::kF32, true});  // several panels and a tail
  return cases;
}

const Scheme kFp8WoTensor{"fp8-w8a16-tensor", Family::kFp8WeightOnly, kFp8StaticTensorSym, std::nullopt, ""};
const Scheme kFp8WoBlock{"fp8-w8a16-block", Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt, ""};
const Scheme kFp8DynTensor{"fp8-dyn-tensor", Family::kFp8ScaledMM, kFp8StaticChannelSym, kFp8DynamicTensorSym, ""};
const Scheme kFp8TensorTensor{"fp8-tensor-dyn-token", Family::kFp8ScaledMM, kFp8StaticTensorSym,
                              kFp8DynamicTokenSym, ""};
const Scheme kMxfp6A8{"mxfp6-e3m2-a8", Family::kMxfp6, kMxfp6E3M2Static, kMxfp8Dynamic, ""};
const Scheme kMxfp4A8{"mxfp4-a8", Family::kMxfp4, kMxfp4Static, kMxfp8Dynamic, ""};
const Scheme kNvfp4A16{"nvfp4-a16", Family::kNvfp4, kNvfp4Static, std::nullopt, ""};

struct FamilyCase {
  const LinearKernel* kernel;
  std::vector<const Scheme*> schemes;
  KRule rule;
};

std::vector<FamilyCase> families() {
  return {
      {&x86::kAvx2Mxfp8, {find_scheme("w8a16-mxfp8"), find_scheme("w8a8-mxfp8")}, KRule::kMx},
      {&x86::kAvx2Fp8WeightOnly, {find_scheme("w8a16-fp8"), &kFp8WoTensor, &kFp8WoBlock}, KRule::kBlock128},
      {&x86::kAvx2Mxfp4,
       {find_scheme("w4a16-mxfp4"), find_scheme("w4a4-mxfp4"), find_scheme("w4a6-mxfp4-mxfp6-e2m3"),
        find_scheme("w4a8-mxfp4-fp8"), &kMxfp4A8},
       KRule::kMx},
      {&x86::kAvx2Mxfp6,
       {find_scheme("w6a16-mxfp6-e2m3"), find_scheme("w6a16-mxfp6-e3m2"), find_scheme("w6a6-mxfp6-e2m3"), &kMxfp6A8,
        find_scheme("w6a6-mxfp6-e3m2")},
       KRule::kMx},
      {&x86::kAvx2Fp8ScaledMM,
       {find_scheme("w8a8-fp8-tensor"), find_scheme("w8a8-fp8-channel"), &kFp8DynTensor, &kFp8TensorTensor},
       KRule::kAny},
      {&x86::kAvx2Fp8BlockScaled, {find_scheme("w8a8-fp8-block")}, KRule::kBlock128},
      {&x86::kAvx2Nvfp4, {find_scheme("w4a4-nvfp4"), &kNvfp4A16}, KRule::kMx},
  };
}

class Avx2Fp : public ::testing::TestWithParam<int> {};

TEST_P(Avx2Fp, MatchesReferenceAcrossSchemesAndShapes) {
  const FamilyCase fc = families()[GetParam()];
  QL_SKIP_UNLESS_SUPPORTED(*fc.kernel);
  uint64_t seed = 7000 + 100 * GetParam();
  for (const Scheme* s : fc.schemes) {
    ASSERT_NE(s, nullptr);
    for (const Case& c : sweep(fc.rule)) {
      x86_test::expect_matches_reference(*fc.kernel, *s, c, seed += 7, f32_sum_rel(c.k));
    }
  }
}

TEST_P(Avx2Fp, ManyThreadsGiveBitIdenticalResults) {
  const FamilyCase fc = families()[GetParam()];
  QL_SKIP_UNLESS_SUPPORTED(*fc.kernel);
  for (const Scheme* s : fc.schemes) x86_test::expect_thread_safe(*fc.kernel, *s, {33, 200, 384}, 11);
}

// A row's output does not depend on the batch it came in: M = 1..3 take the register-decode path, larger M
// the decoded tile, and both must give the same bits (per-tensor dynamic activation scales excepted: they
// depend on the whole batch by definition).
TEST_P(Avx2Fp, RowsDoNotDependOnTheBatch) {
  const FamilyCase fc = families()[GetParam()];
  QL_SKIP_UNLESS_SUPPORTED(*fc.kernel);
  for (const Scheme* s : fc.schemes) {
    const auto& ak = s->activation_key;
    if (ak && !ak->scale.is_static && ak->scale.group.is_per_tensor()) continue;
    for (const Case& c : {Case{9, 67, fc.rule == KRule::kAny ? 300 : 256, DType::kBF16, DType::kBF16, true},
                          Case{8, 96, fc.rule == KRule::kMx ? 544 : 384, DType::kF32, DType::kF32, false}}) {
      SCOPED_TRACE(std::string(s->name) + " " + x86_test::describe(c));
      LinearLayer layer = x86_test::make_layer(*s, c, 91);
      ASSERT_TRUE(fc.kernel->process_weights_after_loading(layer));
      const Tensor x = random_normal(c.in, {c.m, c.k}, 92, 1.0);
      auto all = fc.kernel->apply(layer, Activation::dense(x));
      ASSERT_TRUE(all) << all.message();
      const size_t row_bytes = static_cast<size_t>(all->nbytes() / c.m);
      for (int64_t r0 = 0; r0 < c.m; r0 += 3) {
        for (int64_t len : {int64_t{1}, int64_t{2}, int64_t{3}}) {
          if (r0 + len > c.m) continue;
          const Tensor part = x.narrow(0, r0, len).value().contiguous();
          auto some = fc.kernel->apply(layer, Activation::dense(part));
          ASSERT_TRUE(some) << some.message();
          EXPECT_EQ(std::memcmp(some->raw(), static_cast<const char*>(all->raw()) + r0 * row_bytes, len * row_bytes), 0)
              << "rows " << r0 << ".." << r0 + len - 1;
        }
      }
    }
  }
}

TEST_P(Avx2Fp, RowMajorWeightRoundTrips) {  // prepacking is baseline code: runs on any CPU
  const FamilyCase fc = families()[GetParam()];
  for (const Scheme* s : fc.schemes) {
    x86_test::expect_round_trip(*fc.kernel, *s, {1, 35, 160}, 13);
    x86_test::expect_round_trip(*fc.kernel, *s, {1, 300, 288}, 14);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Avx2Fp, ::testing::Range(0, 7), [](const auto& info) {
  return std::string(family_name(families()[info.param].kernel->family()));
});

// Fused layers: per-shard weight scales (FP8 per-tensor), per-shard static input scales, per-shard NVFP4
// global scales.
TEST(X86Avx2Fp, FusedShardsWithPerShardScales) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Fp8ScaledMM);
  const std::vector<int64_t> shards = {16, 24, 27};
  const Case c{7, 67, 96, DType::kBF16, DType::kBF16, true, shards};
  x86_test::expect_matches_reference(x86::kAvx2Fp8ScaledMM, *find_scheme("w8a8-fp8-tensor"), c, 31, f32_sum_rel(96));
  x86_test::expect_matches_reference(x86::kAvx2Fp8ScaledMM, kFp8TensorTensor, c, 32, f32_sum_rel(96));
  x86_test::expect_matches_reference(x86::kAvx2Fp8WeightOnly, kFp8WoTensor, c, 33, f32_sum_rel(96));
  x86_test::expect_matches_reference(x86::kAvx2Nvfp4, *find_scheme("w4a4-nvfp4"), c, 34, f32_sum_rel(96));
  x86_test::expect_matches_reference(x86::kAvx2Nvfp4, kNvfp4A16, {17, 67, 160, DType::kF32, DType::kF16, false, shards},
                                     35, f32_sum_rel(160));
}

// The activation quantizer gives the reference quantizer's codes and scales, bit for bit, on inputs full of
// exact ties (multiples of 2^-7 land on element midpoints after power-of-two MX scaling).
TEST(X86Avx2Fp, ActivationQuantizerIsBitIdenticalToTheReference) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Mxfp8);
  const int64_t m = 9, k = 384;
  struct Mode {
    x86::FpActMode mode;
    QuantKey key;
    std::optional<MxScaleRule> rule = std::nullopt;  // none: the key's default (default_mx_rule)
  };
  const Mode modes[] = {
      {x86::FpActMode::kFp8DynToken, kFp8DynamicTokenSym}, {x86::FpActMode::kFp8DynTensor, kFp8DynamicTensorSym},
      {x86::FpActMode::kFp8Static, kFp8StaticTensorSym},   {x86::FpActMode::kFp8Dyn1x128, kFp8Dynamic128Sym},
      {x86::FpActMode::kMxDyn, kMxfp8Dynamic},             {x86::FpActMode::kMxDyn, kMxfp6E2M3Dynamic},
      {x86::FpActMode::kMxDyn, kMxfp6E3M2Dynamic},         {x86::FpActMode::kMxDyn, kMxfp4Dynamic},
      {x86::FpActMode::kNvfp4Dyn, kNvfp4Dynamic},
      {x86::FpActMode::kMxDyn, kMxfp4Dynamic, MxScaleRule::kCeilOverMax},
      {x86::FpActMode::kMxDyn, kMxfp6E3M2Dynamic, MxScaleRule::kCeilOverMax},
  };
  for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int variant = 0; variant < 2; ++variant) {
      Tensor x = random_normal(in, {m, k}, 40 + variant, 2.0);
      if (variant == 1) {  // round to multiples of 2^-7: exact ties everywhere
        for (int64_t i = 0; i < m * k; ++i) {
          const double v = std::nearbyint(element_as_double(x, i) * 128.0) / 128.0;
          if (in == DType::kF32) x.data<float>()[i] = static_cast<float>(v);
          else x.data<uint16_t>()[i] = static_cast<uint16_t>(encode(in, v));
        }
      }
      for (const Mode& md : modes) {
        SCOPED_TRACE(key_name(md.key) + " in=" + std::string(name(in)) + " variant " + std::to_string(variant));
        QuantizeOptions qo;
        x86::FpActQuant q;
        qo.mx_rule = md.rule;
        q.mx_rule = md.rule.value_or(default_mx_rule(md.key)) == MxScaleRule::kQuarkEven ? x86::FpMxRule::kQuarkEven
                                                                                          : x86::FpMxRule::kCeilOverMax;
        if (md.mode == x86::FpActMode::kFp8Static) {
          q.static_scale = 0.0173f;
          qo.static_scale = Tensor::scalar_f32(q.static_scale).reshape({1}).value();
        }
        if (md.mode == x86::FpActMode::kNvfp4Dyn) {
          q.global_scale = 311.5f;
          qo.nvfp4_global_scale = q.global_scale;
        }
        auto ref = quantize(x, md.key, qo);
        ASSERT_TRUE(ref) << ref.message();
        const int64_t kp = 416;
        std::vector<float> act(m * kp, -1.0f), rs(m), bs(m * 3);
        uint8_t bad = 0, inexact = 0;
        q.x = x.raw();
        q.x_kind = static_cast<x86::FloatKind>(x86::float_kind_of(in));
        q.m = m;
        q.k = k;
        q.ldx = k;
        q.mode = md.mode;
        q.elem = md.key.dtype == DType::kF6E2M3   ? x86::FpElem::kE2M3
                 : md.key.dtype == DType::kF6E3M2 ? x86::FpElem::kE3M2
                 : md.key.dtype == DType::kF4E2M1 ? x86::FpElem::kE2M1
                                                  : x86::FpElem::kE4M3;
        q.act = act.data();
        q.k_pad = kp;
        q.row_scale = rs.data();
        q.block_scale = bs.data();
        q.bad_input = &bad;
        q.inexact = &inexact;
        // The integer form too where the element has one (E2M1, E2M3: the integer W4A4 / W4A6 path).
        const int64_t group = md.mode == x86::FpActMode::kNvfp4Dyn ? 16 : 32;
        const bool ints = md.mode == x86::FpActMode::kNvfp4Dyn ||
                          (md.mode == x86::FpActMode::kMxDyn && x86::fp_act_int_shift(q.elem) >= 0);
        std::vector<int8_t> int_codes(ints ? m * kp : 0, 99);
        std::vector<float> int_mult(ints ? m * (kp / group) : 0, -1.0f);
        q.int_codes = ints ? int_codes.data() : nullptr;
        q.int_mult = ints ? int_mult.data() : nullptr;
        x86::fp_prepare_activations_avx2(q);
        ASSERT_EQ(bad, 0);
        ASSERT_EQ(inexact, 0);
        for (int64_t i = 0; ints && i < m * kp; ++i) {  // act = int * mult * 2, exactly
          const double v = static_cast<double>(int_codes[i]) * int_mult[i / kp * (kp / group) + i % kp / group] * 2.0;
          ASSERT_EQ(v, static_cast<double>(act[i])) << "integer form of row " << i / kp << " col " << i % kp;
        }
        const Tensor data = ref->data, scale = ref->scale;
        int mismatches = 0;
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < kp; ++c) {
            double want = 0;
            if (c < k) {
              if (is_packed(md.key.dtype)) {
                const int64_t rb = storage_bytes(md.key.dtype, k);
                want = decode(md.key.dtype, unpack_code(md.key.dtype, data.data<uint8_t>() + r * rb, c));
              } else {
                want = decode(DType::kF8E4M3, data.data<uint8_t>()[r * k + c]);
              }
              if (md.mode == x86::FpActMode::kMxDyn) {
                want = std::ldexp(want, static_cast<int>(scale.data<uint8_t>()[r * (k / 32) + c / 32]) - 127);
              }
              if (md.mode == x86::FpActMode::kNvfp4Dyn) {
                want *= decode(DType::kF8E4M3, static_cast<const uint8_t*>(scale.raw())[r * (k / 16) + c / 16]);
              }
            }
            if (static_cast<double>(act[r * kp + c]) != want && mismatches++ < 5) {
              ADD_FAILURE() << "row " << r << " col " << c << ": " << act[r * kp + c] << " vs " << want;
            }
          }
          switch (md.mode) {
            case x86::FpActMode::kFp8DynToken:
              EXPECT_EQ(rs[r], scale.data<float>()[r]);
              break;
            case x86::FpActMode::kFp8DynTensor:
            case x86::FpActMode::kFp8Static:
              EXPECT_EQ(rs[r], scale.data<float>()[0]);
              break;
            case x86::FpActMode::kFp8Dyn1x128:
              for (int b = 0; b < 3; ++b) EXPECT_EQ(bs[r * 3 + b], scale.data<float>()[r * 3 + b]);
              break;
            default: break;
          }
        }
        EXPECT_EQ(mismatches, 0);
      }
    }
  }
}

// Whether the AVX2 FP kernel handed a processed layer to the reference: the "use_reference" flag of its
// exported state (flags [has col_nan, use_reference], fp_common.cpp).
bool uses_reference(const LinearKernel& k, const LinearLayer& layer) {
  auto w = k.export_processed(layer);
  EXPECT_TRUE(w) << w.message();
  if (!w) return false;
  auto flags = w->get("flags");
  EXPECT_TRUE(flags) << flags.message();
  return flags && flags->data<int64_t>()[1] != 0;
}

// Quad records (fp_isa.hpp), 4 k x 16 columns each. E2M1: code (column j, k = 4q + kk) of a panel in byte
// 16 L + 8 W + 2 d + kk % 2 of the 32-byte record q (j = 8 W + 4 L + d), low nibble for kk < 2. FP6: its low
// nibble in byte 16 (j / 8) + i, i = 8 (kk % 2) + j % 8, of the 48-byte record (low nibble for kk < 2), its
// top two bits in byte 32 + i at bits 2 (2 (kk / 2) + j / 8). Padding codes +0. The exported "packed"
// tensor holds exactly that, and a state exported under the previous layout version is refused.
TEST(X86Avx2Fp, QuadRecordLayouts) {
  const std::pair<const char*, const char*> cases[] = {{"w4a16-mxfp4", "x86_avx2_mxfp4"},
                                                       {"w4a4-nvfp4", "x86_avx2_nvfp4"},
                                                       {"w6a16-mxfp6-e2m3", "x86_avx2_mxfp6"},
                                                       {"w6a16-mxfp6-e3m2", "x86_avx2_mxfp6"}};
  for (const auto& [scheme, kernel] : cases) {
    SCOPED_TRACE(scheme);
    const LinearKernel& k = *find_kernel(kernel);
    const int64_t n = 37, kdim = 96, n_pad = 48, k_pad = 96;
    LinearLayer layer = x86_test::make_layer(*find_scheme(scheme), {1, n, kdim}, 17);
    const Tensor w = layer.params.at("weight").contiguous();
    const DType wd = layer.config.weight_key.dtype;
    const bool fp4 = wd == DType::kF4E2M1;
    const int64_t rec = fp4 ? 8 : 12, row_bytes = storage_bytes(wd, kdim);
    LinearLayer fresh = layer;
    ASSERT_TRUE(k.process_weights_after_loading(layer));
    auto exported = k.export_processed(layer);
    ASSERT_TRUE(exported) << exported.message();
    EXPECT_EQ(exported->layout_version, 4u);
    auto packed = exported->get("packed");
    ASSERT_TRUE(packed) << packed.message();
    ASSERT_EQ(packed->nbytes(), n_pad / 16 * k_pad * rec);
    const uint8_t* pb = static_cast<const uint8_t*>(packed->raw());
    int bad = 0;
    for (int64_t col = 0; col < n_pad; ++col) {
      for (int64_t kk = 0; kk < k_pad; ++kk) {
        const uint32_t want = col < n ? unpack_code(wd, w.data<uint8_t>() + col * row_bytes, kk) : 0;
        const int64_t j = col % 16, t = kk % 4;
        const uint8_t* r = pb + (col / 16) * k_pad * rec + (kk / 4) * 4 * rec;
        uint32_t got = 0;
        if (fp4) {
          got = (r[16 * ((j % 8) / 4) + 8 * (j / 8) + 2 * (j % 4) + t % 2] >> (4 * (t / 2))) & 0x0F;
        } else {
          const int64_t i = 8 * (t % 2) + j % 8;
          got = ((r[16 * (j / 8) + i] >> (4 * (t / 2))) & 0x0F) | (((r[32 + i] >> (2 * (2 * (t / 2) + j / 8))) & 3) << 4);
        }
        if (got != want && bad++ < 5) ADD_FAILURE() << "column " << col << " k " << kk << ": " << got << " vs " << want;
      }
    }
    EXPECT_EQ(bad, 0);
    ProcessedWeights old = *exported;
    old.layout_version = 3;
    Status st = k.import_processed(fresh, old);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("layout version 3"), std::string::npos) << st.message();
  }
}

// MX scales whose folded weights would leave f32's exact range: the layer runs the reference (FP64 sums).
TEST(X86Avx2Fp, MxScalesOutOfFoldRangeTakeTheReference) {
  const LinearKernel& k = x86::kAvx2Mxfp4;
  QL_SKIP_UNLESS_SUPPORTED(k);
  auto r = x86_test::run_with_edited_scales(k, *find_scheme("w4a16-mxfp4"), {5, 40, 96, DType::kBF16, DType::kF32, true},
                                            9, [](uint8_t* e, int64_t) {
                                              e[0] = 1;    // 2^-126: 0.5 * 2^-126 is an f32 subnormal
                                              e[5] = 140;  // 2^13: the multiplier is still normal, the values too
                                            });
  ASSERT_TRUE(r);
  EXPECT_TRUE(uses_reference(k, r->layer));
  // The exact path is a visible route: the dispatch log names the reference kernel for this layer.
  const Tensor x = Tensor::empty(DType::kBF16, {1, r->layer.config.k});
  EXPECT_EQ(k.apply_route(r->layer, Activation::dense(x)), "reference_mxfp4");
  EXPECT_EQ(std::memcmp(r->got.raw(), r->want.raw(), static_cast<size_t>(r->got.nbytes())), 0);
}

// MXFP8 layers whose scale codes follow `pattern` (index -> code) keep the AVX2 engine and match the reference
// within the f32 summation bound.
void expect_mxfp8_scales_stay_exact(uint8_t (*pattern)(int64_t)) {
  const LinearKernel& k = x86::kAvx2Mxfp8;
  const Case c{3, 32, 96, DType::kF32, DType::kF32, false};
  auto r = x86_test::run_with_edited_scales(k, *find_scheme("w8a16-mxfp8"), c, 31, [&](uint8_t* e, int64_t count) {
    for (int64_t i = 0; i < count; ++i) e[i] = pattern(i);
  });
  ASSERT_TRUE(r);
  EXPECT_FALSE(uses_reference(k, r->layer)) << "these scales fold exactly; the engine must keep the layer";
  EXPECT_EQ(k.apply_route(r->layer, Activation::dense(Tensor::empty(DType::kF32, {1, c.k}))), "x86_avx2_mxfp8");
  auto wd = reference::dequantized_weight(r->ref_layer);
  ASSERT_TRUE(wd);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double mag = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) mag += std::fabs(r->x.data<float>()[i * c.k + kk] * wd->data<double>()[j * c.k + kk]);
      const double g = r->got.data<float>()[i * c.n + j], want = r->want.data<float>()[i * c.n + j];
      EXPECT_LE(std::fabs(g - want), c.k * 0x1p-24 * mag + std::ldexp(std::fabs(want), -23)) << i << "," << j;
    }
  }
}

// MXFP8 scales far from 1 (2^73, 2^-107): E4M3 decodes through FP16 (value * 2^-8) with the multiplier
// 2^(8 + e), inside f32's exact range for these, so the AVX2 engine keeps the layer (it does not
// hand scales above 2^7 to the reference) and must still match it.
TEST(X86Avx2Fp, Mxfp8ScalesFarFromOneStayExact) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Mxfp8);
  expect_mxfp8_scales_stay_exact([](int64_t i) -> uint8_t { return i % 3 == 0 ? 200 : (i % 3 == 1 ? 20 : 127); });
}

// Scales up to 2^7 (code 134) take the f32 decode route (value * 2^-120, multipliers 2^(e - 7)): its edge,
// and small scales whose multipliers are near f32's smallest normals, with the random codes' subnormals.
TEST(X86Avx2Fp, Mxfp8ScalesOfTheF32RouteStayExact) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Mxfp8);
  expect_mxfp8_scales_stay_exact([](int64_t i) -> uint8_t { return i % 3 == 0 ? 134 : (i % 3 == 1 ? 20 : 120); });
}

// E2M1 weights with E2M1 / E2M3 activations sum each group in 16-bit integers (fp_quad_avx2.cpp): at the
// largest sums -- every weight +-6 and every activation at its element's maximum (6, 7.5), so that a column's
// group sums to 32 * 12 * 12 or 32 * 12 * 60 as integers -- the output is still the reference's (MX: exactly,
// NVFP4: within its global scales' roundings). Columns
// alternate all +6 and all -6 weights; rows 1 and 3 negate the activations; K = 288 ends off the 256 chunk.
TEST(X86Avx2Fp, IntegerGroupSumsAtTheirLargestMatchTheReference) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Mxfp4);
  const int64_t m = 4, n = 35, k = 288;
  for (const char* name : {"w4a4-mxfp4", "w4a6-mxfp4-mxfp6-e2m3", "w4a4-nvfp4"}) {
    SCOPED_TRACE(name);
    const Scheme& scheme = *find_scheme(name);
    const LinearKernel& kernel = scheme.family == Family::kNvfp4 ? static_cast<const LinearKernel&>(x86::kAvx2Nvfp4)
                                                                 : x86::kAvx2Mxfp4;
    Tensor w = Tensor::empty(DType::kF32, {n, k});
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < k; ++i) w.data<float>()[j * k + i] = j % 2 ? -6.0f : 6.0f;
    }
    const float amax = std::string(name).find("e2m3") != std::string::npos ? 7.5f : 6.0f;
    Tensor x = Tensor::empty(DType::kF32, {m, k});
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) x.data<float>()[r * k + i] = r % 2 ? -amax : amax;
    }
    MakeLayerOptions opt;
    opt.input_dtype = opt.out_dtype = DType::kF32;
    opt.input_min = -amax;
    opt.input_max = amax;
    auto made = quantize_layer("x86_test", scheme, w, opt);
    ASSERT_TRUE(made) << made.message();
    LinearLayer layer = std::move(*made), ref_layer = layer;
    ASSERT_TRUE(kernel.process_weights_after_loading(layer));
    ASSERT_TRUE(x86_test::reference_for(scheme.family).process_weights_after_loading(ref_layer));
    auto got = kernel.apply(layer, Activation::dense(x));
    auto want = x86_test::reference_for(scheme.family).apply(ref_layer, Activation::dense(x));
    ASSERT_TRUE(got && want);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const double g = element_as_double(*got, r * n + j), v = element_as_double(*want, r * n + j);
        // MX: products of powers of two, every partial sum exact; NVFP4: the global scales' f32 roundings.
        const double tol = scheme.family == Family::kNvfp4 ? std::ldexp(std::fabs(v), -21) : 0.0;
        EXPECT_LE(std::fabs(g - v), tol) << "out[" << r << "," << j << "] = " << g << ", reference " << v;
        EXPECT_NE(v, 0.0);
      }
    }
  }
}

// Every E4M3 block-scale code (zero, subnormal, normal, the largest; some with the sign bit) through the quad
// engine's NVFP4 group multipliers, on the f32 path (W4A16) and the integer one (W4A4), fused and tiled rows.
TEST(X86Avx2Fp, Nvfp4EveryBlockScaleCode) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Nvfp4);
  for (const Scheme* s : {&kNvfp4A16, find_scheme("w4a4-nvfp4")}) {
    for (const int64_t m : {1, 7}) {
      const Case c{m, 48, 2048, DType::kBF16, DType::kF32, true};
      auto r = x86_test::run_with_edited_scales(x86::kAvx2Nvfp4, *s, c, 37, [&](uint8_t* e, int64_t count) {
        for (int64_t i = 0; i < count; ++i) {
          const bool sub = (i / (c.k / 16)) % 2 == 0;  // even columns: subnormal codes only
          e[i] = static_cast<uint8_t>((sub ? i % 8 : (i * 7) % 127) | (i % 5 == 0 ? 0x80 : 0));
        }
      });
      ASSERT_TRUE(r);
      SCOPED_TRACE(std::string(s->name) + " M=" + std::to_string(m));
      x86_test::expect_within_tolerance(r->ref_layer, r->x, nullptr, r->got, r->want, c, f32_sum_rel(c.k));
    }
  }
}

TEST(X86Avx2Fp, NanWeightCodeGivesNanColumn) {
  const LinearKernel& k = x86::kAvx2Fp8WeightOnly;
  QL_SKIP_UNLESS_SUPPORTED(k);
  LinearLayer layer = x86_test::make_layer(*find_scheme("w8a16-fp8"), {3, 20, 64}, 21);
  layer.params.at("weight").data<uint8_t>()[5 * 64 + 7] = 0xFF;
  ASSERT_TRUE(k.process_weights_after_loading(layer));
  auto y = k.apply(layer, Activation::dense(random_normal(DType::kBF16, {3, 64}, 22)));
  ASSERT_TRUE(y);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 20; ++j) EXPECT_EQ(std::isnan(element_as_double(*y, i * 20 + j)), j == 5) << i << "," << j;
  }
}

// NVFP4 activations whose global scale each call computes (kNvfp4DynamicGlobal: a layer made from a float
// model without calibration): the engine takes g from the whole activation as the reference quantizer does,
// and ignores a stored input_global_scale (make_layer stores one for this synthetic scheme).
TEST(X86Avx2Fp, Nvfp4DynamicGlobalScaleMatchesTheReference) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Nvfp4);
  const Scheme dynamic_global{"nvfp4-dynamic-global", Family::kNvfp4, kNvfp4Static, kNvfp4DynamicGlobal, ""};
  const std::vector<Case> cases = {{1, 64, 96}, {2, 67, 160, DType::kF32, DType::kF32, true},
                                   {17, 67, 96, DType::kF16, DType::kBF16, false, {16, 24, 27}}};
  uint64_t seed = 60;
  for (const Case& c : cases) x86_test::expect_matches_reference(x86::kAvx2Nvfp4, dynamic_global, c, ++seed, f32_sum_rel(c.k));
}

// Made without an input range, an NVFP4 layer stores no input global scale and clips nothing: activations
// of 1e4 (far beyond any default range) keep NVFP4's own error against the dense product.
TEST(X86Avx2Fp, Nvfp4WithoutInputRangeClipsNothing) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Nvfp4);
  MakeLayerOptions o;
  o.dynamic_input_global_scale = true;
  o.input_dtype = o.out_dtype = DType::kF32;
  const Tensor w = random_normal(DType::kF32, {64, 256}, 71, 0.1);
  LinearLayer layer = quantize_layer("nvfp4", *find_scheme("w4a4-nvfp4"), w, o).value();
  EXPECT_EQ(layer.params.count("input_global_scale"), 0u);
  EXPECT_TRUE(*layer.config.activation_key == kNvfp4DynamicGlobal);
  ASSERT_TRUE(x86::kAvx2Nvfp4.process_weights_after_loading(layer));
  Tensor x = random_normal(DType::kF32, {5, 256}, 72, 1e4);
  auto y = x86::kAvx2Nvfp4.apply(layer, Activation::dense(x));
  ASSERT_TRUE(y) << y.message();
  double num = 0, den = 0;
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 64; ++j) {
      double dense = 0;
      for (int64_t k = 0; k < 256; ++k) dense += double(x.data<float>()[i * 256 + k]) * w.data<float>()[j * 256 + k];
      const double d = element_as_double(*y, i * 64 + j) - dense;
      num += d * d;
      den += dense * dense;
    }
  }
  EXPECT_LT(std::sqrt(num / den), 0.2);  // NVFP4 weights and activations: about 0.14; clipped at 4: 0.99
}

TEST(X86Avx2Fp, InfiniteActivationIsAnErrorWhenQuantized) {
  const LinearKernel& k = x86::kAvx2Fp8ScaledMM;
  QL_SKIP_UNLESS_SUPPORTED(k);
  LinearLayer layer = x86_test::make_layer(*find_scheme("w8a8-fp8-channel"), {2, 16, 32}, 23);
  ASSERT_TRUE(k.process_weights_after_loading(layer));
  Tensor x = random_normal(DType::kF32, {2, 32}, 24);
  x.data<float>()[33] = INFINITY;
  auto y = k.apply(layer, Activation::dense(x));
  ASSERT_FALSE(y);
  EXPECT_NE(y.message().find("Inf or NaN"), std::string::npos) << y.message();
}

TEST(X86Avx2Fp, RejectsWhatItCannotDo) {
  Verdict v = x86::kAvx2Mxfp8.can_implement(make_config(*find_scheme("w4a16-mxfp4"), 64, 64));
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("family is mxfp4"), std::string::npos) << v.reason;
  CpuFeatures f;
  f.avx2 = true;
  f.fma = true;
  v = x86::kAvx2Mxfp8.is_supported(Platform::synthetic_cpu(f));
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("F16C"), std::string::npos) << v.reason;
  f.fma = false;
  v = x86::kAvx2Nvfp4.is_supported(Platform::synthetic_cpu(f));
  EXPECT_NE(v.reason.find("FMA"), std::string::npos) << v.reason;
  f.avx2 = false;
  v = x86::kAvx2Fp8ScaledMM.is_supported(Platform::synthetic_cpu(f));
  EXPECT_NE(v.reason.find("AVX2"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace qlinear
