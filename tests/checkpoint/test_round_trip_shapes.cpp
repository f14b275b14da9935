// Every writer produces what the loader accepts: each scheme quantized by quantize_checkpoint (what `qlinear
// quantize` runs) over the decoder layer shapes of real models, then loaded, and `qlinear inspect` and
// `qlinear run` over the result (every layer's kernel output checked against the reference kernel on the
// same quantized weights). q/k/v and gate/up always fuse; shards whose row counts are not multiples of a
// 128-row weight block keep their own block grids (ScaleRowGrid).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_run.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/quantize_checkpoint.hpp"
#include "qlinear/random.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

namespace fs = std::filesystem;

struct ModelShape {
  const char* name;
  int64_t hidden, intermediate, heads, kv_heads;
};

// SmolLM2-135M, Qwen2.5-0.5B and a 2048/8192 model (one decoder layer each).
constexpr ModelShape kShapes[] = {
    {"smollm2-135m", 576, 1536, 9, 3},
    {"qwen2.5-0.5b", 896, 4864, 14, 2},
    {"2048-8192", 2048, 8192, 16, 8},
};

void write_layer_model(const std::string& dir, const ModelShape& m) {
  fs::create_directories(dir);
  const int64_t kv = m.kv_heads * (m.hidden / m.heads);
  std::vector<std::pair<std::string, Tensor>> t;
  uint64_t seed = 11;
  auto add = [&](const std::string& name, Shape shape) {
    t.emplace_back("model.layers.0." + name, random_normal(DType::kBF16, std::move(shape), seed++, 0.05));
  };
  add("self_attn.q_proj.weight", {m.hidden, m.hidden});
  add("self_attn.k_proj.weight", {kv, m.hidden});
  add("self_attn.v_proj.weight", {kv, m.hidden});
  add("self_attn.o_proj.weight", {m.hidden, m.hidden});
  add("mlp.gate_proj.weight", {m.intermediate, m.hidden});
  add("mlp.up_proj.weight", {m.intermediate, m.hidden});
  add("mlp.down_proj.weight", {m.hidden, m.intermediate});
  add("input_layernorm.weight", {m.hidden});
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", t));
  std::ofstream(dir + "/config.json") << "{\"hidden_size\": " << m.hidden << ", \"intermediate_size\": " << m.intermediate
                                      << ", \"num_attention_heads\": " << m.heads
                                      << ", \"num_key_value_heads\": " << m.kv_heads << "}";
}

TEST(RoundTripShapes, EverySchemeOverRealModelShapesLoads) {
  const fs::path root = fs::temp_directory_path() / ("qlinear-shapes-" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const ModelShape& m : kShapes) {
    const std::string in = (root / m.name / "bf16").string();
    write_layer_model(in, m);
    for (const Scheme& s : all_schemes()) {
      const std::string sn(s.name);
      SCOPED_TRACE(std::string(m.name) + " " + sn);
      QuantizeCheckpointOptions o;
      o.layer.input_min = -3.0f;
      o.layer.input_max = 3.0f;
      const std::string out = (root / m.name / sn).string();
      auto summary = quantize_checkpoint(in, out, s, o);
      ASSERT_TRUE(summary) << summary.message();
      EXPECT_EQ(summary->quantized, 7u);
      auto model = load_checkpoint(out);
      ASSERT_TRUE(model) << model.message();
      std::vector<std::string> names;
      for (const LoadedLayer& l : model->layers) names.push_back(l.layer.name);
      EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
                (std::set<std::string>{"model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
                                       "model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.down_proj"}));
      const int64_t kv = m.kv_heads * (m.hidden / m.heads);
      const bool row_blocks = s.weight_key.scale.group.row > 1;
      for (const LoadedLayer& l : model->layers) {
        if (l.layer.config.num_shards() < 2) continue;
        // SmolLM2's q (576) and k (192) end in partial blocks: their own grids.
        const bool partial = row_blocks && l.layer.name.ends_with("qkv_proj") && (m.hidden % 128 != 0 || kv % 128 != 0);
        EXPECT_EQ(scale_row_grid(l.layer.config).uniform, !partial) << l.layer.name;
      }
      // `qlinear run` processes several copies of every layer (cold-cache timing): at 2048/8192, a few schemes
      // (one per kernel family's weight format) keep the test's time in bounds.
      const bool run_cli = m.hidden < 2048 || sn == "w8a8-fp8-block" || sn == "w8a8-int8-dynamic" ||
                           sn == "w4a16-mxfp4" || sn == "w4a4-nvfp4" || sn == "w6a16-mxfp6-e3m2";
      if (!run_cli) {
        fs::remove_all(out);
        continue;
      }
      const test_cli::CliRun inspect = test_cli::run("inspect " + out);
      EXPECT_EQ(inspect.code, 0) << inspect.out;
      const test_cli::CliRun run = test_cli::run("run " + out + " --m 3 --reps 1 --json");
      ASSERT_EQ(run.code, 0) << run.out;
      const nlohmann::json records = test_cli::json_of(run.out);
      EXPECT_EQ(records.size(), names.size()) << run.out;
      for (const auto& r : records) EXPECT_TRUE(r.at("ok").get<bool>()) << r.dump();
      fs::remove_all(out);
    }
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace qlinear
