#include "qlinear/checkpoint_writer.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "qlinear/safetensors.hpp"

namespace qlinear {

namespace {

using Json = nlohmann::ordered_json;

// compressed-tensors QuantizationArgs for one operand.
Json ct_args(int bits, const char* type, const char* strategy, bool dynamic, bool symmetric = true) {
  Json j = {{"num_bits", bits}, {"type", type}, {"symmetric", symmetric}, {"strategy", strategy},
            {"dynamic", dynamic}, {"group_size", nullptr}, {"block_structure", nullptr}, {"actorder", nullptr},
            {"observer", dynamic ? Json(nullptr) : Json("minmax")}};
  return j;
}
Json with(Json j, const char* key, Json value) {
  j[key] = std::move(value);
  return j;
}

Json quark_mx_spec(const char* dtype, bool dynamic) {
  return {{"dtype", dtype},         {"qscheme", "per_group"}, {"group_size", 32}, {"ch_axis", -1},
          {"scale_format", "e8m0"}, {"is_dynamic", dynamic},  {"symmetric", nullptr},
          {"round_method", "half_even"}, {"scale_calculation_mode", "even"}};
}

Json ct_config(const Scheme& s, const std::vector<std::string>& ignore) {
  Json weights, input = nullptr;
  std::string format = "float-quantized";
  const std::string n(s.name);
  if (n == "w8a8-fp8-tensor") {
    weights = ct_args(8, "float", "tensor", false);
    input = ct_args(8, "float", "tensor", false);
  } else if (n == "w8a8-fp8-channel") {
    weights = ct_args(8, "float", "channel", false);
    input = ct_args(8, "float", "token", true);
  } else if (n == "w8a8-fp8-block") {
    weights = with(ct_args(8, "float", "block", false), "block_structure", {128, 128});
    input = with(ct_args(8, "float", "group", true), "group_size", 128);
  } else if (n == "w8a16-fp8") {
    weights = ct_args(8, "float", "channel", false);
  } else if (n.rfind("w8a8-int8", 0) == 0) {
    format = "int-quantized";
    weights = ct_args(8, "int", "channel", false);
    input = n == "w8a8-int8-dynamic" ? ct_args(8, "int", "token", true)
                                     : ct_args(8, "int", "tensor", false, n == "w8a8-int8-static");
  } else if (n == "w8a8-mxfp8" || n == "w8a16-mxfp8") {
    format = "mxfp8-quantized";
    weights = with(with(ct_args(8, "float", "group", false), "group_size", 32), "scale_dtype", "torch.uint8");
    if (n == "w8a8-mxfp8") {
      input = with(with(ct_args(8, "float", "group", true), "group_size", 32), "scale_dtype", "torch.uint8");
    }
  } else if (n == "w4a16-mxfp4") {
    format = "mxfp4-pack-quantized";
    weights = with(with(ct_args(4, "float", "group", false), "group_size", 32), "scale_dtype", "torch.uint8");
  } else {  // w4a4-nvfp4
    format = "nvfp4-pack-quantized";
    weights = with(ct_args(4, "float", "tensor_group", false), "group_size", 16);
    input = with(ct_args(4, "float", "tensor_group", true), "group_size", 16);
    input["dynamic"] = "local";
  }
  Json group = {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input},
                {"output_activations", nullptr}, {"format", format}};
  return {{"quant_method", "compressed-tensors"},
          {"format", format},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr}};
}

Json quark_config(const Scheme& s, const std::vector<std::string>& ignore) {
  const char* dtype = s.weight_key.dtype == DType::kF6E2M3 ? "fp6_e2m3" : "fp6_e3m2";
  Json global = {{"weight", quark_mx_spec(dtype, false)}, {"input_tensors", nullptr}, {"output_tensors", nullptr},
                 {"bias", nullptr}, {"target_device", nullptr}};
  return {{"quant_method", "quark"},
          {"export", {{"kv_cache_group", Json::array()}, {"pack_method", "reorder"}}},
          {"global_quant_config", global},
          {"layer_quant_config", Json::object()},
          {"layer_type_quant_config", Json::object()},
          {"exclude", ignore},
          {"algo_config", nullptr}};
}

Json config_for(const Scheme& s, const std::vector<std::string>& ignore) {
  return s.family == Family::kMxfp6 ? quark_config(s, ignore) : ct_config(s, ignore);
}

// compressed-tensors names packed FP4 codes weight_packed; every other scheme keeps "weight".
std::string weight_name(const Scheme& s) {
  return (s.family == Family::kMxfp4 || s.family == Family::kNvfp4) ? "weight_packed" : "weight";
}

Status write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp);
      return Status::error(path + ": cannot write");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    return Status::error(path + ": cannot rename into place: " + ec.message());
  }
  return Status::ok();
}

}  // namespace

std::string quantization_config_json(const Scheme& scheme, const std::vector<std::string>& ignore) {
  return config_for(scheme, ignore).dump(2);
}

Status write_quantized_checkpoint(const std::string& dir, const Scheme& scheme,
                                  const std::vector<CheckpointModule>& modules,
                                  const std::vector<std::pair<std::string, Tensor>>& dense,
                                  const std::string& base_config_json) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create directory: " + ec.message());
  std::vector<std::pair<std::string, Tensor>> tensors = dense;
  std::vector<std::string> ignore;
  for (const CheckpointModule& m : modules) {
    if (m.bias.defined()) tensors.emplace_back(m.name + ".bias", m.bias);
    if (m.layer == nullptr) {
      ignore.push_back(m.name);
      continue;
    }
    if (!m.layer->processed_by.empty()) {
      return Status::error("module " + m.name + " was processed by " + m.layer->processed_by +
                           "; checkpoints are written from unprocessed layers");
    }
    for (const auto& [pname, t] : m.layer->params) {
      tensors.emplace_back(m.name + "." + (pname == "weight" ? weight_name(scheme) : pname), t);
    }
  }
  QL_RETURN_IF_ERROR(write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  Json config = Json::parse(base_config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return Status::error("base config.json is not a JSON object");
  }
  config["quantization_config"] = config_for(scheme, ignore);
  return write_text_atomically(dir + "/config.json", config.dump(2) + "\n");
}

}  // namespace qlinear
