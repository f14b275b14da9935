// Checkpoints written by the official Python packages (tools/make_fixtures.py: llm-compressor and
// compressed-tensors quantizing MiniLM's first encoder layer): qlinear loads them, its dequantized
// weights equal compressed-tensors' own dequantization, and its layer outputs match torch's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/registry.hpp"

namespace qlinear {
namespace {

const std::string kRoot = std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/";
const std::string kQuery = "encoder.layer.0.attention.self.query";
const std::string kIntermediate = "encoder.layer.0.intermediate.dense";

std::vector<std::string> fixtures() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kRoot)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

const LoadedLayer* find(const LoadedModel& m, const std::string& name) {
  for (const LoadedLayer& l : m.layers) {
    if (l.layer.name == name) return &l;
  }
  return nullptr;
}

double rel_err(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = element_as_double(got, i) - element_as_double(want, i);
    num += d * d;
    den += element_as_double(want, i) * element_as_double(want, i);
  }
  return std::sqrt(num / den);
}

TEST(Fixtures, AllSchemesThePackagesWriteArePresent) {
  EXPECT_GE(fixtures().size(), 11u);
}

TEST(Fixtures, DequantizedWeightsEqualCompressedTensors) {
  for (const std::string& f : fixtures()) {
    SCOPED_TRACE(f);
    LoadOptions o;
    o.fuse = false;
    auto model = load_checkpoint(kRoot + f, o);
    ASSERT_TRUE(model) << model.message();
    EXPECT_EQ(model->layers.size(), 6u);
    EXPECT_EQ(model->layers[0].scheme->name, f);  // the directory is named after the scheme
    auto expected = SafetensorsFile::open(kRoot + f + "/expected.safetensors");
    ASSERT_TRUE(expected) << expected.message();
    const Tensor want = expected->tensor(kQuery + ".dequantized_weight").value();  // bf16 [384, 384]
    const LoadedLayer* q = find(*model, kQuery);
    ASSERT_NE(q, nullptr);
    const Tensor got = reference::dequantized_weight(q->layer).value();  // exact, f64
    // compressed-tensors dequantizes into the model dtype (bf16): round ours once, RNE, and compare codes.
    int64_t mismatches = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const uint32_t ours = encode(DType::kBF16, got.data<double>()[i]);
      const uint16_t theirs = want.data<uint16_t>()[i];
      // NVFP4: compressed-tensors divides the block scale by the global scale in f32 before multiplying,
      // a second rounding; allow one bf16 ulp there and nowhere else.
      const int64_t ulps = std::llabs(static_cast<int64_t>(ours) - theirs);
      if (ulps > (f == "w4a4-nvfp4" ? 1 : 0)) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(Fixtures, LayerOutputsMatchTorch) {
  for (const std::string& f : fixtures()) {
    SCOPED_TRACE(f);
    LoadOptions o;
    o.fuse = false;
    o.out_dtype = DType::kF32;
    o.input_dtype = DType::kF32;
    auto model = load_checkpoint(kRoot + f, o);
    ASSERT_TRUE(model) << model.message();
    auto expected = SafetensorsFile::open(kRoot + f + "/expected.safetensors").value();
    for (const std::string& name : {kQuery, kIntermediate}) {
      const LoadedLayer* l = find(*model, name);
      ASSERT_NE(l, nullptr);
      const Tensor x = expected.tensor(name + ".x").value();
      // y: torch's decompressed module (bf16-rounded weights, unquantized input); y_input_qdq adds the
      // packages' own input fake-quantization. qlinear quantizes inputs as vLLM does, so compare with that.
      const bool has_qdq = expected.has(name + ".y_input_qdq");
      const Tensor want = expected.tensor(name + (has_qdq ? ".y_input_qdq" : ".y")).value();
      LinearLayer layer = l->layer;
      const LinearKernel& k = *select_kernel(layer.config, Platform::host_cpu()).value();
      ASSERT_TRUE(k.process_weights_after_loading(layer));
      auto y = k.apply(layer, Activation::dense(x), l->bias.defined() ? &l->bias : nullptr);
      ASSERT_TRUE(y) << y.message();
      // Bounds from the numerics: MX weights dequantize exactly on both sides (only f32 summation order
      // differs); FP8/INT8/NVFP4 weights are rounded to bf16 by the packages (2^-9 relative per element,
      // ~1.5e-3 on outputs); compressed-tensors' dynamic per-token INT8 QDQ rounds activations differently
      // from vLLM's kernels (measured 8.4e-3), so it gets its own bound.
      const double bound = l->scheme->family == Family::kMxfp8 || l->scheme->family == Family::kMxfp4 ? 1e-6
                           : f == "w8a8-int8-dynamic"                                                   ? 1.2e-2
                                                                                                        : 4e-3;
      EXPECT_LT(rel_err(*y, want), bound) << name << " with " << k.name();
      if (std::getenv("QLINEAR_PRINT_ERR")) std::printf("%s %s %.3e\n", f.c_str(), name.c_str(), rel_err(*y, want));
    }
  }
}

}  // namespace
}  // namespace qlinear
