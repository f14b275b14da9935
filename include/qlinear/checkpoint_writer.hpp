#pragma once
// Writing quantized checkpoints that qlinear and vLLM load: compressed-tensors layout and config for the
// FP8, INT8, MXFP8, MXFP4 and NVFP4 schemes, AMD Quark OCP-MX for MXFP6 (compressed-tensors has no E3M2).
#include <map>
#include <string>
#include <vector>

#include "qlinear/layer.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {

struct CheckpointModule {
  std::string name;  // module name, e.g. "model.layers.0.mlp.down_proj" (tensors are "<name>.weight", ...)
  const LinearLayer* layer = nullptr;  // quantized, unprocessed (checkpoint layout); null: dense module
  Tensor bias;                         // optional
};

// The quantization_config object (JSON text) a checkpoint of `scheme` carries; `ignore` lists dense
// linear modules.
std::string quantization_config_json(const Scheme& scheme, const std::vector<std::string>& ignore);

// Writes <dir>/model.safetensors (quantized modules under the scheme's tensor names, plus `dense` tensors
// as they are) and <dir>/config.json (`base_config_json` with quantization_config set; "{}" for none).
// Both files are written completely (fsync'ed) under hidden temporary names first; then the old config.json
// is removed, the weights and then the config are renamed into place. config.json commits the write: a
// failure (or a kill) before the renames leaves what `dir` held as it was; one during them leaves no
// config.json, which loaders refuse, never new weights beside an old config. A bad `base_config_json`
// (not an object, nested deeper than 64 levels) is refused before anything is written.
Status write_quantized_checkpoint(const std::string& dir, const Scheme& scheme,
                                  const std::vector<CheckpointModule>& modules,
                                  const std::vector<std::pair<std::string, Tensor>>& dense,
                                  const std::string& base_config_json = "{}");

}  // namespace qlinear
