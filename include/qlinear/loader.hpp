#pragma once
// Loading a quantized checkpoint into linear layers, the way vLLM's compressed-tensors / Quark integration
// does: discover the linear modules, fuse q/k/v and gate/up shards, choose each layer's scheme from
// config.json, read its tensors by the scheme's names, convert scales to the layout the contract
// (kernel.hpp, validate_layer_tensors) defines, and take this rank's tensor-parallel slice.
#include <optional>
#include <string>
#include <vector>

#include "qlinear/layer.hpp"
#include "qlinear/quant_config.hpp"
#include "qlinear/safetensors.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {

enum class Parallelism : uint8_t {
  kColumn,  // output rows split across ranks (q/k/v, gate/up, BERT query/key/value, intermediate)
  kRow,     // input columns split across ranks, partial outputs all-reduced (o_proj, down_proj, *.output.dense)
};

struct LoadOptions {
  int tp_rank = 0;
  int tp_size = 1;
  std::string layer_regex;  // load only layers whose (fused) name matches (std::regex_search); empty: all
  bool fuse = true;         // fuse q/k/v -> qkv_proj and gate/up -> gate_up_proj as vLLM does
  DType input_dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
};

struct LoadedLayer {
  LinearLayer layer;                 // ready for process_weights_after_loading
  const Scheme* scheme = nullptr;
  Parallelism parallelism = Parallelism::kColumn;
  Tensor bias;                       // this rank's bias, undefined when none (row-parallel: rank 0 only)
  std::vector<std::string> shards;   // checkpoint module names fused into this layer (one when unfused)
  int64_t full_n = 0;                // unsharded output features
  int64_t full_k = 0;                // unsharded input features
  int64_t checkpoint_bytes = 0;      // bytes of this rank's quantized tensors
};

struct LoadedModel {
  std::string path;
  Checkpoint checkpoint;
  QuantConfig config;
  std::vector<LoadedLayer> layers;
  std::vector<std::string> unquantized;  // linear modules left unquantized (ignored by the config)
};

// `path`: a checkpoint directory (config.json + *.safetensors, or an index) or a .safetensors file whose
// directory holds config.json. Errors name the file, the layer, the tensor and what was expected.
Result<LoadedModel> load_checkpoint(const std::string& path, const LoadOptions& options = {});

// Which way a module is split under tensor parallelism, from its name (vLLM's layer classes by role).
Parallelism parallelism_of(std::string_view module_name);

}  // namespace qlinear
