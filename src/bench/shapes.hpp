#pragma once
// The model shapes every benchmark of the project runs (qlinear bench --shapes, the CUDA test benchmark):
// one table, so that the CLI's figures and the tests' figures are of the same layers. N x K per projection,
// the weight's [out_features, in_features]; qkv and gate_up are the fused projections.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qlinear::bench {

struct LayerShape {
  std::string name;  // "8b.qkv"
  int64_t n = 0, k = 0;
};

struct ShapeSet {
  std::string name;  // "llama3-8b"
  std::vector<LayerShape> layers;
};

const std::vector<ShapeSet>& shape_sets();
// nullptr when no set has that name.
const ShapeSet* find_shape_set(std::string_view name);
// "llama3-8b, llama3-70b, qwen2.5-7b" for messages.
std::string shape_set_names();

}  // namespace qlinear::bench
