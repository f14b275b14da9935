// AMD Quark's quantization_config: parsing, layer matching and scheme resolution, after vLLM's
// quark/quark.py (from_config, _find_matched_config, _get_scheme_from_config) and quark/utils.py.
//
// Shape of an export (Quark 0.10-0.12), the parts qlinear reads:
//   "quantization_config": {
//     "quant_method": "quark",
//     "export": {"kv_cache_group": ["*k_proj", "*v_proj"], "pack_method": "reorder", ...},
//     "global_quant_config": {"weight": SPEC, "input_tensors": SPEC|null, "output_tensors": null, "bias": null,
//                             "target_device": null},
//     "layer_quant_config": {"*lm_head": {...}, ...},     fnmatch patterns, first match wins
//     "layer_type_quant_config": {},                        must be empty (see below)
//     "exclude": ["lm_head", "re:.*mlp.gate$"],             exact names or "re:" regexes
//     "algo_config": [...] | null, "quant_mode": ..., "version": ...}
// SPEC is one QuantizationSpec or a list of two (NVFP4: fp4 per_group16 + fp8_e4m3 per_tensor). OCP MX specs
// are {"dtype": "fp4" | "fp6_e2m3" | "fp6_e3m2" | "fp8_e4m3", "qscheme": "per_group", "group_size": 32,
// "scale_format": "e8m0", "is_dynamic": false (weights) / true (inputs), ...}. vLLM spells them mxfp4,
// mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3 internally; those spellings are accepted as the same dtypes.
//
// Assumptions and where qlinear differs from vLLM:
//   - layer_type_quant_config: vLLM looks the module's type object up in a dict of strings, which never
//     matches, so it is dead in vLLM; a non-empty one is refused here rather than ignored.
//   - algo_config "rotation" with online_rotation_layers: those layers need an online Hadamard transform
//     that qlinear does not apply; match_layer refuses them.
//   - An OCP-MX weight with a quantized input runs W4A4 / W6A6 / W6A8 in vLLM (native or by QDQ of the input):
//     without that scheme in the table it is an error, never silently weight-only.
//   - Quark has no FP8 weight-only scheme in vLLM; an FP8 weight without input resolves when a scheme has
//     exactly those keys (w8a16-fp8 for per-channel weights).
#include <algorithm>
#include <array>

#include "checkpoint/quant_config_internal.hpp"

namespace qlinear::quant_config_detail {

namespace {

constexpr std::array<std::string_view, 4> kQschemes = {"per_tensor", "per_channel", "per_group", "per_block"};

Result<QuarkQuantSpec> parse_spec(const Json& j, const Where& w) {
  if (!j.is_object()) return w.error("expected an object (QuantizationSpec), got " + describe(j));
  QuarkQuantSpec s;
  QL_ASSIGN_OR_RETURN(auto dtype, read_string(j, "dtype", w));
  if (!dtype) return (w / "dtype").error("missing; expected e.g. \"fp4\", \"fp6_e2m3\", \"fp8_e4m3\", \"int8\"");
  s.dtype = *dtype;
  QL_ASSIGN_OR_RETURN(auto qscheme, read_string(j, "qscheme", w));
  if (qscheme && std::find(kQschemes.begin(), kQschemes.end(), *qscheme) == kQschemes.end()) {
    return (w / "qscheme").error("unknown qscheme \"" + *qscheme + "\" (expected per_tensor, per_channel, per_group or per_block)");
  }
  s.qscheme = qscheme.value_or("");
  QL_ASSIGN_OR_RETURN(auto dyn, read_bool(j, "is_dynamic", w));
  s.is_dynamic = dyn.value_or(false);
  QL_ASSIGN_OR_RETURN(s.group_size, read_int(j, "group_size", w));
  QL_ASSIGN_OR_RETURN(s.ch_axis, read_int(j, "ch_axis", w));
  QL_ASSIGN_OR_RETURN(s.symmetric, read_bool(j, "symmetric", w));
  QL_ASSIGN_OR_RETURN(s.scale_format, read_string(j, "scale_format", w));
  if (s.qscheme == "per_group" && (!s.group_size || *s.group_size <= 0)) {
    return (w / "group_size").error("qscheme per_group needs a positive group_size");
  }
  for (const auto& [key, value] : j.items()) {
    static constexpr std::string_view kRead[] = {"dtype", "qscheme", "is_dynamic", "group_size", "ch_axis", "symmetric",
                                                 "scale_format"};
    if (std::find(std::begin(kRead), std::end(kRead), key) == std::end(kRead)) s.other[key] = value.dump();
  }
  return s;
}

// null, one spec, or a list of specs.
Result<std::vector<QuarkQuantSpec>> parse_specs(const Json& obj, const char* key, const Where& w) {
  std::vector<QuarkQuantSpec> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (it->is_object()) {
    QL_ASSIGN_OR_RETURN(QuarkQuantSpec s, parse_spec(*it, w / key));
    out.push_back(std::move(s));
    return out;
  }
  if (!it->is_array()) return (w / key).error("expected a QuantizationSpec, a list of them, or null, got " + describe(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    QL_ASSIGN_OR_RETURN(QuarkQuantSpec s, parse_spec((*it)[i], (w / key).at(i)));
    out.push_back(std::move(s));
  }
  return out;
}

Result<ConfigGroup> parse_layer_config(const std::string& name, const Json& j, const Where& w, const QuantConfig& c) {
  if (!j.is_object()) return w.error("expected an object (weight, input_tensors, output_tensors, bias), got " + describe(j));
  QL_RETURN_IF_ERROR(check_keys(j, {"weight", "input_tensors", "output_tensors", "bias", "target_device"}, w));
  QuarkLayerConfig q;
  QL_ASSIGN_OR_RETURN(q.weight, parse_specs(j, "weight", w));
  QL_ASSIGN_OR_RETURN(q.input_tensors, parse_specs(j, "input_tensors", w));
  QL_ASSIGN_OR_RETURN(q.output_tensors, parse_specs(j, "output_tensors", w));
  QL_ASSIGN_OR_RETURN(q.bias, parse_specs(j, "bias", w));
  ConfigGroup g;
  g.name = name;
  if (name != "global_quant_config") g.targets = {name};
  g.quark = std::move(q);
  g.source = c.source;
  return g;
}

}  // namespace

Status parse_quark_config(const Json& qc, const Where& w, QuantConfig& out) {
  auto exp = qc.find("export");
  if (exp == qc.end() || !exp->is_object()) {
    return (w / "export").error("expected the export object of a Quark model (vLLM refuses a Quark config without it), got " +
                                (exp == qc.end() ? std::string("nothing") : describe(*exp)));
  }
  QL_ASSIGN_OR_RETURN(out.kv_cache_group, read_string_list(*exp, "kv_cache_group", w / "export"));
  QL_ASSIGN_OR_RETURN(out.pack_method, read_string(*exp, "pack_method", w / "export"));

  QL_ASSIGN_OR_RETURN(out.exclude, read_string_list(qc, "exclude", w));
  for (size_t i = 0; i < out.exclude.size(); ++i) QL_RETURN_IF_ERROR(check_name_pattern(out.exclude[i], (w / "exclude").at(i)));

  if (auto it = qc.find("global_quant_config"); it != qc.end() && !it->is_null()) {
    QL_ASSIGN_OR_RETURN(out.global_quant_config, parse_layer_config("global_quant_config", *it, w / "global_quant_config", out));
  }
  if (auto it = qc.find("layer_quant_config"); it != qc.end() && !it->is_null()) {
    if (!it->is_object()) return (w / "layer_quant_config").error("expected an object of pattern: config, got " + describe(*it));
    for (const auto& [pattern, body] : it->items()) {
      QL_ASSIGN_OR_RETURN(ConfigGroup g, parse_layer_config(pattern, body, w / "layer_quant_config" / pattern, out));
      out.layer_quant_config.push_back(std::move(g));
    }
  }
  if (auto it = qc.find("layer_type_quant_config"); it != qc.end() && !it->is_null() && !(it->is_object() && it->empty())) {
    return (w / "layer_type_quant_config").error("per-module-type configs are not supported (vLLM never matches them); expected {}");
  }
  if (auto it = qc.find("algo_config"); it != qc.end() && it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& algo = (*it)[i];
      if (!algo.is_object() || algo.value("name", Json()) != "rotation") continue;
      auto online = algo.find("online_config");
      if (online == algo.end() || !online->is_object()) continue;
      QL_ASSIGN_OR_RETURN(auto layers, read_string_list(*online, "online_rotation_layers", (w / "algo_config").at(i) / "online_config"));
      out.online_rotation_layers.insert(out.online_rotation_layers.end(), layers.begin(), layers.end());
    }
  }

  // The KV cache's quantization sits in the output_tensors of the kv_cache_group layers; vLLM moves it out
  // (and drops q_proj's output spec too), leaving those layers' linear configs without output quantization.
  if (!out.kv_cache_group.empty()) {
    std::vector<ConfigGroup*> kv;
    for (ConfigGroup& g : out.layer_quant_config) {
      bool hit = std::any_of(out.kv_cache_group.begin(), out.kv_cache_group.end(),
                             [&](const std::string& p) { return fnmatch(p, g.name); });
      if (hit) kv.push_back(&g);
    }
    Where kw = w / "export" / "kv_cache_group";
    if (kv.empty()) return kw.error("no layer_quant_config entry matches these patterns, so the KV cache has no quantization settings");
    for (ConfigGroup* g : kv) {
      if (g->quark->output_tensors != kv.front()->quark->output_tensors) {
        return kw.error("the kv_cache_group layers " + kv.front()->name + " and " + g->name + " quantize their outputs differently");
      }
    }
    if (kv.front()->quark->output_tensors.size() != 1) {
      return kw.error("layer_quant_config." + kv.front()->name + ".output_tensors must hold the KV cache spec");
    }
    out.kv_cache_spec = kv.front()->quark->output_tensors.front();
    for (ConfigGroup* g : kv) g->quark->output_tensors.clear();
    for (ConfigGroup& g : out.layer_quant_config) {
      if (g.name == "*q_proj") g.quark->output_tensors.clear();
    }
  }
  return Status::ok();
}

namespace {

// vLLM's _matches_pattern: fnmatch when the pattern has a '*', otherwise `layer_name in pattern`.
bool quark_pattern_match(const std::string& pattern, std::string_view layer) {
  if (pattern.find('*') == std::string::npos) return pattern.find(layer) != std::string::npos;
  return fnmatch(pattern, layer);
}

Result<const ConfigGroup*> find_quark_config(const QuantConfig& c, std::string_view layer) {
  for (const ConfigGroup& g : c.layer_quant_config) {
    if (quark_pattern_match(g.name, layer)) return &g;
  }
  if (c.global_quant_config) return &*c.global_quant_config;
  return Status::error(c.source + ": layer " + std::string(layer) +
                       " matches no layer_quant_config pattern and global_quant_config is null");
}

std::string base_dtype(const std::string& d) {  // vLLM's internal "mx" spellings name the same dtypes
  return d.rfind("mxfp", 0) == 0 ? d.substr(2) : d;
}

bool is_ocp_mx(const QuarkQuantSpec& s) {
  return s.qscheme == "per_group" && s.group_size == 32 && s.scale_format == "e8m0";
}

std::optional<QuantKey> quark_weight_key(const QuarkQuantSpec& s) {
  if (s.is_dynamic) return std::nullopt;
  const std::string d = base_dtype(s.dtype);
  if (is_ocp_mx(s)) {
    if (d == "fp4") return kMxfp4Static;
    if (d == "fp6_e2m3") return kMxfp6E2M3Static;
    if (d == "fp6_e3m2") return kMxfp6E3M2Static;
    if (d == "fp8_e4m3") return kMxfp8Static;
    return std::nullopt;
  }
  if (s.qscheme == "per_channel" && s.ch_axis && *s.ch_axis != 0) return std::nullopt;  // not per output channel
  QuantKey k;
  if (d == "fp8_e4m3" && s.qscheme == "per_tensor") k = kFp8StaticTensorSym;
  else if (d == "fp8_e4m3" && s.qscheme == "per_channel") k = kFp8StaticChannelSym;
  else if (d == "int8" && s.qscheme == "per_tensor") k = kInt8StaticTensorSym;
  else if (d == "int8" && s.qscheme == "per_channel") k = kInt8StaticChannelSym;
  else return std::nullopt;
  k.symmetric = s.symmetric.value_or(true);
  return k;
}

std::optional<QuantKey> quark_input_key(const QuarkQuantSpec& s) {
  const std::string d = base_dtype(s.dtype);
  if (is_ocp_mx(s)) {
    if (!s.is_dynamic) return std::nullopt;  // vLLM: static OCP-MX input scales are not implemented
    if (d == "fp4") return kMxfp4Dynamic;
    if (d == "fp6_e2m3") return kMxfp6E2M3Dynamic;
    if (d == "fp6_e3m2") return kMxfp6E3M2Dynamic;
    if (d == "fp8_e4m3") return kMxfp8Dynamic;
    return std::nullopt;
  }
  if (d != "fp8_e4m3" && d != "int8") return std::nullopt;
  if (d == "int8" && !s.symmetric) return std::nullopt;  // Quark must say which: the zero point depends on it
  const DType dt = d == "int8" ? DType::kI8 : DType::kF8E4M3;
  QuantKey k;
  if (s.qscheme == "per_tensor") k = QuantKey{dt, {DType::kF32, !s.is_dynamic, kPerTensor}};
  else if (s.qscheme == "per_channel" && s.is_dynamic) k = QuantKey{dt, {DType::kF32, false, kPerToken}};  // per token
  else if (s.qscheme == "per_group" && s.is_dynamic) k = QuantKey{dt, {DType::kF32, false, GroupShape{1, *s.group_size}}};
  else return std::nullopt;
  k.symmetric = s.symmetric.value_or(true);
  return k;
}

std::string specs_text(const std::vector<QuarkQuantSpec>& specs) {
  if (specs.empty()) return "none";
  std::string s;
  for (const QuarkQuantSpec& spec : specs) s += (s.empty() ? "" : " + ") + spec.to_string();
  return s;
}

// "fp6_e2m3" -> "mxfp6-e2m3", for scheme name hints.
std::string mx_name(const std::string& d) {
  std::string n = "mx" + base_dtype(d);
  std::replace(n.begin(), n.end(), '_', '-');
  return n.substr(0, n.find("-e4m3"));  // mxfp8-e4m3 -> mxfp8
}

}  // namespace

Result<const ConfigGroup*> match_quark_layer(const QuantConfig& c, std::string_view layer,
                                             std::span<const std::string> shards) {
  QL_ASSIGN_OR_RETURN(bool excluded, is_ignored(layer, shards, c.exclude, "exclude", /*skip_if_listed=*/false, c.source));
  if (excluded) return static_cast<const ConfigGroup*>(nullptr);

  std::vector<std::string> names = full_shard_names(layer, shards);
  names.insert(names.begin(), std::string(layer));
  for (const std::string& n : names) {
    if (std::find(c.online_rotation_layers.begin(), c.online_rotation_layers.end(), n) != c.online_rotation_layers.end()) {
      return Status::error(c.source + ": layer " + std::string(layer) + ": algo_config asks for an online rotation of " + n +
                           ", which qlinear does not apply");
    }
  }
  if (shards.empty()) return find_quark_config(c, layer);

  const ConfigGroup* first = nullptr;
  for (size_t i = 1; i < names.size(); ++i) {
    const ConfigGroup* g = nullptr;
    if (names[i] == layer) {
      g = c.global_quant_config ? &*c.global_quant_config : nullptr;  // vLLM's rule for a shard named as the layer
    } else {
      QL_ASSIGN_OR_RETURN(g, find_quark_config(c, names[i]));
    }
    if (!g) return Status::error(c.source + ": layer " + std::string(layer) + ": no config for shard " + names[i]);
    if (!first) first = g;
    if (*g->quark != *first->quark) {
      return Status::error(c.source + ": layer " + std::string(layer) + ": its shards are quantized differently (" +
                           names[1] + " by " + first->name + ", " + names[i] + " by " + g->name +
                           "); the shards of a fused layer must share one scheme");
    }
  }
  return first;
}

Result<const Scheme*> resolve_quark_scheme(const ConfigGroup& g, std::string_view layer) {
  const QuarkLayerConfig& q = *g.quark;
  const std::string args_text = "weight " + specs_text(q.weight) + ", input " + specs_text(q.input_tensors);
  auto unsupported = [&](const std::string& why) { return resolve_error(g, layer, why + " (" + args_text + ")"); };
  if (!q.output_tensors.empty() || !q.bias.empty()) {
    return unsupported("output_tensors and bias quantization are not supported (vLLM refuses them too)");
  }
  if (q.weight.empty()) return unsupported("the config quantizes no weights; qlinear has no unquantized scheme");

  if (q.weight.size() == 2) {  // two-level specs: NVFP4 (fp4 per_group16 + fp8_e4m3 per_tensor) or W4A8
    auto is_nvfp4 = [](const std::vector<QuarkQuantSpec>& s, bool dynamic) {
      return s.size() == 2 && base_dtype(s[0].dtype) == "fp4" && s[0].qscheme == "per_group" && s[0].group_size == 16 &&
             s[0].is_dynamic == dynamic && s[1].dtype == "fp8_e4m3" && s[1].qscheme == "per_tensor" && !s[1].is_dynamic;
    };
    if (is_nvfp4(q.weight, false) && is_nvfp4(q.input_tensors, true)) {
      return pick_scheme({kNvfp4Static, kNvfp4Dynamic, "QuarkNVFP4", "w4a4-nvfp4"}, g, layer, args_text);
    }
    if (q.weight[0].dtype == "fp8_e4m3" && q.weight[1].dtype == "int4") {
      return unsupported("FP8 + INT4 weights are vLLM's QuarkW4A8Fp8; qlinear has no W4A8 family");
    }
    return unsupported("this two-level weight spec is not one qlinear reads (NVFP4 needs fp4 per_group16 + fp8_e4m3 "
                       "per_tensor weights and the same, dynamic, input)");
  }
  if (q.weight.size() > 2 || q.input_tensors.size() > 1) return unsupported("these lists of specs are not one qlinear reads");

  const QuarkQuantSpec& w = q.weight.front();
  const QuarkQuantSpec* in = q.input_tensors.empty() ? nullptr : &q.input_tensors.front();
  std::optional<QuantKey> wk = quark_weight_key(w);
  std::optional<QuantKey> ik = in ? quark_input_key(*in) : std::nullopt;
  if (!wk) {
    if (w.dtype == "mx") return unsupported("dtype \"mx\" (older Quark MX spelling) is not read; expected fp4, fp6_e2m3, fp6_e3m2 or fp8_e4m3");
    return unsupported("no qlinear format stores these weights (OCP MX needs qscheme per_group, group_size 32, "
                       "scale_format e8m0; FP8 / INT8 need per_tensor or per_channel (ch_axis 0), static)");
  }
  if (in && !ik) return unsupported("no qlinear format quantizes this input");
  // Dynamic MX inputs are quantized by Quark's "even" scale rule (its default, written as "even" or null).
  if (in && in->is_dynamic && is_ocp_mx(*in) && in->other.count("scale_calculation_mode") &&
      in->other.at("scale_calculation_mode") != "\"even\"" && in->other.at("scale_calculation_mode") != "null") {
    return unsupported("input scale_calculation_mode " + in->other.at("scale_calculation_mode") +
                       ": qlinear quantizes dynamic MX inputs by Quark's \"even\" rule only");
  }

  if (is_ocp_mx(w)) {
    const std::string wn = mx_name(w.dtype);
    const std::string bits = wn.substr(4, 1);  // mxfp4 -> "4"
    if (*wk == kMxfp8Static) {
      if (in && *ik != kMxfp8Dynamic) return unsupported("MXFP8 weights need MXFP8 dynamic input or none");
      return pick_scheme({*wk, ik, "QuarkW8A8Mxfp8", in ? "w8a8-mxfp8" : "w8a16-mxfp8"}, g, layer, args_text);
    }
    std::string hint = "w" + bits + "a16-" + wn;
    std::string vllm = "QuarkOCP_MX";
    if (in && *ik == kMxfp8Dynamic) {
      hint = "w" + bits + "a8-" + wn;
    } else if (in && is_ocp_mx(*in)) {
      hint = "w" + bits + "a" + mx_name(in->dtype).substr(4, 1) + "-" + wn +
             (base_dtype(in->dtype) == base_dtype(w.dtype) ? "" : "-" + mx_name(in->dtype));
    } else if (in) {
      hint = "w" + bits + "a8-" + wn + "-fp8";
      vllm = *wk == kMxfp4Static ? "QuarkW4A8_MXFP4_FP8" : "QuarkOCP_MX";
    }
    return pick_scheme({*wk, ik, vllm, hint}, g, layer, args_text);
  }
  if (in && in->dtype != w.dtype) return unsupported("weights and input must both be fp8_e4m3 or both be int8");
  if (w.dtype == "fp8_e4m3") {
    if (!in) return pick_scheme({*wk, std::nullopt, "none (vLLM's Quark reader has no FP8 weight-only scheme)", "w8a16-fp8"}, g, layer, args_text);
    return pick_scheme({*wk, ik, "QuarkW8A8Fp8", ""}, g, layer, args_text);
  }
  if (w.symmetric != true) return unsupported("INT8 weights must say symmetric: true");
  if (!in) return unsupported("INT8 weight-only quantization has no scheme in vLLM's Quark reader nor in qlinear");
  return pick_scheme({*wk, ik, "QuarkW8A8Int8", ""}, g, layer, args_text);
}

}  // namespace qlinear::quant_config_detail
