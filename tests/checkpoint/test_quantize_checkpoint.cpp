// The streaming quantizer (quantize_checkpoint.hpp): quantize_layer writes the reference quantizer's
// tensors byte for byte for every scheme; a model directory comes out complete (shards within the size
// limit, the index, config.json with quantization_config, carried files), loads, and holds exactly what
// quantize_layer makes; no staged file is left; temporaries of dead writers are removed by the next write.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/staged_files.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/quantize_checkpoint.hpp"
#include "qlinear/random.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "qlinear-quantize-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

MakeLayerOptions layer_options() {
  MakeLayerOptions o;
  o.input_min = -3.0f;
  o.input_max = 3.0f;
  return o;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what << ": " << a.describe() << " vs " << b.describe();
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  EXPECT_EQ(std::memcmp(ca.raw(), cb.raw(), static_cast<size_t>(ca.nbytes())), 0) << what;
}

// quantize_layer (quantize_fast underneath) writes the reference quantizer's weight tensors, byte for byte,
// for every scheme: row counts over several work items, ending in a partial 128-row block.
void expect_reference_weights(const Scheme& s, const Tensor& w, const MakeLayerOptions& o) {
  auto layer = quantize_layer("l", s, w, o);
  QuantizeOptions q;
  q.mx_rule = o.mx_rule;
  auto ref = quantize(w, s.weight_key, q);
  ASSERT_EQ(static_cast<bool>(layer), static_cast<bool>(ref)) << (layer ? ref.message() : layer.message());
  if (!ref) return;
  expect_same_tensor(layer->params.at("weight"), ref->data, "weight");
  expect_same_tensor(layer->params.at("weight_scale"), ref->scale, "weight_scale");
  if (ref->scale2.defined()) expect_same_tensor(layer->params.at("weight_global_scale"), ref->scale2, "global");
}

TEST(QuantizeLayer, WeightsEqualTheReferenceQuantizerForEveryScheme) {
  const Tensor w = random_normal(DType::kBF16, {2048 + 300, 512}, 7, 0.05);
  for (const Scheme& s : all_schemes()) {
    SCOPED_TRACE(std::string(s.name));
    expect_reference_weights(s, w, layer_options());
  }
}

// One magnitude far above the rest, late in the weight: per-tensor scales come from the whole weight.
TEST(QuantizeLayer, PerTensorScaleComesFromTheWholeWeight) {
  Tensor w = random_normal(DType::kF32, {1500, 768}, 3, 0.02).contiguous();
  w.data<float>()[1400 * 768 + 5] = -40.0f;
  for (const char* name : {"w8a8-fp8-tensor", "w4a4-nvfp4"}) {
    const Scheme* s = find_scheme(name);
    ASSERT_NE(s, nullptr) << name;
    SCOPED_TRACE(name);
    expect_reference_weights(*s, w, layer_options());
  }
}

// A Llama-like model of 2 layers at SmolLM2-135M's widths, BF16, with files beside the weights.
void write_model(const std::string& dir) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint64_t seed = 1;
  auto add = [&](const std::string& name, Shape shape) {
    tensors.emplace_back(name, random_normal(DType::kBF16, std::move(shape), seed++, 0.05));
  };
  add("model.embed_tokens.weight", {1000, 576});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {576});
    add(p + "self_attn.q_proj.weight", {576, 576});
    add(p + "self_attn.k_proj.weight", {192, 576});
    add(p + "self_attn.v_proj.weight", {192, 576});
    add(p + "self_attn.o_proj.weight", {576, 576});
    add(p + "mlp.gate_proj.weight", {1536, 576});
    add(p + "mlp.up_proj.weight", {1536, 576});
    add(p + "mlp.down_proj.weight", {576, 1536});
  }
  add("model.norm.weight", {576});
  add("odd.bias", {3});  // 6 bytes: written at a shard's end
  add("lm_head.weight", {1000, 576});
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", tensors));
  std::ofstream(dir + "/config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 576,
      "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
      "num_hidden_layers": 2, "vocab_size": 1000})";
  std::ofstream(dir + "/tokenizer.json") << R"({"version": "1.0"})";
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": 2})";
}

TEST(QuantizeCheckpoint, WritesACompleteShardedModelDirectoryThatLoads) {
  ScratchDir tmp;
  const std::string in = tmp / "in", out = tmp / "out";
  write_model(in);
  const Scheme* scheme = find_scheme("w8a16-fp8");
  ASSERT_NE(scheme, nullptr);
  QuantizeCheckpointOptions o;
  o.layer = layer_options();
  o.max_shard_bytes = 2'000'000;
  std::vector<std::string> seen;
  o.on_tensor = [&](const std::string& name, uint64_t) { seen.push_back(name); };
  auto summary = quantize_checkpoint(in, out, *scheme, o);
  ASSERT_TRUE(summary) << summary.message();
  auto input = Checkpoint::open(in);
  ASSERT_TRUE(input);
  EXPECT_EQ(seen.size(), input->names().size());
  EXPECT_EQ(summary->quantized, 14u);
  EXPECT_EQ(summary->copied, 6u);  // embed, lm_head, 3 norms, the bias
  EXPECT_GT(summary->shards, 1u);
  // Files: shards, index, config, carried files; nothing hidden left.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
  for (const std::string& f : files) {
    EXPECT_NE(f[0], '.') << "left behind: " << f;
    if (f.ends_with(".safetensors")) {
      EXPECT_LE(fs::file_size(out + "/" + f), o.max_shard_bytes) << f;
    }
  }
  for (const char* f : {"config.json", "tokenizer.json", "generation_config.json", "model.safetensors.index.json"}) {
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  }
  std::ifstream cfg(out + "/config.json");
  const auto config = nlohmann::json::parse(cfg);
  EXPECT_EQ(config["hidden_size"], 576);
  EXPECT_EQ(config["quantization_config"]["quant_method"], "compressed-tensors");
  EXPECT_EQ(config["quantization_config"]["ignore"], nlohmann::json({"lm_head", "model.embed_tokens"}));
  // Every tensor: quantized ones as quantize_layer makes them, the rest byte for byte.
  auto output = Checkpoint::open(out);
  ASSERT_TRUE(output) << output.message();
  for (const std::string& name : input->names()) {
    const Tensor w = input->tensor(name).value();
    const std::string module = name.substr(0, name.size() - 7);
    if (name.ends_with("_proj.weight")) {
      auto layer = quantize_layer(module, *scheme, w, o.layer);
      ASSERT_TRUE(layer);
      for (const auto& [p, t] : layer->params) expect_same_tensor(output->tensor(module + "." + p).value(), t, name + " " + p);
    } else {
      expect_same_tensor(output->tensor(name).value(), w, name);
    }
  }
  auto model = load_checkpoint(out);
  ASSERT_TRUE(model) << model.message();
  EXPECT_EQ(model->layers.size(), 8u);  // qkv, o, gate_up, down per layer
}

TEST(QuantizeCheckpoint, OneShardIsModelSafetensorsAndAFullOutputIsRefused) {
  ScratchDir tmp;
  const std::string in = tmp / "in", out = tmp / "out";
  write_model(in);
  auto summary = quantize_checkpoint(in, out, *find_scheme("w4a16-mxfp4"), {});
  ASSERT_TRUE(summary) << summary.message();
  EXPECT_EQ(summary->shards, 1u);
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  auto again = quantize_checkpoint(in, out, *find_scheme("w4a16-mxfp4"), {});
  ASSERT_FALSE(again);
  EXPECT_NE(again.message().find(out + " exists and is not empty"), std::string::npos) << again.message();
}

TEST(StagedFiles, DeadWritersTemporariesAreRemovedByTheNextWrite) {
  EXPECT_EQ(detail::temporary_owner(".model.safetensors.tmp.1234.0"), 1234);
  EXPECT_EQ(detail::temporary_owner(".config.json.77.3.staged"), 77);
  EXPECT_EQ(detail::temporary_owner("model.safetensors"), 0);
  EXPECT_EQ(detail::temporary_owner(".hidden.1.2"), 0);  // neither ".tmp.<pid>.<n>" nor ".staged"
  ScratchDir tmp;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // its pid is free now (and very unlikely to be reused within the test)
  const std::string dead = std::to_string(child);
  const std::string stale1 = ".model.safetensors.tmp." + dead + ".0", stale2 = ".config.json." + dead + ".4.staged";
  const std::string live = ".model.safetensors.tmp.1.0";  // pid 1 exists
  for (const std::string& f : {stale1, stale2, live, std::string(".not-ours")}) std::ofstream(tmp / f) << "x";
  ASSERT_TRUE(write_safetensors(tmp / "model.safetensors", {{"t", Tensor::zeros(DType::kF32, {2})}}));
  EXPECT_FALSE(fs::exists(tmp / stale1));
  EXPECT_FALSE(fs::exists(tmp / stale2));
  EXPECT_TRUE(fs::exists(tmp / live));
  EXPECT_TRUE(fs::exists(tmp / ".not-ours"));
}

}  // namespace
}  // namespace qlinear
