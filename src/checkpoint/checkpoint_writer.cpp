#include "qlinear/checkpoint_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_internal.hpp"
#include "checkpoint/staged_files.hpp"
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

const char* quark_dtype(DType d) {
  switch (d) {
    case DType::kF6E2M3: return "fp6_e2m3";
    case DType::kF6E3M2: return "fp6_e3m2";
    case DType::kF4E2M1: return "fp4";
    default: return "fp8_e4m3";
  }
}

// Quark's FP8 E4M3 per-tensor static spec (the input of its mxfp4_fp8 scheme).
Json quark_fp8_tensor_spec() {
  return {{"dtype", "fp8_e4m3"}, {"qscheme", "per_tensor"}, {"group_size", nullptr}, {"ch_axis", nullptr},
          {"scale_format", nullptr}, {"is_dynamic", false}, {"symmetric", true}, {"round_method", "half_even"},
          {"scale_type", "float"}};
}

// Quark writes the OCP-MX schemes with quantized activations and every MXFP6 one; compressed-tensors the rest.
bool written_as_quark(const Scheme& s) {
  if (s.family == Family::kMxfp6) return true;
  return s.family == Family::kMxfp4 && s.activation_key && *s.activation_key != kMxfp8Dynamic;
}

Json quark_config(const Scheme& s, const std::vector<std::string>& ignore) {
  Json input = nullptr;
  if (s.activation_key) {
    input = s.activation_key->scale.dtype == DType::kE8M0 ? quark_mx_spec(quark_dtype(s.activation_key->dtype), true)
                                                           : quark_fp8_tensor_spec();
  }
  Json global = {{"weight", quark_mx_spec(quark_dtype(s.weight_key.dtype), false)}, {"input_tensors", input},
                 {"output_tensors", nullptr}, {"bias", nullptr}, {"target_device", nullptr}};
  return {{"quant_method", "quark"},
          {"export", {{"kv_cache_group", Json::array()}, {"pack_method", "reorder"}}},
          {"global_quant_config", global},
          {"layer_quant_config", Json::object()},
          {"layer_type_quant_config", Json::object()},
          {"exclude", ignore},
          {"algo_config", nullptr}};
}

Json config_for(const Scheme& s, const std::vector<std::string>& ignore) {
  return written_as_quark(s) ? quark_config(s, ignore) : ct_config(s, ignore);
}

// compressed-tensors names packed FP4 codes weight_packed; Quark and every other scheme keep "weight".
std::string weight_name(const Scheme& s) {
  if (written_as_quark(s)) return "weight";
  return (s.family == Family::kMxfp4 || s.family == Family::kNvfp4) ? "weight_packed" : "weight";
}

}  // namespace

std::string quantization_config_json(const Scheme& scheme, const std::vector<std::string>& ignore) {
  return config_for(scheme, ignore).dump(2);
}

Status write_quantized_checkpoint(const std::string& dir, const Scheme& scheme,
                                  const std::vector<CheckpointModule>& modules,
                                  const std::vector<std::pair<std::string, Tensor>>& dense,
                                  const std::string& base_config_json) {
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
    // A module is one checkpoint tensor set: a fused layer whose shards carry their own scalars or their own
    // 128x128 grids would be read back as one grid over all its rows. Checkpoints store such shards as modules
    // of their own (q_proj, k_proj, v_proj), which the loader fuses.
    const LinearConfig& c = m.layer->config;
    const auto sc = m.layer->params.find("weight_scale");
    const bool per_shard_scalars =
        c.weight_key.scale.group.is_per_tensor() && sc != m.layer->params.end() && sc->second.numel() > 1;
    const ScaleRowGrid grid = scale_row_grid(c);
    if (c.num_shards() > 1 && (per_shard_scalars || !grid.uniform)) {
      const std::string what = per_shard_scalars ? std::string("a weight scale per shard")
                                                 : "their own weight-block grids (" + grid.to_string() + ")";
      return Status::error("module " + m.name + " is a fused layer of " + std::to_string(c.num_shards()) +
                           " shards with " + what + "; write each shard as a module of its own (the loader fuses them)");
    }
    for (const auto& [pname, t] : m.layer->params) {
      tensors.emplace_back(m.name + "." + (pname == "weight" ? weight_name(scheme) : pname), t);
    }
  }
  // Everything that can be refused is refused before anything is written.
  auto config = detail::parse_json_bounded(base_config_json);
  if (!config || !config->is_object()) {
    return Status::error("base config.json is not a JSON object" + (config ? "" : " (" + config.message() + ")"));
  }
  (*config)["quantization_config"] = config_for(scheme, ignore);
  const std::string config_text = config->dump(2) + "\n";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create directory: " + ec.message());
  detail::remove_stale_temporaries(dir);

  // A loader accepts the directory only with config.json in it, so config.json is what commits the write:
  //   1. both files are written completely, fsync'ed, under hidden staged names (a failure here leaves a
  //      checkpoint that was in `dir` as it was);
  //   2. the old config.json is removed (from here on the directory is refused until step 4);
  //   3. the weights are renamed into place;
  //   4. the config is renamed into place, and the directory synced.
  // A failure or a kill during 2-4 leaves no config.json: never new weights read with an old config.
  const std::string weights_staged = detail::staged_name(dir, "model.safetensors");
  const std::string config_staged = detail::staged_name(dir, "config.json");
  auto cleanup = [&](Status s) {
    ::unlink(weights_staged.c_str());
    ::unlink(config_staged.c_str());
    return s;
  };
  if (Status s = write_safetensors(weights_staged, tensors, {{"format", "pt"}}); !s) {
    return cleanup(Status::error(dir + "/model.safetensors: " + s.message()));
  }
  const std::vector<detail::ByteSpan> config_bytes = {{config_text.data(), config_text.size()}};
  if (Status s = detail::write_file_atomically(config_staged, config_bytes); !s) {
    return cleanup(Status::error(dir + "/config.json: " + s.message()));
  }
  const std::string config_path = dir + "/config.json", weights_path = dir + "/model.safetensors";
  if (::unlink(config_path.c_str()) != 0 && errno != ENOENT) {
    return cleanup(Status::error(config_path + ": cannot remove the old config: " + std::strerror(errno)));
  }
  if (Status s = detail::sync_directory(dir); !s) return cleanup(s);
  if (::rename(weights_staged.c_str(), weights_path.c_str()) != 0) {
    return cleanup(Status::error(weights_path + ": cannot rename the staged file into place: " + std::strerror(errno)));
  }
  if (::rename(config_staged.c_str(), config_path.c_str()) != 0) {
    return cleanup(Status::error(config_path + ": cannot rename the staged file into place: " + std::strerror(errno)));
  }
  return detail::sync_directory(dir);
}

}  // namespace qlinear
