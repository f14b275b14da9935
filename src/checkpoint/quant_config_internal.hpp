#pragma once
// Pieces shared by quant_config.cpp (compressed-tensors, matching, resolution) and quark_config.cpp.
#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qlinear/quant_config.hpp"

namespace qlinear::quant_config_detail {

// Ordered: target order and layer_quant_config order decide matches, as dict order does in vLLM.
using Json = nlohmann::ordered_json;

// Where a value sits: the file and its JSON path, for "config.json: quantization_config.x.y: ..." errors.
struct Where {
  const std::string* source;
  std::string path;

  Where operator/(std::string_view key) const { return {source, path + "." + std::string(key)}; }
  Where at(size_t index) const { return {source, path + "[" + std::to_string(index) + "]"}; }
  Status error(const std::string& what) const { return Status::error(*source + ": " + path + ": " + what); }
};

// `"8" (string)`, `8.5 (number)`, long values cut.
std::string describe(const Json& v);

// Errors on a key that is not in `allowed` (pydantic's extra="forbid").
Status check_keys(const Json& obj, std::initializer_list<std::string_view> allowed, const Where& where);

// Absent or null read as nullopt; a value of the wrong JSON type is an error naming what was expected.
Result<std::optional<int64_t>> read_int(const Json& obj, const char* key, const Where& where);
Result<std::optional<bool>> read_bool(const Json& obj, const char* key, const Where& where);
Result<std::optional<std::string>> read_string(const Json& obj, const char* key, const Where& where);
// A list of strings; absent or null is empty.
Result<std::vector<std::string>> read_string_list(const Json& obj, const char* key, const Where& where);

// ---- Names --------------------------------------------------------------------------------------------
// An ignore / target entry: "re:<regex>" or an exact name. Checks that a regex compiles (NamePattern: RE2
// syntax, matched in linear time; backreferences and lookaround are refused, naming the construct).
Status check_name_pattern(const std::string& entry, const Where& where);
// vLLM's _is_equal_or_regex_match: "re:" entries use re.match (anchored at the start, not the end).
bool equal_or_regex_match(std::string_view value, const std::string& entry);
bool any_equal_or_regex_match(std::string_view value, std::span<const std::string> entries);
// Python's fnmatch.fnmatchcase: '*', '?', "[seq]", "[!seq]", whole-string match.
bool fnmatch(std::string_view pattern, std::string_view name);

// Full shard names of a fused layer: a shard given without a '.' replaces the layer's last component.
std::vector<std::string> full_shard_names(std::string_view layer_name, std::span<const std::string> shards);

// vLLM's should_ignore_layer. `skip_if_listed` is compressed-tensors' shortcut (a fused layer listed under
// its own name is ignored without looking at its shards); Quark's version has no such shortcut.
Result<bool> is_ignored(std::string_view layer_name, std::span<const std::string> shards,
                        std::span<const std::string> ignore, const std::string& list_name, bool skip_if_listed,
                        const std::string& source);

// ---- Resolution ---------------------------------------------------------------------------------------
// What a group asks for, as keys: the scheme whose keys are exactly these runs it.
struct Wanted {
  QuantKey weight;
  std::optional<QuantKey> input;
  std::string vllm_scheme;  // the scheme class vLLM builds for these args, for messages
  std::string name_hint;    // the name a qlinear scheme for these keys would have, when known
  // vLLM's CompressedTensorsW4A4MxFp4 builds its kernel from the weights alone (activations stay high
  // precision on Marlin): when no scheme takes the input key, the weight-only scheme does.
  bool weight_only_fallback = false;
};

// The scheme for `wanted`, or an error naming the layer, group, args (`args_text`), keys and schemes.
Result<const Scheme*> pick_scheme(const Wanted& wanted, const ConfigGroup& group, std::string_view layer_name,
                                  const std::string& args_text);
// "<source>: layer L (group G): <what> Schemes qlinear has: ...".
Status resolve_error(const ConfigGroup& group, std::string_view layer_name, const std::string& what);

// ---- Quark (quark_config.cpp) -------------------------------------------------------------------------
Status parse_quark_config(const Json& qc, const Where& where, QuantConfig& out);
Result<const ConfigGroup*> match_quark_layer(const QuantConfig& config, std::string_view layer_name,
                                             std::span<const std::string> shard_names);
Result<const Scheme*> resolve_quark_scheme(const ConfigGroup& group, std::string_view layer_name);

}  // namespace qlinear::quant_config_detail
