// Checkpoints written by AMD Quark's exporter for its OCP-MX recipes that quantize activations
// (tools/make_quark_mx_fixtures.py: mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp4_mxfp6_e2m3, mxfp4_fp8 on a one-layer
// Llama): qlinear reads each as its scheme, and every CPU kernel's output equals Quark's own fake-quant
// module (the same quantize-dequantize of weights and inputs, then an f32 linear) up to f32 summation order.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/registry.hpp"

namespace qlinear {
namespace {

const std::string kRoot = std::string(QLINEAR_TEST_DATA) + "/quark_mx/";
const char* const kSchemes[] = {"w4a4-mxfp4", "w6a6-mxfp6-e2m3", "w6a6-mxfp6-e3m2", "w4a6-mxfp4-mxfp6-e2m3",
                                "w4a8-mxfp4-fp8"};
const char* const kLayers[] = {"model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"};

const LoadedLayer* find(const LoadedModel& m, const std::string& name) {
  for (const LoadedLayer& l : m.layers) {
    if (l.layer.name == name) return &l;
  }
  return nullptr;
}

// max |got - want| / max |want| over the row: f32 sums of K products on both sides differ by about
// K * 2^-24 of the row's magnitude; a different scale rule or rounding shows as 1e-2 or more.
double worst_row_err(const Tensor& got, const Tensor& want, int64_t m, int64_t n) {
  double worst = 0;
  for (int64_t r = 0; r < m; ++r) {
    double mag = 0, err = 0;
    for (int64_t c = 0; c < n; ++c) {
      mag = std::max(mag, std::fabs(element_as_double(want, r * n + c)));
      err = std::max(err, std::fabs(element_as_double(got, r * n + c) - element_as_double(want, r * n + c)));
    }
    if (mag > 0) worst = std::max(worst, err / mag);
  }
  return worst;
}

TEST(QuarkMx, EveryRecipeLoadsAsItsSchemeAndMatchesQuarkFakeQuant) {
  for (const char* scheme : kSchemes) {
    SCOPED_TRACE(scheme);
    LoadOptions o;
    o.fuse = false;
    o.out_dtype = DType::kF32;
    o.input_dtype = DType::kF32;
    auto model = load_checkpoint(kRoot + scheme, o);
    ASSERT_TRUE(model) << model.message();
    auto expected = SafetensorsFile::open(kRoot + scheme + "/expected.safetensors");
    ASSERT_TRUE(expected) << expected.message();
    for (const char* name : kLayers) {
      const LoadedLayer* l = find(*model, name);
      ASSERT_NE(l, nullptr) << name;
      EXPECT_EQ(l->scheme->name, scheme);
      const Tensor x = expected->tensor(std::string(name) + ".x").value();
      const Tensor want = expected->tensor(std::string(name) + ".y").value();
      std::vector<const LinearKernel*> kernels = {&reference::kMxfp4, &reference::kMxfp6};
      auto chosen = select_kernel(l->layer.config, Platform::host_cpu());
      ASSERT_TRUE(chosen) << chosen.message();
      kernels.push_back(*chosen);
      for (const LinearKernel* k : kernels) {
        if (k->family() != l->layer.config.family) continue;
        LinearLayer layer = l->layer;
        ASSERT_TRUE(k->process_weights_after_loading(layer));
        auto y = k->apply(layer, Activation::dense(x), l->bias.defined() ? &l->bias : nullptr);
        ASSERT_TRUE(y) << y.message();
        const double err = worst_row_err(*y, want, x.size(0), layer.config.n);
        EXPECT_LT(err, static_cast<double>(layer.config.k + 16) * 0x1p-24) << name << " with " << k->name();
        if (std::getenv("QLINEAR_PRINT_ERR")) std::printf("%s %s %s %.3e\n", scheme, name, std::string(k->name()).c_str(), err);
      }
    }
  }
}

}  // namespace
}  // namespace qlinear
