// Checkpoints written by AMD Quark's exporter for its OCP-MX recipes that quantize activations
// (tools/make_quark_mx_fixtures.py: mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp4_mxfp6_e2m3, mxfp4_fp8 on a one-layer
// Llama): qlinear reads each as its scheme, and every CPU kernel's output equals Quark's own fake-quant
// module (the same quantize-dequantize of weights and inputs, then an f32 linear) up to f32 summation order.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/random.hpp"
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

// Tensor parallelism over 2 ranks: column slices (q_proj) give the full output's columns, row slices
// (o_proj, K = 64: one MX block per rank) give partial sums that add up to the full output (each rank
// quantizes its own whole 32-blocks of the activation, the same blocks as the full row); a row split that
// would cut an MX block (down_proj, K = 96) is refused naming the block.
TEST(QuarkMx, TensorParallelSlicesAddUpToTheFullLayer) {
  for (const char* scheme : kSchemes) {
    SCOPED_TRACE(scheme);
    auto load = [&](int rank, int size, const std::string& regex) {
      LoadOptions o;
      o.fuse = false;
      o.out_dtype = DType::kF32;
      o.input_dtype = DType::kF32;
      o.tp_rank = rank;
      o.tp_size = size;
      o.layer_regex = regex;
      return load_checkpoint(kRoot + scheme, o);
    };
    auto run = [](const LoadedLayer& l, const Tensor& x) {
      LinearLayer layer = l.layer;
      const LinearKernel& k = *select_kernel(layer.config, Platform::host_cpu()).value();
      EXPECT_TRUE(k.process_weights_after_loading(layer));
      return k.apply(layer, Activation::dense(x), l.bias.defined() ? &l.bias : nullptr).value();
    };
    auto full = load(0, 1, "self_attn\\.(q|o)_proj$");
    ASSERT_TRUE(full) << full.message();
    const Tensor x = random_normal(DType::kF32, {3, 64}, 77, 1.0);
    for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"}) {
      const LoadedLayer* whole = find(*full, name);
      ASSERT_NE(whole, nullptr) << name;
      const Tensor want = run(*whole, x);
      const int64_t n = whole->layer.config.n;
      std::vector<double> got(static_cast<size_t>(3 * n), 0.0);
      for (int rank = 0; rank < 2; ++rank) {
        auto part = load(rank, 2, "self_attn\\.(q|o)_proj$");
        ASSERT_TRUE(part) << part.message();
        const LoadedLayer* l = find(*part, name);
        ASSERT_NE(l, nullptr);
        const bool column = l->parallelism == Parallelism::kColumn;
        const Tensor xr = column ? x : x.narrow(1, rank * 32, 32).value().contiguous();
        const Tensor y = run(*l, xr);
        const int64_t ln = l->layer.config.n;
        for (int64_t r = 0; r < 3; ++r) {
          for (int64_t c = 0; c < ln; ++c) got[r * n + (column ? rank * ln + c : c)] += y.data<float>()[r * ln + c];
        }
      }
      Tensor g = Tensor::empty(DType::kF32, {3, n});
      for (int64_t i = 0; i < 3 * n; ++i) g.data<float>()[i] = static_cast<float>(got[i]);
      EXPECT_LT(worst_row_err(g, want, 3, n), 80 * 0x1p-24) << name;
    }
    auto cut = load(0, 2, "mlp\\.down_proj$");
    ASSERT_FALSE(cut);
    EXPECT_NE(cut.message().find("1x32 scale block"), std::string::npos) << cut.message();
  }
}

}  // namespace
}  // namespace qlinear
