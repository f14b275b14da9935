// Quantization configs as llm-compressor (compressed-tensors) and AMD Quark write them into config.json:
// parsing, layer matching (ignore / exclude lists, regex targets, fused layers) and scheme resolution.
// The compressed-tensors texts follow compressed-tensors' presets (quant_scheme.py, 0.20) serialized the way
// config.json holds them (sorted keys); the older ones keep the null fields earlier versions wrote.
#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/quant_config_internal.hpp"
#include "qlinear/quant_config.hpp"

namespace qlinear {
namespace {

// A config.json around a quantization_config.
std::string config_json(const std::string& quantization_config) {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "model_type": "llama",
             "torch_dtype": "bfloat16", "quantization_config": )" +
         quantization_config + "}";
}

QuantConfig parse_ok(const std::string& quantization_config) {
  Result<QuantConfig> r = parse_quant_config(config_json(quantization_config), "config.json");
  EXPECT_TRUE(r.is_ok()) << r.message();
  return r.is_ok() ? r.value() : QuantConfig{};
}

// Every piece must appear in the error message.
void expect_error(const Status& s, std::initializer_list<std::string> pieces) {
  ASSERT_FALSE(s.is_ok()) << "expected an error containing \"" << *pieces.begin() << "\"";
  for (const std::string& p : pieces) EXPECT_NE(s.message().find(p), std::string::npos) << "missing \"" << p << "\" in: " << s.message();
}

void expect_parse_error(const std::string& quantization_config, std::initializer_list<std::string> pieces) {
  expect_error(parse_quant_config(config_json(quantization_config), "config.json").status(), pieces);
}

// The scheme name for a layer, "ignored", or the error.
std::string scheme_of(const QuantConfig& c, const std::string& layer, std::vector<std::string> shards = {}) {
  Result<const Scheme*> r = scheme_for_layer(c, layer, shards);
  if (!r.is_ok()) return "error: " + r.message();
  return r.value() ? std::string(r.value()->name) : "ignored";
}

// `text` with the first `from` replaced by `to` (a variation of a real config).
std::string replaced(const std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "\"" << from << "\" not in the config";
  return at == std::string::npos ? text : text.substr(0, at) + to + text.substr(at + from.size());
}

// ---- compressed-tensors configs as llm-compressor writes them ------------------------------------------

// FP8 preset (static per-tensor weights and input), older compressed-tensors: nulls written out.
const char* kFp8 = R"({
  "config_groups": {
    "group_0": {
      "input_activations": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null,
        "num_bits": 8, "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor", "symmetric": true,
        "type": "float"},
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null, "num_bits": 8,
        "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor", "symmetric": true, "type": "float"}
    }
  },
  "format": "float-quantized",
  "global_compression_ratio": 1.463543865167781,
  "ignore": ["lm_head"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {}
})";

// FP8_DYNAMIC preset (per-channel weights, dynamic per-token input), compressed-tensors 0.12+.
const char* kFp8Dynamic = R"({
  "config_groups": {
    "group_0": {
      "format": "float-quantized",
      "input_activations": {"dynamic": true, "group_size": null, "num_bits": 8, "strategy": "token",
        "symmetric": true, "type": "float"},
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"dynamic": false, "group_size": null, "num_bits": 8, "observer": "memoryless_minmax",
        "strategy": "channel", "symmetric": true, "type": "float"}
    }
  },
  "format": "float-quantized",
  "global_compression_ratio": null,
  "ignore": ["lm_head"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {},
  "transform_config": {},
  "version": "0.12.2"
})";

// FP8_BLOCK preset (128x128 weight blocks, dynamic 1x128 input groups), a MoE model's ignore list.
const char* kFp8Block = R"({
  "config_groups": {
    "group_0": {
      "format": "float-quantized",
      "input_activations": {"dynamic": true, "group_size": 128, "num_bits": 8, "strategy": "group",
        "symmetric": true, "type": "float"},
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"block_structure": [128, 128], "dynamic": false, "group_size": null, "num_bits": 8,
        "observer": "static_minmax", "strategy": "block", "symmetric": true, "type": "float"}
    }
  },
  "format": "float-quantized",
  "ignore": ["lm_head", "re:.*mlp.gate$"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed"
})";

// W8A8 preset (INT8 per-channel weights, dynamic per-token input; SmoothQuant + GPTQ recipes).
const char* kInt8Dynamic = R"({
  "config_groups": {
    "group_0": {
      "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
        "num_bits": 8, "observer": null, "observer_kwargs": {}, "strategy": "token", "symmetric": true,
        "type": "int"},
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null, "num_bits": 8,
        "observer": "minmax", "observer_kwargs": {}, "strategy": "channel", "symmetric": true, "type": "int"}
    }
  },
  "format": "int-quantized",
  "global_compression_ratio": 1.2,
  "ignore": ["lm_head"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed"
})";

// INT8 with a calibrated (static) per-tensor input scale; `symmetric` toggles the zero point.
std::string int8_static(bool input_symmetric) {
  return std::string(R"({
  "config_groups": {
    "group_0": {
      "input_activations": {"dynamic": false, "num_bits": 8, "observer": "minmax", "strategy": "tensor",
        "symmetric": )") + (input_symmetric ? "true" : "false") + R"(, "type": "int"},
      "targets": ["Linear"],
      "weights": {"dynamic": false, "num_bits": 8, "strategy": "channel", "symmetric": true, "type": "int"}
    }
  },
  "format": "int-quantized",
  "ignore": ["lm_head"],
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed"
})";
}

// NVFP4 preset (the weights' 1x16 E4M3 scales, "local" dynamic input), older serialization.
const char* kNvfp4 = R"({
  "config_groups": {
    "group_0": {
      "input_activations": {"actorder": null, "block_structure": null, "dynamic": "local", "group_size": 16,
        "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor_group",
        "symmetric": true, "type": "float"},
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 16, "num_bits": 4,
        "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor_group", "symmetric": true,
        "type": "float"}
    }
  },
  "format": "nvfp4-pack-quantized",
  "global_compression_ratio": null,
  "ignore": ["lm_head"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed"
})";

// NVFP4A16 preset (weights only), compressed-tensors 0.20: scale_dtype written.
const char* kNvfp4A16 = R"({
  "config_groups": {
    "group_0": {
      "format": "nvfp4-pack-quantized",
      "input_activations": null,
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"dynamic": false, "group_size": 16, "num_bits": 4, "scale_dtype": "torch.float8_e4m3fn",
        "strategy": "tensor_group", "symmetric": true, "type": "float"}
    }
  },
  "format": "nvfp4-pack-quantized",
  "ignore": ["lm_head"],
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "version": "0.20.1"
})";

// MXFP4A16 / MXFP4 presets: E8M0 scales written as torch.uint8.
std::string mxfp4(bool with_input) {
  std::string input = with_input ? R"({"dynamic": true, "group_size": 32, "num_bits": 4, "scale_dtype": "torch.uint8",
        "strategy": "group", "symmetric": true, "type": "float"})"
                                 : "null";
  return R"({
  "config_groups": {
    "group_0": {
      "format": "mxfp4-pack-quantized",
      "input_activations": )" +
         input + R"(,
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"dynamic": false, "group_size": 32, "num_bits": 4, "scale_dtype": "torch.uint8",
        "strategy": "group", "symmetric": true, "type": "float"}
    }
  },
  "format": "mxfp4-pack-quantized",
  "ignore": ["lm_head"],
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "version": "0.20.1"
})";
}

// MXFP8 / MXFP8A16 presets.
std::string mxfp8(bool with_input) {
  std::string input = with_input ? R"({"dynamic": true, "group_size": 32, "num_bits": 8, "scale_dtype": "torch.uint8",
        "strategy": "group", "symmetric": true, "type": "float"})"
                                 : "null";
  return R"({
  "config_groups": {
    "group_0": {
      "format": "mxfp8-quantized",
      "input_activations": )" +
         input + R"(,
      "output_activations": null,
      "targets": ["Linear"],
      "weights": {"dynamic": false, "group_size": 32, "num_bits": 8, "scale_dtype": "torch.uint8",
        "strategy": "group", "symmetric": true, "type": "float"}
    }
  },
  "format": "mxfp8-quantized",
  "ignore": ["lm_head"],
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed"
})";
}

// MXFP6A16 preset (compressed-tensors' FP6 is E2M3).
const char* kMxfp6A16 = R"({
  "config_groups": {
    "group_0": {
      "format": "mxfp6-pack-quantized",
      "targets": ["Linear"],
      "weights": {"dynamic": false, "group_size": 32, "num_bits": 6, "scale_dtype": "torch.uint8",
        "strategy": "group", "symmetric": true, "type": "float"}
    }
  },
  "format": "mxfp6-pack-quantized",
  "ignore": ["lm_head"],
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed"
})";

// ---- Quark OCP-MX configs (Quark 0.11 exports) ----------------------------------------------------------

// One Quark QuantizationSpec the way Quark exports it.
std::string quark_spec(const std::string& dtype, const std::string& qscheme, bool dynamic,
                       const std::string& extra = "") {
  bool mx = qscheme == "per_group";
  return R"({"dtype": ")" + dtype + R"(", "is_dynamic": )" + (dynamic ? "true" : "false") + R"(, "qscheme": ")" +
         qscheme + R"(", "ch_axis": )" + (mx ? "-1" : qscheme == "per_channel" ? "0" : "null") +
         R"(, "group_size": )" + (mx ? "32" : "null") + R"(, "symmetric": )" + (mx ? "null" : "true") +
         R"(, "round_method": "half_even", "scale_type": "float", "scale_format": )" + (mx ? "\"e8m0\"" : "null") +
         R"(, "scale_calculation_mode": )" + (mx ? "\"even\"" : "null") + R"(, "mx_element_dtype": null,
         "observer_cls": ")" + (mx ? "PerBlockMXObserver" : "PerTensorMinMaxObserver") +
         R"(", "is_scale_quant": false)" + extra + "}";
}

std::string quark_layer(const std::string& weight, const std::string& input, const std::string& output = "null") {
  return R"({"input_tensors": )" + input + R"(, "output_tensors": )" + output + R"(, "weight": )" + weight +
         R"(, "bias": null, "target_device": null})";
}

std::string quark_config(const std::string& global, const std::string& layer_quant_config = "{}",
                         const std::string& exclude = R"(["lm_head"])", const std::string& kv_cache_group = "[]") {
  return R"({
  "quant_method": "quark",
  "global_quant_config": )" +
         global + R"(,
  "layer_quant_config": )" +
         layer_quant_config + R"(,
  "layer_type_quant_config": {},
  "kv_cache_quant_config": {},
  "kv_cache_post_rope": false,
  "exclude": )" +
         exclude + R"(,
  "algo_config": null,
  "softmax_quant_spec": null,
  "quant_mode": "eager_mode",
  "version": "0.11",
  "export": {"kv_cache_group": )" +
         kv_cache_group + R"(, "min_kv_scale": 0.0, "pack_method": "reorder", "weight_format": "real_quantized",
             "weight_merge_groups": null}
})";
}

// ---- Parsing ----------------------------------------------------------------------------------------------

TEST(QuantConfigParse, Fp8OlderSerialization) {
  QuantConfig c = parse_ok(kFp8);
  EXPECT_EQ(c.quant_method, QuantMethod::kCompressedTensors);
  EXPECT_EQ(c.source, "config.json");
  EXPECT_EQ(c.format, "float-quantized");
  EXPECT_EQ(c.quantization_status, "compressed");
  EXPECT_EQ(c.ignore, std::vector<std::string>{"lm_head"});
  ASSERT_EQ(c.config_groups.size(), 1u);
  const ConfigGroup& g = c.config_groups[0];
  EXPECT_EQ(g.name, "group_0");
  EXPECT_EQ(g.targets, std::vector<std::string>{"Linear"});
  EXPECT_EQ(g.format, "float-quantized");
  EXPECT_FALSE(g.format_from_group);
  ASSERT_TRUE(g.weights && g.input_activations);
  EXPECT_FALSE(g.output_activations);
  EXPECT_EQ(g.weights->num_bits, 8);
  EXPECT_EQ(g.weights->type, QuantType::kFloat);
  EXPECT_EQ(g.weights->strategy, QuantStrategy::kTensor);
  EXPECT_EQ(g.weights->observer, "minmax");
  EXPECT_EQ(g.weights->to_string(), "float8 tensor static sym");
  EXPECT_EQ(c.find_group("group_0"), &g);
  EXPECT_EQ(c.find_group("group_1"), nullptr);
}

TEST(QuantConfigParse, FieldsAsWritten) {
  QuantConfig block = parse_ok(kFp8Block);
  const ConfigGroup& b = block.config_groups[0];
  EXPECT_TRUE(b.format_from_group);
  ASSERT_TRUE(b.weights->block_structure);
  EXPECT_EQ((*b.weights->block_structure)[0], 128);
  EXPECT_EQ((*b.weights->block_structure)[1], 128);
  EXPECT_EQ(b.weights->to_string(), "float8 block128x128 static sym");
  EXPECT_EQ(b.input_activations->to_string(), "float8 group128 dynamic sym");

  QuantConfig nv = parse_ok(kNvfp4);
  EXPECT_EQ(nv.config_groups[0].input_activations->dynamic, DynamicMode::kLocal);
  EXPECT_EQ(nv.config_groups[0].input_activations->to_string(), "float4 tensor_group16 dynamic=local sym");

  QuantConfig mx = parse_ok(mxfp8(true));
  EXPECT_EQ(mx.config_groups[0].weights->scale_dtype, "torch.uint8");
  EXPECT_EQ(mx.config_groups[0].weights->to_string(), "float8 group32 static sym scale=torch.uint8");

  QuantConfig asym = parse_ok(int8_static(false));
  EXPECT_EQ(asym.config_groups[0].input_activations->to_string(), "int8 tensor static asym");
}

TEST(QuantConfigParse, StrategyInferredFromGroupSize) {
  // compressed-tensors infers the strategy when it is absent: no group_size -> tensor, -1 -> channel, >0 -> group.
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"a": {"targets": ["re:.*a$"], "weights": {"num_bits": 4, "group_size": 128}},
                      "b": {"targets": ["re:.*b$"], "weights": {"num_bits": 8, "group_size": -1}},
                      "c": {"targets": ["re:.*c$"], "weights": {"num_bits": 8}}}})");
  EXPECT_EQ(c.config_groups[0].weights->strategy, QuantStrategy::kGroup);
  EXPECT_EQ(c.config_groups[1].weights->strategy, QuantStrategy::kChannel);
  EXPECT_EQ(c.config_groups[2].weights->strategy, QuantStrategy::kTensor);
  EXPECT_EQ(c.config_groups[2].weights->type, QuantType::kInt);  // CT's default type
}

TEST(QuantConfigParse, PresetNameExpandsLikeCompressedTensors) {
  QuantConfig preset = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"FP8_DYNAMIC": ["Linear"]}, "ignore": ["lm_head"]})");
  QuantConfig written = parse_ok(kFp8Dynamic);
  const ConfigGroup& p = preset.config_groups[0];
  const ConfigGroup& w = written.config_groups[0];
  EXPECT_EQ(p.targets, w.targets);
  EXPECT_EQ(p.weights->to_string(), w.weights->to_string());
  EXPECT_EQ(p.input_activations->to_string(), w.input_activations->to_string());
  EXPECT_EQ(scheme_of(preset, "model.layers.0.mlp.down_proj"), "w8a8-fp8-channel");
  EXPECT_EQ(scheme_of(parse_ok(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "config_groups": {"nvfp4": ["Linear"]}})"), "model.layers.0.mlp.down_proj"), "w4a4-nvfp4");
}

TEST(QuarkConfigParse, OcpMxExport) {
  QuantConfig c = parse_ok(quark_config(quark_layer(quark_spec("fp4", "per_group", false), quark_spec("fp4", "per_group", true))));
  EXPECT_EQ(c.quant_method, QuantMethod::kQuark);
  EXPECT_EQ(c.exclude, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(c.pack_method, "reorder");
  ASSERT_TRUE(c.global_quant_config && c.global_quant_config->quark);
  const QuarkLayerConfig& q = *c.global_quant_config->quark;
  ASSERT_EQ(q.weight.size(), 1u);
  EXPECT_EQ(q.weight[0].dtype, "fp4");
  EXPECT_EQ(q.weight[0].qscheme, "per_group");
  EXPECT_EQ(q.weight[0].group_size, 32);
  EXPECT_EQ(q.weight[0].scale_format, "e8m0");
  EXPECT_FALSE(q.weight[0].symmetric.has_value());  // null
  EXPECT_EQ(q.weight[0].other.at("observer_cls"), "\"PerBlockMXObserver\"");
  EXPECT_EQ(q.weight[0].to_string(), "fp4 per_group32 static scale=e8m0");
  EXPECT_EQ(q.input_tensors[0].to_string(), "fp4 per_group32 dynamic scale=e8m0");
  EXPECT_TRUE(q.output_tensors.empty());
  EXPECT_EQ(c.find_group("global_quant_config"), &*c.global_quant_config);
}

TEST(QuarkConfigParse, KvCacheGroupMovesOutputSpecsOut) {
  // vLLM takes the KV cache spec from the kv_cache_group layers' output_tensors and clears them (and q_proj's).
  std::string fp8 = quark_spec("fp8_e4m3", "per_tensor", false);
  std::string layer_cfg = std::string(R"({"*k_proj": )") + quark_layer(fp8, fp8, fp8) + R"(, "*v_proj": )" +
                          quark_layer(fp8, fp8, fp8) + R"(, "*q_proj": )" + quark_layer(fp8, fp8, fp8) + "}";
  QuantConfig c = parse_ok(quark_config(quark_layer(fp8, fp8), layer_cfg, R"(["lm_head"])", R"(["*k_proj", "*v_proj"])"));
  ASSERT_TRUE(c.kv_cache_spec);
  EXPECT_EQ(c.kv_cache_spec->dtype, "fp8_e4m3");
  EXPECT_EQ(c.kv_cache_group, (std::vector<std::string>{"*k_proj", "*v_proj"}));
  for (const ConfigGroup& g : c.layer_quant_config) EXPECT_TRUE(g.quark->output_tensors.empty()) << g.name;
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.qkv_proj", {"q_proj", "k_proj", "v_proj"}), "w8a8-fp8-tensor");
}

// ---- Every scheme resolves -----------------------------------------------------------------------------

struct Case {
  std::string name;
  std::string config;
  std::string layer;
  std::string expected;
};

std::vector<Case> resolving_cases() {
  const std::string fp8_tensor = quark_spec("fp8_e4m3", "per_tensor", false);
  const std::string int8_channel = quark_spec("int8", "per_channel", false);
  auto quark_int8_input = [](const std::string& qscheme, bool dynamic, bool sym) {
    return R"({"dtype": "int8", "qscheme": ")" + qscheme + R"(", "is_dynamic": )" + (dynamic ? "true" : "false") +
           R"(, "symmetric": )" + (sym ? "true" : "false") + R"(, "ch_axis": null, "group_size": null})";
  };
  const std::string nvfp4_w = std::string(R"([{"dtype": "fp4", "qscheme": "per_group", "group_size": 16, "is_dynamic": false},
     {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": false}])");
  const std::string nvfp4_i = std::string(R"([{"dtype": "fp4", "qscheme": "per_group", "group_size": 16, "is_dynamic": true},
     {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": false}])");
  const std::string layer = "model.layers.0.mlp.down_proj";
  return {
      {"ct FP8", kFp8, layer, "w8a8-fp8-tensor"},
      {"ct FP8_DYNAMIC", kFp8Dynamic, layer, "w8a8-fp8-channel"},
      {"ct FP8_BLOCK", kFp8Block, layer, "w8a8-fp8-block"},
      {"ct W8A8", kInt8Dynamic, layer, "w8a8-int8-dynamic"},
      {"ct INT8 static", int8_static(true), layer, "w8a8-int8-static"},
      {"ct INT8 static asym", int8_static(false), layer, "w8a8-int8-static-asym"},
      {"ct NVFP4", kNvfp4, layer, "w4a4-nvfp4"},
      {"ct MXFP4A16", mxfp4(false), layer, "w4a16-mxfp4"},
      {"ct MXFP4 (vLLM runs it weight-only)", mxfp4(true), layer, "w4a16-mxfp4"},
      {"ct MXFP8", mxfp8(true), layer, "w8a8-mxfp8"},
      {"ct MXFP8A16", mxfp8(false), layer, "w8a16-mxfp8"},
      {"ct MXFP6A16", kMxfp6A16, layer, "w6a16-mxfp6-e2m3"},
      {"ct FP8 weight-only", R"({"quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
        "strategy": "channel", "symmetric": true, "dynamic": false}}}})",
       layer, "w8a16-fp8"},
      {"quark MXFP4 weight-only", quark_config(quark_layer(quark_spec("fp4", "per_group", false), "null")), layer,
       "w4a16-mxfp4"},
      {"quark MXFP6 E2M3", quark_config(quark_layer(quark_spec("fp6_e2m3", "per_group", false), "null")), layer,
       "w6a16-mxfp6-e2m3"},
      {"quark MXFP6 E3M2", quark_config(quark_layer(quark_spec("fp6_e3m2", "per_group", false), "null")), layer,
       "w6a16-mxfp6-e3m2"},
      {"quark W4A4 MXFP4", quark_config(quark_layer(quark_spec("fp4", "per_group", false), quark_spec("fp4", "per_group", true))),
       layer, "w4a4-mxfp4"},
      {"quark W6A6 MXFP6 E2M3", quark_config(quark_layer(quark_spec("fp6_e2m3", "per_group", false), quark_spec("fp6_e2m3", "per_group", true))),
       layer, "w6a6-mxfp6-e2m3"},
      {"quark W6A6 MXFP6 E3M2", quark_config(quark_layer(quark_spec("fp6_e3m2", "per_group", false), quark_spec("fp6_e3m2", "per_group", true))),
       layer, "w6a6-mxfp6-e3m2"},
      {"quark W4A6 MXFP4 + MXFP6 E2M3", quark_config(quark_layer(quark_spec("fp4", "per_group", false), quark_spec("fp6_e2m3", "per_group", true))),
       layer, "w4a6-mxfp4-mxfp6-e2m3"},
      {"quark MXFP4 + static FP8", quark_config(quark_layer(quark_spec("fp4", "per_group", false), fp8_tensor)), layer,
       "w4a8-mxfp4-fp8"},
      {"quark MXFP8", quark_config(quark_layer(quark_spec("fp8_e4m3", "per_group", false), quark_spec("fp8_e4m3", "per_group", true))),
       layer, "w8a8-mxfp8"},
      {"quark MXFP8 vLLM spelling", quark_config(quark_layer(quark_spec("mxfp8_e4m3", "per_group", false), "null")), layer,
       "w8a16-mxfp8"},
      {"quark FP8 per-tensor", quark_config(quark_layer(fp8_tensor, fp8_tensor)), layer, "w8a8-fp8-tensor"},
      {"quark FP8 PTPC", quark_config(quark_layer(quark_spec("fp8_e4m3", "per_channel", false), quark_spec("fp8_e4m3", "per_channel", true))),
       layer, "w8a8-fp8-channel"},
      {"quark INT8 static", quark_config(quark_layer(int8_channel, quark_int8_input("per_tensor", false, true))), layer,
       "w8a8-int8-static"},
      {"quark INT8 static asym", quark_config(quark_layer(int8_channel, quark_int8_input("per_tensor", false, false))), layer,
       "w8a8-int8-static-asym"},
      {"quark INT8 dynamic", quark_config(quark_layer(int8_channel, quark_int8_input("per_channel", true, true))), layer,
       "w8a8-int8-dynamic"},
      {"quark NVFP4", quark_config(quark_layer(nvfp4_w, nvfp4_i)), layer, "w4a4-nvfp4"},
  };
}

TEST(QuantConfigResolve, EveryCaseResolves) {
  for (const Case& c : resolving_cases()) {
    SCOPED_TRACE(c.name);
    QuantConfig config = parse_ok(c.config);
    EXPECT_EQ(scheme_of(config, c.layer), c.expected);
  }
}

TEST(QuantConfigResolve, EverySchemeIsReachedFromAConfig) {
  std::set<std::string> reached;
  for (const Case& c : resolving_cases()) reached.insert(c.expected);
  for (const Scheme& s : all_schemes()) {
    EXPECT_TRUE(reached.count(std::string(s.name))) << "no config in resolving_cases() resolves to " << s.name
                                                    << ": add the compressed-tensors or Quark config that produces it";
  }
}

// ---- Matching: ignore lists, regex targets, fused layers ------------------------------------------------

TEST(QuantConfigMatch, IgnoreListExactAndRegex) {
  QuantConfig c = parse_ok(kFp8Block);  // ignore: lm_head, re:.*mlp.gate$
  EXPECT_EQ(scheme_of(c, "lm_head"), "ignored");
  EXPECT_EQ(scheme_of(c, "model.layers.3.mlp.gate"), "ignored");  // the MoE router
  EXPECT_EQ(scheme_of(c, "model.layers.3.mlp.gate_up_proj", {"gate_proj", "up_proj"}), "w8a8-fp8-block");
  EXPECT_EQ(scheme_of(c, "model.layers.3.mlp.experts.0.down_proj"), "w8a8-fp8-block");
}

TEST(QuantConfigMatch, RegexIsAnchoredAtTheStartOnly) {
  // vLLM uses re.match: anchored at the start, free at the end.
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "ignore": ["re:mlp", "re:model\\.layers\\.1\\."],
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}})");
  EXPECT_EQ(scheme_of(c, "model.layers.0.mlp.down_proj"), "w8a8-fp8-channel");  // "re:mlp" needs a leading "mlp"
  EXPECT_EQ(scheme_of(c, "mlp.down_proj"), "ignored");
  EXPECT_EQ(scheme_of(c, "model.layers.1.self_attn.o_proj"), "ignored");
  EXPECT_EQ(scheme_of(c, "model.layers.10.self_attn.o_proj"), "w8a8-fp8-channel");
}

TEST(QuantConfigMatch, FusedLayerIgnoredOnlyWhenAllShardsAre) {
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "ignore": ["lm_head", "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
               "model.layers.0.self_attn.v_proj", "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
               "model.layers.2.self_attn.qkv_proj"],
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}})");
  const std::vector<std::string> qkv = {"q_proj", "k_proj", "v_proj"};
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.qkv_proj", qkv), "ignored");
  // Full shard names work as well as leaf names.
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.qkv_proj",
                      {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"}),
            "ignored");
  // compressed-tensors' shortcut: the fused name itself in the list.
  EXPECT_EQ(scheme_of(c, "model.layers.2.self_attn.qkv_proj", qkv), "ignored");
  EXPECT_EQ(scheme_of(c, "model.layers.3.self_attn.qkv_proj", qkv), "w8a8-fp8-tensor");
  expect_error(match_layer(c, "model.layers.1.self_attn.qkv_proj", qkv).status(),
               {"config.json: layer model.layers.1.self_attn.qkv_proj: the ignore list skips "
                "model.layers.1.self_attn.q_proj, model.layers.1.self_attn.k_proj but not model.layers.1.self_attn.v_proj",
                "must all be quantized or all be skipped"});
}

TEST(QuantConfigMatch, NameTargetsBeatClassTargets) {
  // Mixed precision: attention in FP8 (by regex), the rest INT8 (by class), an NVFP4 group by exact name,
  // and an attention-only group (KV cache) that never matches a linear layer.
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "mixed-precision", "ignore": ["lm_head"],
    "config_groups": {
      "group_0": {"format": "int-quantized", "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true}},
      "group_1": {"format": "float-quantized", "targets": ["re:.*self_attn\\..*_proj$"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true}},
      "group_2": {"format": "nvfp4-pack-quantized", "targets": ["model.layers.5.mlp.down_proj"],
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
        "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"}},
      "group_3": {"targets": ["LlamaAttention"],
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}})");
  EXPECT_TRUE(c.config_groups[3].attention_only);
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.o_proj"), "w8a8-fp8-block");
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.qkv_proj", {"q_proj", "k_proj", "v_proj"}), "w8a8-fp8-block");
  EXPECT_EQ(scheme_of(c, "model.layers.0.mlp.down_proj"), "w8a8-int8-dynamic");
  EXPECT_EQ(scheme_of(c, "model.layers.5.mlp.down_proj"), "w4a4-nvfp4");
  Result<const ConfigGroup*> g = match_layer(c, "model.layers.0.mlp.up_proj");
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(g.value()->name, "group_0");
}

TEST(QuantConfigMatch, ModuleClassTargets) {
  // A plain target matches when it is a case-insensitive part of the module's class name (vLLM's check).
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["RowParallelLinear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}})");
  EXPECT_TRUE(match_layer(c, "model.layers.0.mlp.down_proj", {}, "RowParallelLinear").is_ok());
  expect_error(match_layer(c, "model.layers.0.mlp.down_proj").status(),
               {"config.json: layer model.layers.0.mlp.down_proj matches no target of any config group"});
  QuantConfig lower = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})");
  EXPECT_EQ(scheme_of(lower, "model.layers.0.mlp.down_proj"), "w8a16-fp8");
  EXPECT_TRUE(match_layer(lower, "model.layers.0.mlp.down_proj", {}, "QKVParallelLinear").is_ok());
}

TEST(QuantConfigMatch, FusedShardsByName) {
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {
      "group_0": {"targets": ["re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$", "re:.*gate_proj$"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}},
      "group_1": {"targets": ["re:.*\\.up_proj$"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}})");
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.qkv_proj", {"q_proj", "k_proj", "v_proj"}), "w8a8-fp8-tensor");
  expect_error(match_layer(c, "model.layers.0.mlp.gate_up_proj", std::vector<std::string>{"gate_proj", "up_proj"}).status(),
               {"config.json: layer model.layers.0.mlp.gate_up_proj: it and its shards fall in different groups",
                "model.layers.0.mlp.gate_proj in group_0", "model.layers.0.mlp.up_proj in group_1"});
}

TEST(QuantConfigMatch, ShardsMustShareTheFusedLayersGroup) {
  // qkv_proj matches "Linear" by class, but its q_proj shard is in another group: refused, not mixed.
  QuantConfig c = parse_ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {
      "group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}},
      "group_1": {"targets": ["re:.*\\.q_proj$"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}})");
  EXPECT_EQ(scheme_of(c, "model.layers.0.self_attn.q_proj"), "w8a8-fp8-tensor");
  EXPECT_EQ(scheme_of(c, "model.layers.0.mlp.gate_up_proj", {"gate_proj", "up_proj"}), "w8a16-fp8");
  expect_error(match_layer(c, "model.layers.0.self_attn.qkv_proj", std::vector<std::string>{"q_proj", "k_proj", "v_proj"}).status(),
               {"config.json: layer model.layers.0.self_attn.qkv_proj: it and its shards fall in different groups "
                "(model.layers.0.self_attn.qkv_proj in group_0, model.layers.0.self_attn.q_proj in group_1)"});
}

TEST(QuantConfigNames, FnmatchAndRegexLikePython) {
  using quant_config_detail::equal_or_regex_match;
  using quant_config_detail::fnmatch;
  EXPECT_TRUE(fnmatch("*k_proj", "model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(fnmatch("*k_proj", "model.layers.0.self_attn.k_proj.weight"));
  EXPECT_TRUE(fnmatch("*layers.?.mlp*", "model.layers.3.mlp.down_proj"));
  EXPECT_FALSE(fnmatch("*layers.?.mlp*", "model.layers.13.mlp.down_proj"));
  EXPECT_TRUE(fnmatch("*.[qkv]_proj", "model.layers.3.self_attn.v_proj"));
  EXPECT_FALSE(fnmatch("*.[!qkv]_proj", "model.layers.3.self_attn.v_proj"));
  EXPECT_TRUE(fnmatch("*.[0-2].*", "model.layers.1.mlp"));
  EXPECT_FALSE(fnmatch("*.[0-2].*", "model.layers.7.mlp"));
  EXPECT_TRUE(fnmatch("lm_head", "lm_head"));
  EXPECT_TRUE(fnmatch("*", ""));
  EXPECT_TRUE(equal_or_regex_match("model.layers.0.mlp.gate", "re:.*mlp\\.gate$"));
  EXPECT_FALSE(equal_or_regex_match("model.layers.0.mlp.gate_proj", "re:.*mlp\\.gate$"));
  EXPECT_TRUE(equal_or_regex_match("model.layers.0.mlp.gate_proj", "re:model"));  // re.match: prefix
  EXPECT_FALSE(equal_or_regex_match("model.layers.0.mlp.gate_proj", "re:layers"));
  EXPECT_FALSE(equal_or_regex_match("model.layers.0.mlp.gate_proj", "model.layers.0.mlp"));  // exact
}

TEST(QuarkConfigMatch, ExcludeLayerPatternsAndShards) {
  const std::string e3m2 = quark_layer(quark_spec("fp6_e3m2", "per_group", false), "null");
  const std::string e2m3 = quark_layer(quark_spec("fp6_e2m3", "per_group", false), "null");
  const std::string layers = std::string(R"({"*self_attn*": )") + e2m3 + R"(, "model.layers.7.mlp.down_proj": )" + e2m3 +
                             R"(, "*layers.9.mlp.up_proj": )" + quark_layer(quark_spec("fp4", "per_group", false), "null") + "}";
  QuantConfig c = parse_ok(quark_config(e3m2, layers, R"(["lm_head", "re:.*mlp\\.gate$"])"));
  EXPECT_EQ(scheme_of(c, "lm_head"), "ignored");
  EXPECT_EQ(scheme_of(c, "model.layers.1.mlp.gate"), "ignored");
  EXPECT_EQ(scheme_of(c, "model.layers.1.self_attn.o_proj"), "w6a16-mxfp6-e2m3");
  EXPECT_EQ(scheme_of(c, "model.layers.1.self_attn.qkv_proj", {"q_proj", "k_proj", "v_proj"}), "w6a16-mxfp6-e2m3");
  EXPECT_EQ(scheme_of(c, "model.layers.7.mlp.down_proj"), "w6a16-mxfp6-e2m3");  // no '*': vLLM's `name in pattern`
  EXPECT_EQ(scheme_of(c, "model.layers.8.mlp.down_proj"), "w6a16-mxfp6-e3m2");  // global
  EXPECT_EQ(scheme_of(c, "model.layers.8.mlp.gate_up_proj", {"gate_proj", "up_proj"}), "w6a16-mxfp6-e3m2");
  expect_error(match_layer(c, "model.layers.9.mlp.gate_up_proj", std::vector<std::string>{"gate_proj", "up_proj"}).status(),
               {"config.json: layer model.layers.9.mlp.gate_up_proj: its shards are quantized differently",
                "model.layers.9.mlp.gate_proj by global_quant_config", "model.layers.9.mlp.up_proj by *layers.9.mlp.up_proj"});
  expect_error(match_layer(parse_ok(quark_config(e3m2, "{}", R"(["model.layers.0.mlp.gate_proj"])")),
                           "model.layers.0.mlp.gate_up_proj", std::vector<std::string>{"gate_proj", "up_proj"})
                   .status(),
               {"the exclude list skips model.layers.0.mlp.gate_proj but not model.layers.0.mlp.up_proj"});
}

TEST(QuarkConfigMatch, OnlineRotationIsRefused) {
  std::string cfg = quark_config(quark_layer(quark_spec("fp4", "per_group", false), "null"));
  cfg = replaced(cfg, R"("algo_config": null)",
                 R"("algo_config": [{"name": "rotation", "online_config": {"online_rotation_layers": ["model.layers.0.mlp.down_proj"]}, "rotation_size": 32}])");
  QuantConfig c = parse_ok(cfg);
  expect_error(match_layer(c, "model.layers.0.mlp.down_proj").status(),
               {"config.json: layer model.layers.0.mlp.down_proj: algo_config asks for an online rotation"});
  EXPECT_EQ(scheme_of(c, "model.layers.0.mlp.up_proj"), "w4a16-mxfp4");
}

// ---- Bad configs: each error names the file, the place and what was expected ---------------------------

// A one-group compressed-tensors config whose weights args are `weights`.
std::string ct_weights(const std::string& weights) {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + weights + "}}}";
}

TEST(QuantConfigErrors, DocumentLevel) {
  expect_error(parse_quant_config(R"({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})", "/ckpt/config.json").status(),
               {"/ckpt/config.json: no \"quantization_config\""});
  expect_error(parse_quant_config(R"({"quantization_config": {"quant_method": "fp8",)", "config.json").status(),
               {"config.json: invalid JSON"});
  expect_parse_error(R"({"quant_method": "gptq", "bits": 4})",
                     {"config.json: quantization_config.quant_method: \"gptq\" is not supported"});
  expect_parse_error(R"({"config_groups": {}})", {"quantization_config.quant_method: missing"});
}

TEST(QuantConfigErrors, ArgsTypes) {
  expect_parse_error(ct_weights(R"({"num_bits": "8", "type": "float"})"),
                     {"config.json: quantization_config.config_groups.group_0.weights.num_bits: expected an integer, got \"8\" (string)"});
  expect_parse_error(ct_weights(R"({"num_bits": 8.0, "type": "float"})"),
                     {"group_0.weights.num_bits: expected an integer, got 8.0 (number)"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "double"})"),
                     {"group_0.weights.type: expected \"int\" or \"float\", got \"double\""});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "symmetric": "yes"})"),
                     {"group_0.weights.symmetric: expected true or false, got \"yes\" (string)"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "strategy": "rows"})"),
                     {"group_0.weights.strategy: unknown strategy \"rows\" (expected one of tensor, channel, group, block, "
                      "token, tensor_group, attn_head)"});
  expect_parse_error(ct_weights(R"({"bits": 8, "type": "float"})"),
                     {"group_0.weights: unknown field \"bits\" (expected: num_bits, type,"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "dynamic": "yes"})"),
                     {"group_0.weights.dynamic: expected true, false or \"local\", got \"yes\""});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "scale_dtype": "torch.float9"})"),
                     {"group_0.weights.scale_dtype: \"torch.float9\" is not a torch dtype"});
  expect_parse_error(ct_weights("[8]"), {"group_0.weights: expected an object (QuantizationArgs), got [8] (array)"});
}

TEST(QuantConfigErrors, ArgsRules) {
  expect_parse_error(ct_weights(R"({"num_bits": 5, "type": "float"})"),
                     {"group_0.weights.num_bits: float quantization has 4, 6 or 8 bits, got 5"});
  expect_parse_error(ct_weights(R"({"num_bits": 4, "type": "float", "strategy": "group"})"),
                     {"group_0.weights.group_size: strategy group needs a positive group_size, got none"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "strategy": "channel", "group_size": 128})"),
                     {"group_0.weights.group_size: group_size 128 needs strategy group or tensor_group, not channel"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "strategy": "token"})"),
                     {"group_0.weights.dynamic: strategy token needs dynamic=true"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "strategy": "block"})"),
                     {"group_0.weights.block_structure: strategy block needs a block_structure [rows, cols]"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128]})"),
                     {"group_0.weights.block_structure: expected [rows, cols] of positive integers, got [128] (array)"});
  expect_parse_error(ct_weights(R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "actorder": "group"})"),
                     {"group_0.weights.actorder: actorder \"group\" (g_idx reordering) was removed"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": "local"})"),
                     {"group_0.weights.dynamic: dynamic \"local\" needs strategy tensor_group, not channel"});
  expect_parse_error(ct_weights(R"({"num_bits": 8, "type": "int", "strategy": "channel", "dynamic": true})"),
                     {"group_0.weights.dynamic: dynamic quantization needs strategy token, tensor, tensor_group or group, not channel"});
}

TEST(QuantConfigErrors, GroupsAndLists) {
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}})",
                     {"config.json: quantization_config.config_groups.group_0.targets: expected a non-empty list"});
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})",
                     {"group_0.input_activations.strategy: strategy channel is not supported for activations"});
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}},
                      "group_1": {"targets": ["re:.*proj$", "Linear"], "weights": {"num_bits": 8, "type": "int"}}}})",
                     {"group_1.targets: target \"Linear\" is also in group group_0"});
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "fp8-quantized", "config_groups": {}})",
                     {"quantization_config.format: unknown format \"fp8-quantized\" (expected one of dense,"});
  expect_parse_error(R"j({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["re:(?<=x)proj"],
    "config_groups": {}})j",
                     {"quantization_config.ignore[0]: regex \"(?<=x)proj\" uses a lookbehind"});
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"W4A16": ["Linear"]}})",
                     {"config_groups.W4A16: a list of targets needs a preset scheme name", "\"W4A16\" is not one qlinear knows"});
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {},
    "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4", "targets": ["Linear"]}})",
                     {"quantization_config.sparsity_config.format: sparse checkpoints (\"sparse-24-bitmask\") are not supported"});
  expect_parse_error(R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {},
    "transform_config": {"config_groups": {"v": {"type": "hadamard"}}}})",
                     {"quantization_config.transform_config: online transforms (rotations) are not supported"});
}

TEST(QuarkConfigErrors, Parse) {
  std::string no_export = quark_config(quark_layer(quark_spec("fp4", "per_group", false), "null"));
  no_export = no_export.substr(0, no_export.find(R"(,
  "export")")) + "}";
  expect_parse_error(no_export, {"config.json: quantization_config.export: expected the export object of a Quark model"});

  std::string typed = quark_config(quark_layer(quark_spec("fp4", "per_group", false), "null"));
  typed = replaced(typed, R"("layer_type_quant_config": {})", R"("layer_type_quant_config": {"Linear": null})");
  expect_parse_error(typed, {"quantization_config.layer_type_quant_config: per-module-type configs are not supported"});

  expect_parse_error(quark_config(quark_layer(R"({"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": "no"})", "null")),
                     {"quantization_config.global_quant_config.weight.is_dynamic: expected true or false, got \"no\""});
  expect_parse_error(quark_config(quark_layer(R"({"dtype": "fp4", "qscheme": "per_row"})", "null")),
                     {"global_quant_config.weight.qscheme: unknown qscheme \"per_row\""});
  expect_parse_error(quark_config(quark_layer(R"({"qscheme": "per_tensor"})", "null")),
                     {"global_quant_config.weight.dtype: missing"});
  expect_parse_error(quark_config(R"({"weight": null, "activation": null})"),
                     {"global_quant_config: unknown field \"activation\""});
}

TEST(QuantConfigErrors, NoSchemeForTheArgs) {
  const std::string layer = "model.layers.0.mlp.down_proj";
  // NVFP4 weight-only: vLLM's CompressedTensorsW4A16Fp4; qlinear has no w4a16-nvfp4 scheme.
  std::string nv = scheme_of(parse_ok(kNvfp4A16), layer);
  for (const char* piece : {"config.json: layer model.layers.0.mlp.down_proj (group group_0)", "kNvfp4Static",
                            "CompressedTensorsW4A16Fp4", "it would be \"w4a16-nvfp4\"",
                            "weights float4 tensor_group16 static sym scale=torch.float8_e4m3fn, input none",
                            "Schemes qlinear has: w8a8-fp8-tensor, w8a8-fp8-channel"}) {
    EXPECT_NE(nv.find(piece), std::string::npos) << piece << " in " << nv;
  }
  auto fp8 = [](const std::string& w_strategy, const std::string& input) {
    return R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
      "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": ")" + w_strategy + R"("},
      "input_activations": )" + input + "}}}";
  };
  // The combinations vLLM accepts that have no scheme yet.
  EXPECT_NE(scheme_of(parse_ok(fp8("channel", R"({"num_bits": 8, "type": "float", "strategy": "tensor"})")), layer)
                .find("no qlinear scheme runs weights kFp8StaticChannelSym with input kFp8StaticTensorSym (vLLM: CompressedTensorsW8A8Fp8)"),
            std::string::npos);
  // Per-tensor weights with a dynamic per-token input run as per-channel weights (the loader repeats the scale).
  EXPECT_EQ(scheme_of(parse_ok(fp8("tensor", R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})")), layer),
            "w8a8-fp8-channel");
  EXPECT_NE(scheme_of(parse_ok(fp8("tensor", R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": false})")), layer)
                .find("a static FP8 input must be per-tensor and symmetric"),
            std::string::npos);
  // NVFP4 weights with an FP8 input.
  EXPECT_NE(scheme_of(parse_ok(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}})"), layer)
                .find("NVFP4 weights need NVFP4 input"),
            std::string::npos);
  // W4A16 INT (GPTQ / AWQ exports): vLLM's WNA16.
  EXPECT_NE(scheme_of(parse_ok(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "actorder": "weight"}}}})"), layer)
                .find("integer weight-only quantization is vLLM's CompressedTensorsWNA16"),
            std::string::npos);
  // Fake-quantized (dense) storage.
  std::string dense = kFp8;
  dense = replaced(dense, "\"float-quantized\"", "\"dense\"");
  EXPECT_NE(scheme_of(parse_ok(dense), layer).find("format \"dense\" does not store the quantized layout"), std::string::npos);
  // INT8 per-tensor weights run as per-channel weights (vLLM's convert_to_channelwise).
  std::string int8_tensor = int8_static(true);
  int8_tensor = replaced(int8_tensor, "\"strategy\": \"channel\"", "\"strategy\": \"tensor\"");
  EXPECT_EQ(scheme_of(parse_ok(int8_tensor), layer), "w8a8-int8-static");
}

TEST(QuarkConfigErrors, NoSchemeForTheSpecs) {
  const std::string layer = "model.layers.0.mlp.down_proj";
  // Dynamic MX input by a scale rule other than Quark's "even": refused with the rule named.
  const std::string floor_rule = replaced(quark_spec("fp4", "per_group", true), R"("scale_calculation_mode": "even")",
                                          R"("scale_calculation_mode": "floor")");
  const std::string floor_msg =
      scheme_of(parse_ok(quark_config(quark_layer(quark_spec("fp4", "per_group", false), floor_rule))), layer);
  for (const char* piece : {"config.json: layer model.layers.0.mlp.down_proj (group global_quant_config)",
                            "input scale_calculation_mode \"floor\"", "by Quark's \"even\" rule only"}) {
    EXPECT_NE(floor_msg.find(piece), std::string::npos) << piece << " in " << floor_msg;
  }
  EXPECT_NE(scheme_of(parse_ok(quark_config(quark_layer(quark_spec("fp6_e3m2", "per_group", false),
                                                        quark_spec("fp8_e4m3", "per_group", true)))),
                      layer)
                .find("it would be \"w6a8-mxfp6-e3m2\""),
            std::string::npos);

  std::string mx_group64 = quark_spec("fp4", "per_group", false);
  mx_group64 = replaced(mx_group64, "\"group_size\": 32", "\"group_size\": 64");
  EXPECT_NE(scheme_of(parse_ok(quark_config(quark_layer(mx_group64, "null"))), layer).find("no qlinear format stores these weights"),
            std::string::npos);
  EXPECT_NE(scheme_of(parse_ok(quark_config(quark_layer(quark_spec("fp8_e4m3", "per_tensor", false), "null",
                                                        quark_spec("fp8_e4m3", "per_tensor", false)))),
                      layer)
                .find("output_tensors and bias quantization are not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace qlinear
