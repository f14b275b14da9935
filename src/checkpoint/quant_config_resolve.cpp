// Which group covers a layer, and which qlinear scheme runs a group: compressed-tensors here (vLLM's
// compressed_tensors.py get_scheme / _get_scheme_from_parts and compressed_tensors/utils.py), Quark in
// quark_config.cpp; the last step, keys -> scheme, is shared (pick_scheme).
//
// Where qlinear is stricter than vLLM, and why (errors are values; nothing is silently different):
//   - FP8 weights with an input that W8A8 refuses (static asymmetric, static per-token...) become W8A16 in
//     vLLM, which then ignores the input; here they are an error.
//   - Keys must match a scheme exactly: per-tensor weights with per-token input, per-channel weights with
//     static input, INT8 per-tensor weights, FP8 weight-only per-tensor or block weights have no scheme
//     today and are errors (vLLM accepts them) until the scheme table grows.
//   - A fused layer whose shards, each matched on its own, fall in different groups is an error (vLLM uses
//     the group of the fused name, or of the first shard).
//   - output_activations are refused (vLLM ignores them outside its INT W8A8-O8 scheme).
//   - format "dense" (fake-quantized, unquantized tensors on disk) is refused.
#include <algorithm>
#include <array>
#include <cctype>

#include "checkpoint/quant_config_internal.hpp"

namespace qlinear {

namespace quant_config_detail {

Status resolve_error(const ConfigGroup& group, std::string_view layer_name, const std::string& what) {
  return Status::error(group.source + ": layer " + std::string(layer_name) + " (group " + group.name + "): " + what +
                       ". Schemes qlinear has: " + scheme_names());
}

Result<const Scheme*> pick_scheme(const Wanted& wanted, const ConfigGroup& group, std::string_view layer_name,
                                  const std::string& args_text) {
  for (const Scheme& s : all_schemes()) {
    if (s.weight_key == wanted.weight && s.activation_key == wanted.input) return &s;
  }
  if (wanted.weight_only_fallback && wanted.input) {
    for (const Scheme& s : all_schemes()) {
      if (s.weight_key == wanted.weight && !s.activation_key) return &s;
    }
  }
  std::string what = "no qlinear scheme runs weights " + key_name(wanted.weight) + " with input " +
                     (wanted.input ? key_name(*wanted.input) : std::string("unquantized (weight-only)")) +
                     " (vLLM: " + wanted.vllm_scheme + ")";
  if (!wanted.name_hint.empty() && !find_scheme(wanted.name_hint)) what += "; it would be \"" + wanted.name_hint + "\"";
  return resolve_error(group, layer_name, what + "; " + args_text);
}

}  // namespace quant_config_detail

namespace {

using namespace quant_config_detail;

bool is_mx_scale(const QuantizationArgs& a) {
  return a.scale_dtype && (*a.scale_dtype == "torch.uint8" || *a.scale_dtype == "uint8");
}

// The key of compressed-tensors weight args, or none when no qlinear format has that layout.
std::optional<QuantKey> weight_key(const QuantizationArgs& a) {
  if (a.is_dynamic()) return std::nullopt;
  const bool g32 = a.strategy == QuantStrategy::kGroup && a.group_size == 32;
  QuantKey k;
  if (a.type == QuantType::kFloat && a.num_bits == 4) {
    if (a.strategy == QuantStrategy::kTensorGroup && a.group_size == 16) k = kNvfp4Static;
    else if (g32) k = kMxfp4Static;
    else return std::nullopt;
  } else if (a.type == QuantType::kFloat && a.num_bits == 6) {
    if (!g32) return std::nullopt;
    k = kMxfp6E2M3Static;  // compressed-tensors' FP6 is E2M3 (FP6_E2M3_DATA); it has no E3M2
  } else if (a.type == QuantType::kFloat && a.num_bits == 8) {
    switch (a.strategy) {
      case QuantStrategy::kTensor: k = kFp8StaticTensorSym; break;
      case QuantStrategy::kChannel: k = kFp8StaticChannelSym; break;
      case QuantStrategy::kBlock:
        k = QuantKey{DType::kF8E4M3, {DType::kF32, true, {(*a.block_structure)[0], (*a.block_structure)[1]}}};
        break;
      case QuantStrategy::kGroup:
        if (g32 && is_mx_scale(a)) k = kMxfp8Static;
        else return std::nullopt;
        break;
      default: return std::nullopt;
    }
  } else if (a.type == QuantType::kInt && a.num_bits == 8) {
    if (a.strategy == QuantStrategy::kTensor) k = kInt8StaticTensorSym;
    else if (a.strategy == QuantStrategy::kChannel) k = kInt8StaticChannelSym;
    else return std::nullopt;
  } else {
    return std::nullopt;
  }
  k.symmetric = a.symmetric;
  return k;
}

// The key of compressed-tensors input args, or none when no qlinear format has that layout.
std::optional<QuantKey> input_key(const QuantizationArgs& a) {
  const bool dyn = a.dynamic == DynamicMode::kDynamic;
  QuantKey k;
  if (a.type == QuantType::kFloat && a.num_bits == 4) {
    if (a.strategy == QuantStrategy::kTensorGroup && a.group_size == 16 && a.dynamic == DynamicMode::kLocal) k = kNvfp4Dynamic;
    else if (a.strategy == QuantStrategy::kGroup && a.group_size == 32 && dyn) k = kMxfp4Dynamic;
    else return std::nullopt;
  } else if (a.type == QuantType::kFloat && a.num_bits == 6) {
    if (a.strategy == QuantStrategy::kGroup && a.group_size == 32 && dyn) k = kMxfp6E2M3Dynamic;
    else return std::nullopt;
  } else if (a.num_bits == 8 && a.dynamic != DynamicMode::kLocal) {
    const DType dt = a.type == QuantType::kFloat ? DType::kF8E4M3 : DType::kI8;
    if (a.strategy == QuantStrategy::kGroup && a.type == QuantType::kFloat && a.group_size == 32 && is_mx_scale(a) && dyn) {
      k = kMxfp8Dynamic;
    } else if (a.strategy == QuantStrategy::kTensor) {
      k = QuantKey{dt, {DType::kF32, !dyn, kPerTensor}};
    } else if (a.strategy == QuantStrategy::kToken) {
      k = QuantKey{dt, {DType::kF32, !dyn, kPerToken}};
    } else if (a.strategy == QuantStrategy::kGroup && !is_mx_scale(a)) {
      k = QuantKey{dt, {DType::kF32, !dyn, GroupShape{1, *a.group_size}}};
    } else {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  k.symmetric = a.symmetric;
  return k;
}

std::string lower_case(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

bool one_of(const std::optional<std::string>& f, std::span<const std::string_view> names) {
  return f && std::find(names.begin(), names.end(), *f) != names.end();
}
bool one_of(const std::optional<std::string>& f, std::initializer_list<std::string_view> names) {
  return one_of(f, std::span<const std::string_view>(names.begin(), names.size()));
}

// vLLM's is_activation_quantization_format: its W8A8 / W8A16 FP8 and INT8 schemes exist only for these.
constexpr std::array<std::string_view, 5> kActivationFormats = {
    "naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized"};

Result<const Scheme*> resolve_compressed_tensors(const ConfigGroup& g, std::string_view layer) {
  const QuantizationArgs* in = g.input_activations ? &*g.input_activations : nullptr;
  const std::string args_text = "weights " + (g.weights ? g.weights->to_string() : std::string("none")) + ", input " +
                                (in ? in->to_string() : std::string("none")) + ", format " + g.format.value_or("none");
  if (!g.weights) {
    return resolve_error(g, layer, "the group quantizes no weights (" + args_text +
                                       "); qlinear has no unquantized scheme (vLLM leaves such a layer unquantized)");
  }
  if (g.output_activations) {
    return resolve_error(g, layer, "output_activations (" + g.output_activations->to_string() +
                                       ") are not supported: schemes quantize weights and inputs only");
  }
  if (one_of(g.format, {"dense", "sparse-bitmask", "sparse-24-bitmask", "marlin-24"})) {
    return resolve_error(g, layer, "format \"" + *g.format + "\" does not store the quantized layout qlinear reads (" +
                                       args_text + ")");
  }
  if (one_of(g.format, {"mixed-precision"})) {
    return resolve_error(g, layer, "the global format is \"mixed-precision\" and the group names no format of its own");
  }
  const QuantizationArgs& w = *g.weights;
  if (w.is_dynamic()) return resolve_error(g, layer, "weights must be static (calibrated), got " + args_text);
  std::optional<QuantKey> wk = weight_key(w);
  std::optional<QuantKey> ik = in ? input_key(*in) : std::nullopt;
  const bool is_float = w.type == QuantType::kFloat;

  auto unsupported = [&](const std::string& why) { return resolve_error(g, layer, why + " (" + args_text + ")"); };
  if (!wk) {
    if (w.type == QuantType::kInt && !in) {
      return unsupported("integer weight-only quantization is vLLM's CompressedTensorsWNA16 / Marlin; qlinear has no such family");
    }
    return unsupported("no qlinear format stores these weights");
  }
  if (!w.symmetric) return unsupported("weights must be symmetric");
  if (in && !ik) return unsupported("no qlinear format quantizes this input");

  // §6.2, first match wins: NVFP4, MXFP4, MXFP8 (formats ignored, as vLLM does), then MXFP6 (qlinear's
  // addition: compressed-tensors' MXFP6 presets), then the FP8 / INT8 schemes of activation formats.
  if (*wk == kNvfp4Static) {
    if (!in) return pick_scheme({*wk, std::nullopt, "CompressedTensorsW4A16Fp4", "w4a16-nvfp4"}, g, layer, args_text);
    if (*ik != kNvfp4Dynamic) {
      return unsupported("NVFP4 weights need NVFP4 input (float4 tensor_group16 dynamic=local sym) or none");
    }
    return pick_scheme({*wk, ik, "CompressedTensorsW4A4Fp4", "w4a4-nvfp4"}, g, layer, args_text);
  }
  if (*wk == kMxfp4Static) {
    // vLLM's CompressedTensorsW4A4MxFp4 takes no input args: its kernel (Marlin on Hopper) keeps activations
    // in high precision, so these layers run weight-only here too (w4a4-mxfp4 quantizes inputs by Quark's
    // rule, which compressed-tensors' input args do not name).
    return pick_scheme({*wk, std::nullopt, "CompressedTensorsW4A4MxFp4", "w4a16-mxfp4"}, g, layer, args_text);
  }
  if (*wk == kMxfp8Static) {
    if (in && *ik != kMxfp8Dynamic) {
      return unsupported("MXFP8 weights need MXFP8 input (float8 group32 dynamic sym scale=torch.uint8) or none");
    }
    return pick_scheme({*wk, ik, "CompressedTensorsW8A8Mxfp8", in ? "w8a8-mxfp8" : "w8a16-mxfp8"}, g, layer, args_text);
  }
  if (*wk == kMxfp6E2M3Static) {
    return pick_scheme({*wk, ik, "none in compressed-tensors; Quark's OCP-MX scheme reads MXFP6",
                        in ? (*ik == kMxfp8Dynamic ? "w6a8-mxfp6-e2m3" : "") : "w6a16-mxfp6-e2m3"},
                       g, layer, args_text);
  }

  if (!one_of(g.format, kActivationFormats)) {
    return unsupported("vLLM picks its FP8 and INT8 schemes only for formats naive-quantized, int-quantized, "
                       "float-quantized, nvfp4-pack-quantized, mxfp4-pack-quantized");
  }
  if (in && in->type != w.type) return unsupported("weights and input must both be int or both be float");
  // A per-tensor weight scale is a per-channel scale with one value repeated: the loader expands it (vLLM's
  // convert_to_channelwise), so these checkpoints run on the per-channel schemes, losslessly.
  const bool dynamic_token_input = in && in->is_dynamic() && in->strategy == QuantStrategy::kToken;
  if (*wk == kInt8StaticTensorSym) wk = kInt8StaticChannelSym;
  if (*wk == kFp8StaticTensorSym && (!in || dynamic_token_input)) wk = kFp8StaticChannelSym;
  if (is_float) {  // FP8 weights per tensor, per channel or in blocks
    if (!in) return pick_scheme({*wk, std::nullopt, "CompressedTensorsW8A16Fp8", "w8a16-fp8"}, g, layer, args_text);
    if (!in->is_dynamic() && !(in->strategy == QuantStrategy::kTensor && in->symmetric)) {
      return unsupported("a static FP8 input must be per-tensor and symmetric (vLLM would drop it and run W8A16)");
    }
    return pick_scheme({*wk, ik, "CompressedTensorsW8A8Fp8", ""}, g, layer, args_text);
  }
  if (!in) {
    return unsupported("integer weight-only quantization is vLLM's CompressedTensorsWNA16 / Marlin; qlinear has no such family");
  }
  const bool static_tensor = !in->is_dynamic() && in->strategy == QuantStrategy::kTensor;
  const bool dynamic_token = in->is_dynamic() && in->strategy == QuantStrategy::kToken;
  if (!static_tensor && !dynamic_token) {
    return unsupported("INT8 input must be static per-tensor or dynamic per-token (vLLM's CompressedTensorsW8A8Int8)");
  }
  return pick_scheme({*wk, ik, "CompressedTensorsW8A8Int8", ""}, g, layer, args_text);
}

Result<const ConfigGroup*> match_compressed_tensors(const QuantConfig& c, std::string_view layer,
                                                    std::span<const std::string> shards, std::string_view module_class) {
  QL_ASSIGN_OR_RETURN(bool ignored, is_ignored(layer, shards, c.ignore, "ignore", /*skip_if_listed=*/true, c.source));
  if (ignored) return static_cast<const ConfigGroup*>(nullptr);

  auto by_name = [&](std::string_view name) -> const ConfigGroup* {
    for (const ConfigGroup& g : c.config_groups) {
      if (!g.attention_only && any_equal_or_regex_match(name, g.targets)) return &g;
    }
    return nullptr;
  };
  // vLLM tests `target.lower() in class_name.lower()` (regex targets: re.match on the class name).
  std::string cls = lower_case(module_class);
  auto by_class = [&]() -> const ConfigGroup* {
    for (const ConfigGroup& g : c.config_groups) {
      if (g.attention_only) continue;
      for (const std::string& t : g.targets) {
        bool hit = t.rfind("re:", 0) == 0 ? equal_or_regex_match(module_class, t)
                                           : cls.find(lower_case(t)) != std::string::npos;
        if (hit) return &g;
      }
    }
    return nullptr;
  };
  // (1) the layer's own name, (2) its module class.
  const ConfigGroup* found = by_name(layer);
  if (!found) found = by_class();
  if (shards.empty()) {
    if (found) return found;
    return Status::error(c.source + ": layer " + std::string(layer) +
                         " matches no target of any config group and is not in the ignore list (vLLM refuses it too)");
  }
  // A fused layer: (3) when neither matched, every shard by name. Either way each shard must land in the
  // group the fused layer uses (vLLM does not check, and would load a differently quantized shard).
  std::vector<std::string> names = full_shard_names(layer, shards);
  const std::string found_for = found ? std::string(layer) : names.front();
  if (!found) found = by_name(names.front());
  for (const std::string& n : names) {
    const ConfigGroup* g = by_name(n);
    if (!g) g = by_class();
    if (!g) {
      return Status::error(c.source + ": layer " + std::string(layer) + ": its shard " + n +
                           " matches no target of any config group and is not in the ignore list");
    }
    if (g != found) {
      return Status::error(c.source + ": layer " + std::string(layer) + ": it and its shards fall in different groups (" +
                           found_for + " in " + (found ? found->name : std::string("none")) + ", " + n + " in " +
                           g->name + "); the shards of a fused layer must share one scheme");
    }
  }
  return found;
}

}  // namespace

Result<const ConfigGroup*> match_layer(const QuantConfig& config, std::string_view layer_name,
                                       std::span<const std::string> shard_names, std::string_view module_class) {
  if (config.quant_method == QuantMethod::kQuark) return match_quark_layer(config, layer_name, shard_names);
  return match_compressed_tensors(config, layer_name, shard_names, module_class);
}

Result<const Scheme*> resolve_scheme(const ConfigGroup& group, std::string_view layer_name) {
  if (group.quark) return resolve_quark_scheme(group, layer_name);
  return resolve_compressed_tensors(group, layer_name);
}

Result<const Scheme*> scheme_for_layer(const QuantConfig& config, std::string_view layer_name,
                                       std::span<const std::string> shard_names, std::string_view module_class) {
  QL_ASSIGN_OR_RETURN(const ConfigGroup* group, match_layer(config, layer_name, shard_names, module_class));
  if (!group) return static_cast<const Scheme*>(nullptr);
  return resolve_scheme(*group, layer_name);
}

}  // namespace qlinear
