#pragma once
// A checkpoint's quantization config (config.json's "quantization_config") as compressed-tensors
// (llm-compressor) and AMD Quark write it, and the two questions a loader asks of it for each linear layer:
//   1. match_layer:    which config group covers the layer (null when the ignore / exclude list skips it);
//   2. resolve_scheme: which qlinear scheme (scheme.hpp) runs that group.
// The rules follow vLLM's compressed_tensors.py / compressed_tensors/utils.py and quark.py / quark/utils.py
// (spec: shared/reference/vllm-linear-kernels.md §6); where qlinear is stricter than vLLM the .cpp says so.
//
// Layer names are the checkpoint's own ("model.layers.0.self_attn.q_proj"): vLLM's hf_to_vllm name mapper
// is not applied.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qlinear/scheme.hpp"
#include "qlinear/status.hpp"

namespace qlinear {

enum class QuantMethod : uint8_t { kCompressedTensors, kQuark };
std::string_view quant_method_name(QuantMethod m);  // "compressed-tensors", "quark"

// ---- compressed-tensors ---------------------------------------------------------------------------------

enum class QuantType : uint8_t { kInt, kFloat };
std::string_view quant_type_name(QuantType t);  // "int", "float"

enum class QuantStrategy : uint8_t { kTensor, kChannel, kGroup, kBlock, kToken, kTensorGroup, kAttnHead };
std::string_view strategy_name(QuantStrategy s);  // "tensor", ..., "tensor_group", "attn_head"

// compressed-tensors' `dynamic`: false, true, or "local" (NVFP4 activations: the 1x16 scales are computed
// at run time, the per-tensor global scale is calibrated).
enum class DynamicMode : uint8_t { kStatic, kDynamic, kLocal };

// compressed-tensors' QuantizationArgs, validated the way its pydantic model validates them.
struct QuantizationArgs {
  int num_bits = 8;
  QuantType type = QuantType::kInt;
  bool symmetric = true;
  QuantStrategy strategy = QuantStrategy::kTensor;  // when absent: inferred from group_size, as CT does
  std::optional<int64_t> group_size;                // group / tensor_group: elements along K per scale
  std::optional<std::array<int64_t, 2>> block_structure;  // block: [rows (N), cols (K)] per weight scale
  DynamicMode dynamic = DynamicMode::kStatic;
  std::optional<std::string> actorder;     // "weight" or "static" (GPTQ calibration only; layout unchanged)
  std::optional<std::string> scale_dtype;  // as written: "torch.uint8" (MX E8M0), "torch.float8_e4m3fn", ...
  std::optional<std::string> zp_dtype;
  std::optional<std::string> observer;

  bool is_dynamic() const { return dynamic != DynamicMode::kStatic; }
  bool operator==(const QuantizationArgs&) const = default;
  // Compact, for messages: "float8 channel static sym", "float4 group32 static sym scale=torch.uint8",
  // "float4 tensor_group16 dynamic=local sym", "int8 token dynamic asym", "float8 block128x128 static sym".
  std::string to_string() const;
};

// ---- Quark ----------------------------------------------------------------------------------------------

// One Quark QuantizationSpec as exported in config.json. OCP MX specs look like
//   {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0", "is_dynamic": false,
//    "ch_axis": -1, "symmetric": null, "round_method": "half_even", "observer_cls": "PerBlockMXObserver", ...}
struct QuarkQuantSpec {
  std::string dtype;    // as written: "fp4", "fp6_e2m3", "fp6_e3m2", "fp8_e4m3", "int8", "uint8", "int4", ...
  std::string qscheme;  // "per_tensor", "per_channel", "per_group", "per_block"; "" when null
  bool is_dynamic = false;
  std::optional<int64_t> group_size;
  std::optional<int64_t> ch_axis;
  std::optional<bool> symmetric;            // Quark writes null for MX specs
  std::optional<std::string> scale_format;  // "e8m0" for OCP MX; null for float scales
  // Every other field (round_method, scale_type, observer_cls, mx_element_dtype, ...) as compact JSON, so
  // that two specs compare equal exactly when the file says the same thing (vLLM's deep_compare).
  std::map<std::string, std::string> other;

  bool operator==(const QuarkQuantSpec&) const = default;
  std::string to_string() const;  // "fp4 per_group32 static scale=e8m0", "fp8_e4m3 per_channel dynamic"
};

// A Quark layer config ({"weight", "input_tensors", "output_tensors", "bias"}); each is null, one spec, or a
// list of two specs (a two-level format: NVFP4 = [fp4 per_group16, fp8_e4m3 per_tensor]).
struct QuarkLayerConfig {
  std::vector<QuarkQuantSpec> weight;  // empty: null
  std::vector<QuarkQuantSpec> input_tensors;
  std::vector<QuarkQuantSpec> output_tensors;
  std::vector<QuarkQuantSpec> bias;

  bool operator==(const QuarkLayerConfig&) const = default;
};

// ---- The config -----------------------------------------------------------------------------------------

// A set of layers quantized one way. compressed-tensors: one entry of config_groups. Quark: one entry of
// layer_quant_config (name and only target: its fnmatch pattern) or the global_quant_config.
struct ConfigGroup {
  std::string name;                  // "group_0"; Quark: "*q_proj" / "global_quant_config"
  std::vector<std::string> targets;  // exact layer names, "re:" regexes, or module class names ("Linear")
  std::optional<QuantizationArgs> weights;  // compressed-tensors only
  std::optional<QuantizationArgs> input_activations;
  std::optional<QuantizationArgs> output_activations;
  // The storage format that applies to this group: its own "format", else the config's global one.
  std::optional<std::string> format;
  bool format_from_group = false;
  // Every target names an attention module ("...Attention"): KV-cache quantization, never a linear layer's.
  // vLLM skips such groups when matching linear layers; so does match_layer.
  bool attention_only = false;
  std::optional<QuarkLayerConfig> quark;  // Quark groups: the specs as written
  std::string source;                     // the file, for messages
};

struct QuantConfig {
  std::string source;  // the file it came from, for messages
  QuantMethod quant_method = QuantMethod::kCompressedTensors;

  // compressed-tensors
  std::optional<std::string> format;  // global storage format ("float-quantized", "nvfp4-pack-quantized", ...)
  std::vector<ConfigGroup> config_groups;  // in file order
  std::vector<std::string> ignore;         // exact layer names or "re:" regexes
  std::optional<QuantizationArgs> kv_cache_scheme;
  std::optional<std::string> quantization_status;  // "compressed", "frozen", ...

  // Quark
  std::vector<ConfigGroup> layer_quant_config;     // in file order; first matching pattern wins
  std::optional<ConfigGroup> global_quant_config;  // what every other (non-excluded) layer uses
  std::vector<std::string> exclude;                // exact layer names or "re:" regexes
  std::vector<std::string> kv_cache_group;         // export.kv_cache_group: fnmatch patterns
  std::optional<QuarkQuantSpec> kv_cache_spec;     // the output_tensors spec of the kv_cache_group layers
  std::optional<std::string> pack_method;          // export.pack_method ("reorder", "order")
  std::vector<std::string> online_rotation_layers;  // algo_config "rotation": layers needing an online Hadamard

  // The group (config_groups or layer_quant_config entry, or "global_quant_config") with this name.
  const ConfigGroup* find_group(std::string_view name) const;
};

// Parses config.json's text and validates its "quantization_config". Every error names `source_name`, the
// JSON path ("quantization_config.config_groups.group_0.weights.strategy") and what was expected.
Result<QuantConfig> parse_quant_config(const std::string& config_json_text, const std::string& source_name);

// The group that quantizes `layer_name`, or null when the ignore (Quark: exclude) list skips it.
// A fused layer ("...qkv_proj") passes its shards: leaf names ("q_proj") or full names. Following vLLM:
//   - ignore/exclude: exact names or "re:" regexes (Python re.match: anchored at the start only). A fused
//     layer is ignored when all its shards are; some but not all is an error.
//   - compressed-tensors targets, first match wins in this order: (1) the layer name, exact or "re:", over
//     every target of every group in file order; (2) the module class: a plain target matches when it is a
//     case-insensitive substring of `module_class` (vLLM's check on LinearBase subclasses: "Linear" matches
//     every linear layer); (3) a fused layer that neither matched: each shard by (1). No match is an error
//     (vLLM raises too). qlinear also checks that every shard of a fused layer, matched on its own, lands in
//     the fused layer's group (vLLM does not, and would load a differently quantized shard).
//   - Quark: layer_quant_config patterns in file order (fnmatch when the pattern has a '*', else vLLM's
//     `layer_name in pattern`), else global_quant_config. A fused layer's shards must have equal configs.
Result<const ConfigGroup*> match_layer(const QuantConfig& config, std::string_view layer_name,
                                       std::span<const std::string> shard_names = {},
                                       std::string_view module_class = "Linear");

// The qlinear scheme that runs `group`, following vLLM's _get_scheme_from_parts order (§6.2) for
// compressed-tensors and _get_scheme_from_config for Quark. The group's args become a (weight key,
// activation key) pair and the scheme whose keys are exactly those is returned; when none is, the error
// names the layer, the group, the args, the keys, vLLM's scheme for them and every qlinear scheme.
Result<const Scheme*> resolve_scheme(const ConfigGroup& group, std::string_view layer_name);

// match_layer then resolve_scheme; null when the layer is ignored (it stays unquantized).
Result<const Scheme*> scheme_for_layer(const QuantConfig& config, std::string_view layer_name,
                                       std::span<const std::string> shard_names = {},
                                       std::string_view module_class = "Linear");

}  // namespace qlinear
