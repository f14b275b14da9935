// libFuzzer target: parse_quant_config on arbitrary text (a config.json), then, for whatever parses, the two
// questions a loader asks per layer, match_layer and scheme_for_layer, on plain and fused layer names of the
// model families qlinear loads, and on a layer name taken from the input (the bytes after the first NUL).
// Beyond "no crash, no sanitizer report", it checks that errors are values that name the source file, and
// that a matched group is one of the config's own groups.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qlinear/quant_config.hpp"

namespace {

constexpr const char* kSource = "fuzz/config.json";

[[noreturn]] void broken_promise(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_quant_config: broken promise: %s: %s\n", what, detail.c_str());
  std::abort();
}

struct LayerQuery {
  std::string name;
  std::vector<std::string> shards;
  const char* module_class;
};

const std::vector<LayerQuery>& queries() {
  static const std::vector<LayerQuery> q = {
      {"model.layers.0.self_attn.q_proj", {}, "Linear"},
      {"model.layers.0.self_attn.o_proj", {}, "RowParallelLinear"},
      {"model.layers.0.self_attn.qkv_proj", {"q_proj", "k_proj", "v_proj"}, "QKVParallelLinear"},
      {"model.layers.1.mlp.gate_up_proj", {"gate_proj", "up_proj"}, "MergedColumnParallelLinear"},
      {"model.layers.1.mlp.down_proj", {}, "Linear"},
      {"lm_head", {}, "Linear"},
      {"encoder.layer.0.attention.self.query", {}, "Linear"},
      {"encoder.layer.0.output.dense", {}, "Linear"},
      {"", {}, ""},
  };
  return q;
}

bool is_own_group(const qlinear::QuantConfig& c, const qlinear::ConfigGroup* g) {
  for (const auto* list : {&c.config_groups, &c.layer_quant_config}) {
    for (const qlinear::ConfigGroup& own : *list) {
      if (&own == g) return true;
    }
  }
  return c.global_quant_config && &*c.global_quant_config == g;
}

void ask(const qlinear::QuantConfig& c, const LayerQuery& q) {
  auto g = qlinear::match_layer(c, q.name, q.shards, q.module_class);
  if (g && *g != nullptr && !is_own_group(c, *g)) broken_promise("match_layer returned a foreign group", q.name);
  if (g && *g != nullptr) {
    if (c.find_group((*g)->name) == nullptr) broken_promise("find_group misses a matched group", (*g)->name);
    auto s = qlinear::resolve_scheme(**g, q.name);
    if (!s) (void)s.message().size();
  }
  auto s = qlinear::scheme_for_layer(c, q.name, q.shards, q.module_class);
  if (g && *g == nullptr && !(s && *s == nullptr)) broken_promise("an ignored layer gets a scheme", q.name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  // No exception may escape (R1 was nlohmann's out_of_range for "1e400"): one would stop the run as a crash.
  const qlinear::Result<qlinear::QuantConfig> config = qlinear::parse_quant_config(text, kSource);
  if (!config) {
    if (config.message().find(kSource) == std::string::npos) {
      broken_promise("a parse error that does not name the file", config.message());
    }
    return 0;
  }
  const qlinear::QuantConfig& c = *config;
  for (const qlinear::ConfigGroup& g : c.config_groups) {
    for (const auto& args : {g.weights, g.input_activations, g.output_activations}) {
      if (args) (void)args->to_string();
    }
  }
  for (const qlinear::ConfigGroup& g : c.layer_quant_config) {
    if (g.quark) {
      for (const auto* specs : {&g.quark->weight, &g.quark->input_tensors, &g.quark->output_tensors}) {
        for (const qlinear::QuarkQuantSpec& s : *specs) (void)s.to_string();
      }
    }
  }
  for (const LayerQuery& q : queries()) ask(c, q);
  if (nul != std::string::npos) {
    // "name\0shard\0shard...": a layer name (and shards) from the input.
    std::vector<std::string> parts;
    size_t pos = nul + 1;
    while (pos <= input.size() && parts.size() < 4) {
      size_t end = input.find('\0', pos);
      if (end == std::string::npos) end = input.size();
      parts.push_back(input.substr(pos, end - pos));
      pos = end + 1;
    }
    LayerQuery q{parts[0], {parts.begin() + 1, parts.end()}, "Linear"};
    ask(c, q);
  }
  return 0;
}
