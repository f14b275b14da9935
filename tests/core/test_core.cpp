// Tensors, keys, the family contract and the checks every kernel shares.
#include <gtest/gtest.h>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

namespace qlinear {
namespace {

TEST(Tensor, ShapesViewsAndCopies) {
  Tensor t = Tensor::zeros(DType::kF32, {4, 6});
  EXPECT_EQ(t.describe(), "f32[4, 6]");
  EXPECT_EQ(t.nbytes(), 96);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  for (int i = 0; i < 24; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor cols = t.narrow(1, 2, 3).value();
  EXPECT_FALSE(cols.is_contiguous());
  Tensor c = cols.contiguous();
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(c.data<float>()[0], 2.0f);
  EXPECT_EQ(c.data<float>()[3], 8.0f);
  EXPECT_FALSE(t.narrow(0, 3, 2));
  EXPECT_FALSE(t.reshape({5, 5}));
  EXPECT_EQ(t.reshape({24}).value().shape(), Shape{24});
  Tensor packed = Tensor::empty(DType::kU8, {2, storage_bytes(DType::kF6E2M3, 64)});
  EXPECT_EQ(packed.size(1), 48);
}

TEST(QuantKey, PrintsLikeVllmAndCompares) {
  EXPECT_EQ(kFp8DynamicTokenSym.to_string(), "QuantKey(f8e4m3fn,scale(f32,dynamic,per_token),symmetric)");
  EXPECT_EQ(key_name(kMxfp8Dynamic), "kMxfp8Dynamic");
  EXPECT_EQ(kMxfp8Dynamic.scale.group.to_string(), "1x32");
  EXPECT_FALSE(kMxfp8Static == kMxfp8Dynamic);
  EXPECT_FALSE(kInt8StaticTensorSym == kInt8StaticTensorAsym);
  EXPECT_TRUE(kFp8Dynamic128Sym.scale.group.is_per_group());
  EXPECT_FALSE(kFp8Static128BlockSym.scale.group.is_per_group());  // vLLM: a 128x128 block is not "per group"
  for (const NamedKey& k : named_keys()) EXPECT_EQ(key_name(k.key), k.name);
}

LinearConfig config(const char* scheme, int64_t n, int64_t k) { return make_config(*find_scheme(scheme), n, k); }

TEST(Contract, RejectsMalformedConfigsWithReasons) {
  struct Case {
    LinearConfig c;
    const char* reason;
  };
  LinearConfig wrong_weight = config("w8a8-mxfp8", 64, 64);
  wrong_weight.weight_key = kFp8StaticTensorSym;
  LinearConfig static_block = config("w8a8-fp8-block", 256, 256);
  static_block.activation_key = kFp8StaticTensorSym;
  LinearConfig a16_int8 = config("w8a8-int8-dynamic", 64, 64);
  a16_int8.activation_key.reset();
  LinearConfig out_i8 = config("w8a16-mxfp8", 64, 64);
  out_i8.out_dtype = DType::kI8;
  LinearConfig shards = config("w8a8-fp8-tensor", 64, 64);
  shards.logical_widths = {32, 16};
  LinearConfig bmm = config("w8a8-mxfp8", 64, 64);
  bmm.bmm_batch_size = 4;
  const Case cases[] = {
      {config("w8a8-mxfp8", 64, 100), "K=100 is not a multiple of 32 (MX block)"},
      {config("w6a16-mxfp6-e2m3", 64, 48), "K=48 is not a multiple of 32 (MX block)"},
      {config("w4a4-nvfp4", 64, 40), "K=40 is not a multiple of 16 (NVFP4 block)"},
      {config("w8a8-fp8-channel", 0, 64), "weight shape must be positive"},
      {wrong_weight, "mxfp8 weights must be one of {kMxfp8Static}, got kFp8StaticTensorSym"},
      {static_block, "only dynamic per-token-group activation quantization is supported"},
      {a16_int8, "int8_scaled_mm needs quantized activations"},
      {out_i8, "output dtype must be f32, bf16 or f16, got i8"},
      {shards, "fused shard widths sum to 48 but N=64"},
      {bmm, "batched (bmm) layers are not supported"},
  };
  for (const Case& c : cases) {
    const Verdict v = check_config(c.c);
    EXPECT_FALSE(v.ok) << c.reason;
    EXPECT_NE(v.reason.find(c.reason), std::string::npos) << "got: " << v.reason;
  }
  // And the edges that are fine: FP8 block and per-channel layers need no alignment.
  EXPECT_TRUE(check_config(config("w8a8-fp8-block", 300, 200)).ok);
  EXPECT_TRUE(check_config(config("w8a8-int8-static-asym", 7, 3)).ok);
}

LinearLayer make(const char* scheme, int64_t n, int64_t k) {
  return quantize_layer("test.layer", *find_scheme(scheme), random_normal(DType::kF32, {n, k}, 7, 0.1)).value();
}

TEST(Contract, ValidatesLayerTensorsByName) {
  LinearLayer l = make("w8a8-mxfp8", 32, 64);
  EXPECT_TRUE(validate_layer_tensors(l)) << validate_layer_tensors(l).message();
  l.params["weight_scale"] = Tensor::zeros(DType::kU8, {32, 3});
  Status s = validate_layer_tensors(l);
  EXPECT_NE(s.message().find("tensor 'weight_scale' is u8[32, 3], expected [32, 2]"), std::string::npos)
      << s.message();
  l.params.erase("weight_scale");
  EXPECT_NE(validate_layer_tensors(l).message().find("has no tensor 'weight_scale'"), std::string::npos);

  LinearLayer s8 = make("w8a8-int8-static-asym", 16, 32);
  s8.params["input_zero_point"] = Tensor::zeros(DType::kF32, {1});
  EXPECT_NE(validate_layer_tensors(s8).message().find("'input_zero_point' is f32[1], expected i32 [1]"),
            std::string::npos);
  LinearLayer w = make("w6a16-mxfp6-e3m2", 8, 64);
  w.params["weight"] = Tensor::zeros(DType::kU8, {8, 64});
  EXPECT_NE(validate_layer_tensors(w).message().find("expected u8[8, 48]"), std::string::npos);
}

TEST(Kernel, ApplyChecksEverythingItIsGiven) {
  LinearLayer l = make("w8a8-mxfp8", 32, 64);
  const LinearKernel& k = reference::kMxfp8;
  Tensor x = random_normal(DType::kBF16, {3, 64}, 1);
  EXPECT_NE(k.apply(l, Activation::dense(x)).message().find("not processed"), std::string::npos);
  ASSERT_TRUE(k.process_weights_after_loading(l));
  EXPECT_NE(k.process_weights_after_loading(l).message().find("already processed by reference_mxfp8"),
            std::string::npos);
  EXPECT_NE(reference::kMxfp4.apply(l, Activation::dense(x)).message().find("processed by reference_mxfp8"),
            std::string::npos);
  EXPECT_NE(k.apply(l, Activation::dense(random_normal(DType::kBF16, {3, 63}, 1))).message().find(
                "activation has K=63 columns, the layer expects K=64"),
            std::string::npos);
  Tensor bad_out = Tensor::empty(DType::kF32, {3, 32});
  EXPECT_NE(k.apply(l, Activation::dense(x), nullptr, bad_out).message().find("output must be a contiguous bf16[3, 32]"),
            std::string::npos);
  Tensor bias = Tensor::zeros(DType::kF32, {31});
  EXPECT_NE(k.apply(l, Activation::dense(x), &bias).message().find("bias must be f32/bf16/f16 [32]"),
            std::string::npos);
  // A pre-quantized activation made with another key is refused, naming both keys.
  auto q = quantize(x, kMxfp4Dynamic).value();
  EXPECT_NE(k.apply(l, Activation::quantized(q, DType::kBF16)).message().find(
                "key kMxfp4Dynamic does not match the kernel's input_quant_key kMxfp8Dynamic"),
            std::string::npos);
  // An empty batch is fine and produces an empty output.
  auto empty = k.apply(l, Activation::dense(Tensor::empty(DType::kBF16, {0, 64})));
  ASSERT_TRUE(empty) << empty.message();
  EXPECT_EQ(empty->shape(), (Shape{0, 32}));
}

}  // namespace
}  // namespace qlinear
