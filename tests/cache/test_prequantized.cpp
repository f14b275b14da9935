// Pre-quantized activations end to end (activation_quant.hpp): for every kernel of the CPU priority list that
// declares an input key, on every scheme (and a fused layer with per-shard static scales), the activation
// quantized by the producer gives the same output, bit for bit, as the kernel's own dense-input path; a
// mismatched key is refused naming both keys; kernels without a key say so.
#include <algorithm>
#include <cmath>
#include <set>

#include "cache/cache_test_util.hpp"
#include "qlinear/activation_quant.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear {
namespace {

using cache_test::same_bytes;
using cache_test::scheme_layer;

TEST(PreQuantized, ProducerOutputEqualsDenseInputPathForEveryKernelThatDeclaresAKey) {
  const Platform host = Platform::host_cpu();
  int checked = 0, skipped_isa = 0;
  std::set<std::string> kernels_checked;
  for (const Scheme& s : all_schemes()) {
    for (bool fused : {false, true}) {
      const LinearLayer base = scheme_layer(s, 41, fused ? std::vector<int64_t>{16, 8, 16} : std::vector<int64_t>{});
      for (const LinearKernel* k : priority_list(host)) {
        if (k->family() != s.family || !k->can_implement(base.config)) continue;
        const std::optional<QuantKey> key = k->input_quant_key(base.config);
        if (!key) continue;
        SCOPED_TRACE(std::string(k->name()) + " " + std::string(s.name) + (fused ? " fused" : ""));
        if (!k->is_supported(host)) {
          ++skipped_isa;  // e.g. AVX-512 kernels on an AVX2 host
          continue;
        }
        EXPECT_EQ(*key, *s.activation_key) << "a kernel's input key is the scheme's activation key";
        LinearLayer layer = base;
        ASSERT_TRUE(k->process_weights_after_loading(layer));
        for (int64_t m : {1, 3, 17}) {
          const Tensor x = random_normal(base.config.input_dtype, {m, base.config.k}, 100 + m, 1.5);
          const Tensor bias = random_normal(DType::kF32, {base.config.n}, 7, 0.5);
          auto xq = quantize_activation_for(*k, layer, x);
          ASSERT_TRUE(xq) << xq.message();
          ASSERT_TRUE(xq->is_quantized());
          EXPECT_EQ(xq->quantized_tensor().key, *key);
          auto dense = k->apply(layer, Activation::dense(x), &bias);
          auto pre = k->apply(layer, *xq, &bias);
          ASSERT_TRUE(dense) << dense.message();
          ASSERT_TRUE(pre) << pre.message();
          EXPECT_TRUE(same_bytes(*dense, *pre)) << "M=" << m;
          ++checked;
        }
        kernels_checked.insert(std::string(k->name()));
      }
    }
  }
  // Every scheme with quantized activations on the reference, and the INT8 schemes on x86_avx2_int8 as well
  // (3 M x 2 layouts each).
  int act_schemes = 0, int8_schemes = 0;
  for (const Scheme& s : all_schemes()) {
    act_schemes += s.activation_key ? 1 : 0;
    int8_schemes += s.family == Family::kInt8ScaledMM ? 1 : 0;
  }
  EXPECT_GE(act_schemes, 8);
  const bool avx2 = find_kernel("x86_avx2_int8")->is_supported(host).ok;
  EXPECT_GE(checked, 3 * 2 * (act_schemes + (avx2 ? int8_schemes : 0)));  // more where AVX-512 VNNI runs too
  if (avx2) {
    EXPECT_TRUE(kernels_checked.count("x86_avx2_int8")) << "the AVX2 INT8 kernel declares its key";
  }
  std::printf("checked %d (kernel, scheme, M) cases on %zu kernels; %d kernel/scheme pairs need another ISA\n", checked,
              kernels_checked.size(), skipped_isa);
}

TEST(PreQuantized, MismatchedKeyIsRefusedNamingBothKeys) {
  const Platform host = Platform::host_cpu();
  const Scheme& dyn = *find_scheme("w8a8-int8-dynamic");
  const Scheme& stat = *find_scheme("w8a8-int8-static");
  for (const char* name : {"x86_avx2_int8", "reference_int8_scaled_mm"}) {
    const LinearKernel& k = *find_kernel(name);
    if (!k.is_supported(host)) continue;
    SCOPED_TRACE(name);
    LinearLayer layer = scheme_layer(dyn, 5);
    LinearLayer other = scheme_layer(stat, 5);
    ASSERT_TRUE(k.process_weights_after_loading(layer));
    const Tensor x = random_normal(DType::kBF16, {2, 256}, 1);
    auto xq = quantize_activation_for(k, other, x);  // made for the static layer
    ASSERT_TRUE(xq) << xq.message();
    auto y = k.apply(layer, *xq);
    ASSERT_FALSE(y);
    EXPECT_NE(y.message().find("pre-quantized activation key " + key_name(*stat.activation_key) +
                               " does not match the kernel's input_quant_key " + key_name(*dyn.activation_key)),
              std::string::npos)
        << y.message();
  }
}

TEST(PreQuantized, KernelsWithoutAKeyAndBadInputsAreErrors) {
  const Platform host = Platform::host_cpu();
  // A weight-only layer: no kernel takes quantized activations.
  const LinearLayer wo = scheme_layer(*find_scheme("w8a16-fp8"), 2);
  auto r = quantize_activation_for(*find_kernel("reference_fp8_weight_only"), wo, random_normal(DType::kBF16, {2, 256}, 1));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("takes no pre-quantized activations (the layer is weight-only)"), std::string::npos)
      << r.message();
  // A W8A8 layer on a kernel that quantizes dense input itself.
  const LinearLayer fp8 = scheme_layer(*find_scheme("w8a8-fp8-channel"), 2);
  const LinearKernel& avx2 = *find_kernel("x86_avx2_fp8_scaled_mm");
  r = quantize_activation_for(avx2, fp8, random_normal(DType::kBF16, {2, 256}, 1));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("kernel x86_avx2_fp8_scaled_mm, layer model.layers.0.test_w8a8-fp8-channel: the kernel "
                             "takes no pre-quantized activations (it quantizes dense input itself)"),
            std::string::npos)
      << r.message();
  // Wrong K, wrong dtype, a static key without its scale.
  const LinearKernel& ref = *find_kernel("reference_int8_scaled_mm");
  LinearLayer st = scheme_layer(*find_scheme("w8a8-int8-static"), 2);
  r = quantize_activation_for(ref, st, random_normal(DType::kBF16, {2, 128}, 1));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("must be [M, 256], got bf16[2, 128]"), std::string::npos) << r.message();
  r = quantize_activation_for(ref, st, Tensor::zeros(DType::kI32, {2, 256}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("dtype must be f32, bf16 or f16"), std::string::npos) << r.message();
  st.params.erase("input_scale");
  r = quantize_activation_for(ref, st, random_normal(DType::kBF16, {2, 256}, 1));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("input_scale"), std::string::npos) << r.message();
  (void)host;
}

// Given row maxima (a tensor-parallel row slice and its whole row's |x| max), through the host kernels'
// LinearKernel::quantize_input: with the rows' own maxima the codes and scales are the dynamic quantizer's,
// bit for bit, and so is the kernel's output; with larger maxima each row's scale follows the dynamic rule on
// them and the codes that coarser scale's.
TEST(PreQuantized, RowMaximaGiveTheDynamicQuantizersCodesOnTheirMaxima) {
  for (const char* scheme : {"w8a8-int8-dynamic", "w8a8-fp8-channel"}) {
    SCOPED_TRACE(scheme);
    const Scheme& s = *find_scheme(scheme);
    const LinearKernel& ref = *find_kernel(s.family == Family::kInt8ScaledMM ? "reference_int8_scaled_mm"
                                                                              : "reference_fp8_scaled_mm");
    LinearLayer layer = scheme_layer(s, 5);
    ASSERT_TRUE(ref.process_weights_after_loading(layer));
    const int64_t m = 7, k = layer.config.k;
    const Tensor x = random_normal(DType::kBF16, {m, k}, 31, 2.0);
    Tensor own = Tensor::empty(DType::kF32, {m}), doubled = Tensor::empty(DType::kF32, {m});
    for (int64_t r = 0; r < m; ++r) {
      float a = 0.0f;
      for (int64_t c = 0; c < k; ++c) {
        const float v = bf16_to_float(x.data<uint16_t>()[r * k + c]);
        a = std::max(a, std::fabs(v));
      }
      own.data<float>()[r] = a;
      doubled.data<float>()[r] = 2.0f * a;
    }
    auto dyn = quantize_activation_for(ref, layer, x);
    auto given = ref.quantize_input(layer, x, own);
    ASSERT_TRUE(dyn) << dyn.message();
    ASSERT_TRUE(given) << given.message();
    EXPECT_EQ(given->key, *s.activation_key);
    EXPECT_TRUE(same_bytes(dyn->quantized_tensor().data, given->data));
    EXPECT_TRUE(same_bytes(dyn->quantized_tensor().scale, given->scale));
    auto y_dense = ref.apply(layer, Activation::dense(x), nullptr);
    auto y_given = ref.apply(layer, Activation::quantized(*given, DType::kBF16), nullptr);
    ASSERT_TRUE(y_dense && y_given);
    EXPECT_TRUE(same_bytes(*y_dense, *y_given));
    // Twice the maxima: twice the scales (both rules are amax / max code, rounded to f32), and codes on that
    // coarser grid: INT8 exactly RNE(x / s), FP8 within E4M3's rounding of x / s.
    auto coarse = ref.quantize_input(layer, x, doubled);
    ASSERT_TRUE(coarse) << coarse.message();
    auto deq = dequantize(*coarse);
    ASSERT_TRUE(deq) << deq.message();
    for (int64_t r = 0; r < m; ++r) {
      const float sr = coarse->scale.data<float>()[r];
      EXPECT_EQ(sr, 2.0f * dyn->quantized_tensor().scale.data<float>()[r]) << "row " << r;
      for (int64_t c = 0; c < k; ++c) {
        const double v = bf16_to_float(x.data<uint16_t>()[r * k + c]);
        if (s.family == Family::kInt8ScaledMM) {
          ASSERT_EQ(coarse->data.data<int8_t>()[r * k + c], static_cast<int8_t>(std::nearbyint(v / sr)))
              << r << "," << c;
        } else {
          // half an E4M3 step: 2^-4 of a normal value, 2^-10 s below (subnormal steps of 2^-9 s)
          ASSERT_LE(std::fabs(deq->data<float>()[r * k + c] - v), std::max(std::fabs(v) * 0x1p-4, sr * 0x1p-10))
              << r << "," << c;
        }
      }
    }
  }
  // Another key, a wrong shape, a negative maximum: errors that say which.
  const LinearKernel& ref = *find_kernel("reference_int8_scaled_mm");
  LinearLayer st = scheme_layer(*find_scheme("w8a8-int8-static"), 2);
  ASSERT_TRUE(ref.process_weights_after_loading(st));
  auto r = ref.quantize_input(st, random_normal(DType::kBF16, {2, 256}, 1), Tensor::zeros(DType::kF32, {2}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("only dynamic per-token symmetric FP8 / INT8 activations take row maxima"),
            std::string::npos) << r.message();
  LinearLayer dy = scheme_layer(*find_scheme("w8a8-int8-dynamic"), 2);
  ASSERT_TRUE(ref.process_weights_after_loading(dy));
  r = ref.quantize_input(dy, random_normal(DType::kBF16, {2, 256}, 1), Tensor::zeros(DType::kF32, {3}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("the maxima f32 [2]"), std::string::npos) << r.message();
  Tensor neg = Tensor::zeros(DType::kF32, {2});
  neg.data<float>()[1] = -1.0f;
  r = ref.quantize_input(dy, random_normal(DType::kBF16, {2, 256}, 1), neg);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("row 1 has maximum"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace qlinear
