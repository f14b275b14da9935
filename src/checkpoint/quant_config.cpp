// Parsing config.json's "quantization_config": the entry point, compressed-tensors' config_groups and
// QuantizationArgs (validated as compressed-tensors' pydantic models validate them, plus JSON types checked
// strictly), and the JSON helpers quark_config.cpp shares. Name matching (targets, ignore lists): quant_config_match.cpp;
// scheme resolution: quant_config_resolve.cpp.
#include "qlinear/quant_config.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <set>

#include "checkpoint/quant_config_internal.hpp"
#include "checkpoint/strict_json.hpp"

namespace qlinear {

using quant_config_detail::Json;
using quant_config_detail::Where;

std::string_view quant_method_name(QuantMethod m) {
  return m == QuantMethod::kQuark ? "quark" : "compressed-tensors";
}

std::string_view quant_type_name(QuantType t) { return t == QuantType::kFloat ? "float" : "int"; }

namespace {
constexpr std::array<std::pair<std::string_view, QuantStrategy>, 7> kStrategies = {{
    {"tensor", QuantStrategy::kTensor},
    {"channel", QuantStrategy::kChannel},
    {"group", QuantStrategy::kGroup},
    {"block", QuantStrategy::kBlock},
    {"token", QuantStrategy::kToken},
    {"tensor_group", QuantStrategy::kTensorGroup},
    {"attn_head", QuantStrategy::kAttnHead},
}};

// compressed-tensors' CompressionFormat values.
constexpr std::array<std::string_view, 13> kFormats = {
    "dense",          "sparse-bitmask",       "sparse-24-bitmask",    "int-quantized",
    "float-quantized", "naive-quantized",     "pack-quantized",       "marlin-24",
    "mixed-precision", "nvfp4-pack-quantized", "mxfp4-pack-quantized", "mxfp6-pack-quantized",
    "mxfp8-quantized"};

// torch dtype attribute names that compressed-tensors' TorchDtype accepts (as "torch.x" or "x").
constexpr std::array<std::string_view, 24> kTorchDtypes = {
    "float32", "float",   "float64", "double",  "float16",         "half",           "bfloat16",
    "uint8",   "int8",    "int16",   "short",   "int32",           "int",            "int64",
    "long",    "bool",    "uint16",  "uint32",  "float8_e4m3fn",   "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz",    "float8_e8m0fnu",     "float4_e2m1fn_x2"};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

template <size_t N>
std::string join(const std::array<std::string_view, N>& names) {
  std::string s;
  for (std::string_view n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::string strategy_list() {
  std::string s;
  for (const auto& [name, _] : kStrategies) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}
}  // namespace

std::string_view strategy_name(QuantStrategy s) {
  for (const auto& [name, value] : kStrategies) {
    if (value == s) return name;
  }
  return "?";
}

std::string QuantizationArgs::to_string() const {
  std::string s = std::string(quant_type_name(type)) + std::to_string(num_bits) + " " +
                  std::string(strategy_name(strategy));
  if ((strategy == QuantStrategy::kGroup || strategy == QuantStrategy::kTensorGroup) && group_size) {
    s += std::to_string(*group_size);
  }
  if (strategy == QuantStrategy::kBlock && block_structure) {
    s += std::to_string((*block_structure)[0]) + "x" + std::to_string((*block_structure)[1]);
  }
  s += dynamic == DynamicMode::kStatic ? " static" : dynamic == DynamicMode::kDynamic ? " dynamic" : " dynamic=local";
  s += symmetric ? " sym" : " asym";
  if (scale_dtype) s += " scale=" + *scale_dtype;
  return s;
}

std::string QuarkQuantSpec::to_string() const {
  std::string s = dtype + " " + (qscheme.empty() ? std::string("(no qscheme)") : qscheme);
  if (qscheme == "per_group" && group_size) s += std::to_string(*group_size);
  s += is_dynamic ? " dynamic" : " static";
  if (symmetric) s += *symmetric ? " sym" : " asym";
  if (scale_format) s += " scale=" + *scale_format;
  return s;
}

const ConfigGroup* QuantConfig::find_group(std::string_view name) const {
  for (const auto* groups : {&config_groups, &layer_quant_config}) {
    for (const ConfigGroup& g : *groups) {
      if (g.name == name) return &g;
    }
  }
  if (global_quant_config && global_quant_config->name == name) return &*global_quant_config;
  return nullptr;
}

// ---- Shared helpers -------------------------------------------------------------------------------------
namespace quant_config_detail {

std::string describe(const Json& v) { return detail::json_excerpt(v, 60) + " (" + v.type_name() + ")"; }

Status check_keys(const Json& obj, std::initializer_list<std::string_view> allowed, const Where& where) {
  for (const auto& [key, _] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string names;
    for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    return where.error("unknown field \"" + key + "\" (expected: " + names + ")");
  }
  return Status::ok();
}

Result<std::optional<int64_t>> read_int(const Json& obj, const char* key, const Where& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) return (where / key).error("expected an integer, got " + describe(*it));
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<std::optional<bool>> read_bool(const Json& obj, const char* key, const Where& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return (where / key).error("expected true or false, got " + describe(*it));
  return std::optional<bool>(it->get<bool>());
}

Result<std::optional<std::string>> read_string(const Json& obj, const char* key, const Where& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return (where / key).error("expected a string, got " + describe(*it));
  return std::optional<std::string>(it->get<std::string>());
}

Result<std::vector<std::string>> read_string_list(const Json& obj, const char* key, const Where& where) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) return (where / key).error("expected a list of strings, got " + describe(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    if (!v.is_string()) return (where / key).at(i).error("expected a string, got " + describe(v));
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace quant_config_detail

// ---- compressed-tensors ---------------------------------------------------------------------------------
namespace {

using namespace quant_config_detail;

Result<std::optional<std::string>> read_torch_dtype(const Json& j, const char* key, const Where& w) {
  QL_ASSIGN_OR_RETURN(auto v, read_string(j, key, w));
  if (!v) return v;
  std::string bare = v->rfind("torch.", 0) == 0 ? v->substr(6) : *v;
  if (std::find(kTorchDtypes.begin(), kTorchDtypes.end(), bare) == kTorchDtypes.end()) {
    return (w / key).error("\"" + *v + "\" is not a torch dtype (expected e.g. \"torch.uint8\", \"torch.float8_e4m3fn\")");
  }
  return v;
}

// QuantizationArgs: JSON types first, then compressed-tensors' own rules (validate_model_after).
Result<QuantizationArgs> parse_args(const Json& j, const Where& w) {
  if (!j.is_object()) return w.error("expected an object (QuantizationArgs), got " + describe(j));
  QL_RETURN_IF_ERROR(check_keys(j,
                                {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure",
                                 "dynamic", "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs"},
                                w));
  QuantizationArgs a;
  QL_ASSIGN_OR_RETURN(auto bits, read_int(j, "num_bits", w));
  if (bits && (*bits < 1 || *bits > 32)) return (w / "num_bits").error("expected 1..32, got " + std::to_string(*bits));
  if (bits) a.num_bits = static_cast<int>(*bits);

  QL_ASSIGN_OR_RETURN(auto type, read_string(j, "type", w));
  if (type) {
    std::string t = lower(*type);
    if (t != "int" && t != "float") return (w / "type").error("expected \"int\" or \"float\", got \"" + *type + "\"");
    a.type = t == "float" ? QuantType::kFloat : QuantType::kInt;
  }
  QL_ASSIGN_OR_RETURN(auto sym, read_bool(j, "symmetric", w));
  a.symmetric = sym.value_or(true);

  QL_ASSIGN_OR_RETURN(a.group_size, read_int(j, "group_size", w));
  if (a.group_size && *a.group_size < -1) {
    return (w / "group_size").error("expected a positive size (strategy group) or -1 (channel), got " +
                                    std::to_string(*a.group_size));
  }

  QL_ASSIGN_OR_RETURN(auto strategy, read_string(j, "strategy", w));
  if (strategy) {
    std::string s = lower(*strategy);
    auto it = std::find_if(kStrategies.begin(), kStrategies.end(), [&](const auto& e) { return e.first == s; });
    if (it == kStrategies.end()) {
      return (w / "strategy").error("unknown strategy \"" + *strategy + "\" (expected one of " + strategy_list() + ")");
    }
    a.strategy = it->second;
  } else if (!a.group_size) {
    a.strategy = QuantStrategy::kTensor;  // CT's inference when strategy is absent
  } else if (*a.group_size > 0) {
    a.strategy = QuantStrategy::kGroup;
  } else if (*a.group_size == -1) {
    a.strategy = QuantStrategy::kChannel;
  } else {
    return (w / "group_size").error("0 is not a group size (expected > 0 for group, -1 for channel)");
  }

  if (auto it = j.find("block_structure"); it != j.end() && !it->is_null()) {
    Where bw = w / "block_structure";
    std::array<int64_t, 2> b{};
    bool ok = false;
    if (it->is_array() && it->size() == 2 && (*it)[0].is_number_integer() && (*it)[1].is_number_integer()) {
      b = {(*it)[0].get<int64_t>(), (*it)[1].get<int64_t>()};
      ok = true;
    } else if (it->is_string()) {  // CT still reads the old "128x128" spelling
      // Read by hand: std::stoll throws beyond int64, and std::regex_match recurses per character.
      const std::string& text = it->get_ref<const std::string&>();
      const char* end = text.data() + text.size();
      auto [p0, e0] = std::from_chars(text.data(), end, b[0]);
      if (e0 == std::errc() && p0 < end && *p0 == 'x') {  // a sign is refused below, as values <= 0
        auto [p1, e1] = std::from_chars(p0 + 1, end, b[1]);
        ok = e1 == std::errc() && p1 == end;
      }
    }
    if (!ok || b[0] <= 0 || b[1] <= 0) return bw.error("expected [rows, cols] of positive integers, got " + describe(*it));
    a.block_structure = b;
  }

  if (auto it = j.find("dynamic"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) {
      a.dynamic = it->get<bool>() ? DynamicMode::kDynamic : DynamicMode::kStatic;
    } else if (it->is_string() && lower(it->get<std::string>()) == "local") {
      a.dynamic = DynamicMode::kLocal;
    } else {
      return (w / "dynamic").error("expected true, false or \"local\", got " + describe(*it));
    }
  }

  if (auto it = j.find("actorder"); it != j.end() && !it->is_null()) {
    Where aw = w / "actorder";
    if (it->is_boolean()) {
      if (it->get<bool>()) return aw.error("actorder=true (group activation ordering) was removed; expected \"weight\" or null");
    } else if (it->is_string()) {
      std::string v = lower(it->get<std::string>());
      if (v == "group" || v == "dynamic") {
        return aw.error("actorder \"" + it->get<std::string>() + "\" (g_idx reordering) was removed; expected \"weight\" or null");
      }
      if (v != "weight" && v != "static") return aw.error("expected \"weight\", \"static\" or null, got " + describe(*it));
      a.actorder = it->get<std::string>();
    } else {
      return aw.error("expected \"weight\", \"static\" or null, got " + describe(*it));
    }
  }

  QL_ASSIGN_OR_RETURN(a.scale_dtype, read_torch_dtype(j, "scale_dtype", w));
  QL_ASSIGN_OR_RETURN(a.zp_dtype, read_torch_dtype(j, "zp_dtype", w));
  QL_ASSIGN_OR_RETURN(a.observer, read_string(j, "observer", w));
  if (auto it = j.find("observer_kwargs"); it != j.end() && !it->is_null() && !it->is_object()) {
    return (w / "observer_kwargs").error("expected an object, got " + describe(*it));
  }

  // compressed-tensors' cross-field rules.
  const std::string sname(strategy_name(a.strategy));
  if (a.type == QuantType::kFloat && a.num_bits != 4 && a.num_bits != 6 && a.num_bits != 8) {
    return (w / "num_bits").error("float quantization has 4, 6 or 8 bits, got " + std::to_string(a.num_bits));
  }
  if (a.strategy == QuantStrategy::kToken && !a.is_dynamic()) {
    return (w / "dynamic").error("strategy token needs dynamic=true (a static per-token scale cannot exist)");
  }
  bool grouped = a.strategy == QuantStrategy::kGroup || a.strategy == QuantStrategy::kTensorGroup;
  if (grouped && (!a.group_size || *a.group_size <= 0)) {
    return (w / "group_size").error("strategy " + sname + " needs a positive group_size, got " +
                                    (a.group_size ? std::to_string(*a.group_size) : std::string("none")));
  }
  if (!grouped && a.group_size && *a.group_size > 0) {
    return (w / "group_size").error("group_size " + std::to_string(*a.group_size) +
                                    " needs strategy group or tensor_group, not " + sname);
  }
  if ((a.strategy == QuantStrategy::kBlock) != a.block_structure.has_value()) {
    return (w / "block_structure").error(a.block_structure ? "block_structure needs strategy block, not " + sname
                                                           : std::string("strategy block needs a block_structure [rows, cols]"));
  }
  if (a.dynamic == DynamicMode::kLocal && a.strategy != QuantStrategy::kTensorGroup) {
    return (w / "dynamic").error("dynamic \"local\" needs strategy tensor_group, not " + sname);
  }
  if (a.is_dynamic() && a.strategy != QuantStrategy::kToken && a.strategy != QuantStrategy::kTensor &&
      a.strategy != QuantStrategy::kTensorGroup && a.strategy != QuantStrategy::kGroup) {
    return (w / "dynamic").error("dynamic quantization needs strategy token, tensor, tensor_group or group, not " + sname);
  }
  return a;
}

// The presets compressed-tensors expands `"config_groups": {"FP8_DYNAMIC": ["Linear"]}` into
// (compressed_tensors/quantization/quant_scheme.py, 0.20), the ones whose formats qlinear knows.
constexpr std::array<std::pair<std::string_view, std::string_view>, 15> kPresets = {{
    {"FP8", R"({"weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false}})"},
    {"FP8_DYNAMIC", R"({"weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true, "dynamic": true}})"},
    {"FP8_BLOCK", R"({"weights": {"num_bits": 8, "type": "float", "strategy": "block", "symmetric": true, "dynamic": false, "block_structure": [128, 128]},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "symmetric": true, "dynamic": true, "group_size": 128}})"},
    {"W8A8", R"({"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true, "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": true, "dynamic": true}})"},
    {"INT8", R"({"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true, "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": true, "dynamic": true}})"},
    {"NVFP4A16", R"({"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "symmetric": true, "dynamic": false, "group_size": 16, "scale_dtype": "torch.float8_e4m3fn"}})"},
    {"NVFP4", R"({"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "symmetric": true, "dynamic": false, "group_size": 16, "scale_dtype": "torch.float8_e4m3fn"},
        "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "symmetric": true, "dynamic": "local", "group_size": 16, "scale_dtype": "torch.float8_e4m3fn"}})"},
    {"MXFP4A16", R"({"weights": {"num_bits": 4, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"}})"},
    {"MXFP4", R"({"weights": {"num_bits": 4, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"},
        "input_activations": {"num_bits": 4, "type": "float", "strategy": "group", "symmetric": true, "dynamic": true, "group_size": 32, "scale_dtype": "torch.uint8"}})"},
    {"MXFP4XFP8", R"({"weights": {"num_bits": 4, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "symmetric": true, "dynamic": true, "group_size": 128}})"},
    {"MXFP6A16", R"({"weights": {"num_bits": 6, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"}})"},
    {"MXFP6A8", R"({"weights": {"num_bits": 6, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "symmetric": true, "dynamic": true, "group_size": 32, "scale_dtype": "torch.uint8"}})"},
    {"MXFP8A16", R"({"weights": {"num_bits": 8, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"}})"},
    {"MXFP8", R"({"weights": {"num_bits": 8, "type": "float", "strategy": "group", "symmetric": true, "dynamic": false, "group_size": 32, "scale_dtype": "torch.uint8"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "symmetric": true, "dynamic": true, "group_size": 32, "scale_dtype": "torch.uint8"}})"},
    {"UNQUANTIZED", R"({})"},
}};

Status check_format(const std::string& f, const Where& w, bool allow_mixed) {
  if (std::find(kFormats.begin(), kFormats.end(), f) == kFormats.end()) {
    return w.error("unknown format \"" + f + "\" (expected one of " + join(kFormats) + ")");
  }
  if (!allow_mixed && f == "mixed-precision") return w.error("\"mixed-precision\" is a global format, not a group's");
  return Status::ok();
}

Result<ConfigGroup> parse_group(const std::string& name, const Json& j, const Where& w, const QuantConfig& config) {
  ConfigGroup g;
  g.name = name;
  g.source = config.source;
  Json body = j;
  if (j.is_array()) {  // a preset name mapped to its targets
    std::string upper = name;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    auto it = std::find_if(kPresets.begin(), kPresets.end(), [&](const auto& p) { return p.first == upper; });
    if (it == kPresets.end()) {
      std::string names;
      for (const auto& p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.first);
      return w.error("a list of targets needs a preset scheme name as the group name; \"" + name +
                     "\" is not one qlinear knows (" + names + ")");
    }
    body = Json::parse(it->second);
    body["targets"] = j;
  } else if (!j.is_object()) {
    return w.error("expected an object (QuantizationScheme) or a list of targets, got " + describe(j));
  }
  QL_RETURN_IF_ERROR(check_keys(body, {"targets", "weights", "input_activations", "output_activations", "format"}, w));

  auto targets = body.find("targets");
  if (targets == body.end() || !targets->is_array() || targets->empty()) {
    return (w / "targets").error("expected a non-empty list of layer names, \"re:\" regexes or module classes, got " +
                                 (targets == body.end() ? std::string("nothing") : describe(*targets)));
  }
  QL_ASSIGN_OR_RETURN(g.targets, read_string_list(body, "targets", w));
  for (size_t i = 0; i < g.targets.size(); ++i) {
    QL_RETURN_IF_ERROR(check_name_pattern(g.targets[i], (w / "targets").at(i)));
  }
  g.attention_only = std::all_of(g.targets.begin(), g.targets.end(), [](const std::string& t) {
    return t.size() >= 9 && t.compare(t.size() - 9, 9, "Attention") == 0;
  });

  struct Part {
    const char* key;
    std::optional<QuantizationArgs>* out;
  };
  for (Part part : {Part{"weights", &g.weights}, Part{"input_activations", &g.input_activations},
                    Part{"output_activations", &g.output_activations}}) {
    auto it = body.find(part.key);
    if (it == body.end() || it->is_null()) continue;
    QL_ASSIGN_OR_RETURN(*part.out, parse_args(*it, w / part.key));
  }
  if (g.input_activations) {  // QuantizationScheme's own rules
    QuantStrategy s = g.input_activations->strategy;
    if (s == QuantStrategy::kChannel || s == QuantStrategy::kBlock) {
      return (w / "input_activations" / "strategy")
          .error("strategy " + std::string(strategy_name(s)) +
                 " is not supported for activations (expected token, tensor, group, tensor_group or attn_head)");
    }
    if (g.input_activations->actorder) return (w / "input_activations" / "actorder").error("activations have no actorder");
  }
  if (g.output_activations && g.output_activations->actorder) {
    return (w / "output_activations" / "actorder").error("activations have no actorder");
  }

  QL_ASSIGN_OR_RETURN(auto format, read_string(body, "format", w));
  if (format) {
    QL_RETURN_IF_ERROR(check_format(*format, w / "format", /*allow_mixed=*/false));
    g.format = format;
    g.format_from_group = true;
  } else {
    g.format = config.format;
  }
  return g;
}

Status parse_compressed_tensors(const Json& qc, const Where& w, QuantConfig& out) {
  QL_ASSIGN_OR_RETURN(out.format, read_string(qc, "format", w));
  if (out.format) QL_RETURN_IF_ERROR(check_format(*out.format, w / "format", /*allow_mixed=*/true));
  QL_ASSIGN_OR_RETURN(out.quantization_status, read_string(qc, "quantization_status", w));

  QL_ASSIGN_OR_RETURN(out.ignore, read_string_list(qc, "ignore", w));
  for (size_t i = 0; i < out.ignore.size(); ++i) {
    QL_RETURN_IF_ERROR(check_name_pattern(out.ignore[i], (w / "ignore").at(i)));
  }
  if (auto it = qc.find("kv_cache_scheme"); it != qc.end() && !it->is_null()) {
    QL_ASSIGN_OR_RETURN(out.kv_cache_scheme, parse_args(*it, w / "kv_cache_scheme"));
  }
  // Sparse storage and online transforms change what the tensors mean: refuse rather than misread them.
  if (auto it = qc.find("sparsity_config"); it != qc.end() && !it->is_null()) {
    if (!it->is_object()) return (w / "sparsity_config").error("expected an object, got " + describe(*it));
    auto f = it->find("format");
    if (f != it->end() && !(f->is_string() && f->get<std::string>() == "dense") && !f->is_null()) {
      return (w / "sparsity_config" / "format").error("sparse checkpoints (" + detail::json_excerpt(*f) + ") are not supported; expected \"dense\"");
    }
  }
  if (auto it = qc.find("transform_config"); it != qc.end() && !it->is_null() && !(it->is_object() && it->empty())) {
    return (w / "transform_config").error("online transforms (rotations) are not supported; expected null or {}");
  }

  auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object()) {
    return (w / "config_groups").error("expected an object of named groups, got " +
                                       (groups == qc.end() ? std::string("nothing") : describe(*groups)));
  }
  for (const auto& [name, body] : groups->items()) {
    QL_ASSIGN_OR_RETURN(ConfigGroup g, parse_group(name, body, w / "config_groups" / name, out));
    out.config_groups.push_back(std::move(g));
  }
  // vLLM keys its scheme map by target, so a target in two groups silently takes the later group; refuse.
  std::map<std::string, std::string> owner;
  for (const ConfigGroup& g : out.config_groups) {
    for (const std::string& t : g.targets) {
      auto [it, fresh] = owner.emplace(t, g.name);
      if (!fresh && it->second != g.name) {
        return (w / "config_groups" / g.name / "targets")
            .error("target \"" + t + "\" is also in group " + it->second + "; a target must belong to one group");
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<QuantConfig> parse_quant_config(const std::string& config_json_text, const std::string& source_name) {
  // Bounded nesting (R6): deeper values are refused before anything walks them recursively.
  auto parsed = detail::parse_json_bounded(config_json_text);
  if (!parsed) return Status::error(source_name + ": " + parsed.message());
  const Json doc = std::move(*parsed);
  if (!doc.is_object()) return Status::error(source_name + ": expected a JSON object (config.json), got " + describe(doc));
  auto qc = doc.find("quantization_config");
  if (qc == doc.end()) {
    return Status::error(source_name + ": no \"quantization_config\": the checkpoint is not quantized, or not in a "
                                       "format qlinear reads (compressed-tensors, quark)");
  }
  Where w{&source_name, "quantization_config"};
  if (!qc->is_object()) return w.error("expected an object, got " + describe(*qc));

  QuantConfig out;
  out.source = source_name;
  QL_ASSIGN_OR_RETURN(auto method, read_string(*qc, "quant_method", w));
  if (!method) return (w / "quant_method").error("missing; expected \"compressed-tensors\" or \"quark\"");
  try {
    if (*method == "compressed-tensors" || *method == "compressed_tensors") {
      out.quant_method = QuantMethod::kCompressedTensors;
      QL_RETURN_IF_ERROR(parse_compressed_tensors(*qc, w, out));
    } else if (*method == "quark") {
      out.quant_method = QuantMethod::kQuark;
      QL_RETURN_IF_ERROR(quant_config_detail::parse_quark_config(*qc, w, out));
    } else {
      return (w / "quant_method").error("\"" + *method + "\" is not supported; qlinear reads \"compressed-tensors\" and \"quark\"");
    }
  } catch (const Json::exception& e) {  // a checked read missed a case: still an error, never an abort
    return w.error(std::string("unexpected JSON shape (") + e.what() + ")");
  }
  return out;
}

}  // namespace qlinear
