#include "bench/shapes.hpp"

namespace qlinear::bench {

const std::vector<ShapeSet>& shape_sets() {
  // From the models' config.json: hidden size, intermediate size, heads x head dim (q + 2 kv).
  static const std::vector<ShapeSet> sets = {
      {"llama3-8b", {{"8b.qkv", 6144, 4096}, {"8b.o", 4096, 4096}, {"8b.gate_up", 28672, 4096}, {"8b.down", 4096, 14336}}},
      {"llama3-70b",
       {{"70b.qkv", 10240, 8192}, {"70b.o", 8192, 8192}, {"70b.gate_up", 57344, 8192}, {"70b.down", 8192, 28672}}},
      {"qwen2.5-7b",
       {{"qwen7b.qkv", 4608, 3584}, {"qwen7b.o", 3584, 3584}, {"qwen7b.gate_up", 37888, 3584},
        {"qwen7b.down", 3584, 18944}}},
  };
  return sets;
}

const ShapeSet* find_shape_set(std::string_view name) {
  for (const ShapeSet& s : shape_sets()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string shape_set_names() {
  std::string out;
  for (const ShapeSet& s : shape_sets()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace qlinear::bench
