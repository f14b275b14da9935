// quantize_checkpoint (quantize_checkpoint.hpp): the streaming `qlinear quantize`.
#include "qlinear/quantize_checkpoint.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/safetensors_internal.hpp"
#include "checkpoint/sharded_writer.hpp"
#include "checkpoint/staged_files.hpp"
#include "qlinear/checkpoint_writer.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/name_pattern.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {

namespace fs = std::filesystem;

namespace {

bool is_float_tensor(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// compressed-tensors names packed FP4 codes weight_packed; every other scheme keeps "weight".
std::string weight_name(const Scheme& s) {
  return (s.family == Family::kMxfp4 || s.family == Family::kNvfp4) ? "weight_packed" : "weight";
}

// Files of a model directory that are not weights or the files this writer makes: tokenizer, generation
// config, chat template, README... Other weight formats are left behind.
bool carried_over(const fs::directory_entry& e) {
  std::error_code ec;
  if (!e.is_regular_file(ec)) return false;
  const std::string name = e.path().filename().string();
  if (name.empty() || name[0] == '.' || name == "config.json" || name == kSafetensorsIndexName) return false;
  for (const char* ext : {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx"}) {
    if (name.ends_with(ext)) return false;
  }
  return true;
}

Result<std::string> read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return Status::error(p.string() + ": cannot open");
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

// Staged files of one write: removed unless committed.
class Staging {
 public:
  ~Staging() {
    if (committed_) return;
    for (const auto& [staged, final_path] : files_) ::unlink(staged.c_str());
  }
  void add(std::string staged, std::string final_path) { files_.emplace_back(std::move(staged), std::move(final_path)); }
  const std::vector<std::pair<std::string, std::string>>& files() const { return files_; }
  void committed() { committed_ = true; }

 private:
  std::vector<std::pair<std::string, std::string>> files_;
  bool committed_ = false;
};

Status stage_bytes(const std::string& dir, const std::string& file, const std::string& bytes, Staging& staging) {
  const std::string staged = detail::staged_name(dir, file);
  staging.add(staged, dir + "/" + file);
  // write_file_atomically writes <staged>'s own temporary, fsyncs it and renames it to <staged>.
  return detail::write_file_atomically(staged, {{bytes.data(), bytes.size()}});
}

}  // namespace

Result<uint64_t> checkpoint_tensor_bytes(const std::string& in) {
  QL_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(in));
  uint64_t total = 0;
  for (const std::string& name : ckpt.names()) {
    QL_ASSIGN_OR_RETURN(SafetensorsEntry e, ckpt.entry(name));
    total += e.end - e.begin;
  }
  return total;
}

Result<QuantizeCheckpointSummary> quantize_checkpoint(const std::string& in, const std::string& out,
                                                      const Scheme& scheme, const QuantizeCheckpointOptions& options) {
  QL_ASSIGN_OR_RETURN(NamePattern ignore, NamePattern::compile(options.ignore_regex, NamePattern::Anchor::kSearch));
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    return Status::error(out + " exists and is not empty; choose a new directory");
  }
  QL_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(in));
  const fs::path in_dir = fs::is_directory(in, ec) ? fs::path(in) : fs::path(in).parent_path();
  std::string base_config = "{}";
  if (fs::exists(in_dir / "config.json", ec)) {
    QL_ASSIGN_OR_RETURN(base_config, read_text(in_dir / "config.json"));
  }

  // Plan: which tensors are linear weights to quantize, what stays dense; a bound on any shard's header.
  QuantizeCheckpointSummary summary;
  std::vector<std::string> dense_linear;  // 2-D float weights --ignore keeps dense: the config's ignore list
  uint64_t header_bound = 256;
  for (const std::string& name : ckpt.names()) {
    QL_ASSIGN_OR_RETURN(SafetensorsEntry e, ckpt.entry(name));
    summary.input_bytes += e.end - e.begin;
    const bool linear = name.size() > 7 && name.ends_with(".weight") && e.shape.size() == 2 && is_float_tensor(e.dtype);
    const bool quantize = linear && !ignore.matches(name);
    if (linear && !quantize) dense_linear.push_back(name.substr(0, name.size() - 7));
    // An entry: its quoted name and {"dtype":"F8_E4M3","shape":[n,k],"data_offsets":[a,b]} with 20-digit numbers.
    header_bound += (quantize ? 8 : 1) * (name.size() + 32 + 160);
  }
  auto config = detail::parse_json_bounded(base_config);
  if (!config || !config->is_object()) {
    return Status::error((in_dir / "config.json").string() + ": not a JSON object" +
                         (config ? "" : " (" + config.message() + ")"));
  }
  QL_ASSIGN_OR_RETURN(auto qconfig, detail::parse_json_bounded(quantization_config_json(scheme, dense_linear)));
  (*config)["quantization_config"] = std::move(qconfig);
  const std::string config_text = config->dump(2) + "\n";

  fs::create_directories(out, ec);
  if (ec) return Status::error(out + ": cannot create directory: " + ec.message());
  detail::remove_stale_temporaries(out);
  Staging staging;
  detail::ShardedSafetensorsWriter writer(out, options.max_shard_bytes, header_bound);
  const QuantizeBufferReuse reuse_outputs;  // each weight's output buffer serves the next
  for (const std::string& name : ckpt.names()) {
    QL_ASSIGN_OR_RETURN(SafetensorsEntry e, ckpt.entry(name));
    QL_ASSIGN_OR_RETURN(Tensor t, ckpt.tensor(name));
    ckpt.load_pages(name);  // one call maps the tensor's pages (no fault per page)
    const bool linear = name.size() > 7 && name.ends_with(".weight") && e.shape.size() == 2 && is_float_tensor(e.dtype);
    std::vector<std::pair<std::string, Tensor>> group;
    if (linear && !ignore.matches(name)) {
      const std::string module = name.substr(0, name.size() - 7);
      auto layer = quantize_layer(module, scheme, t, options.layer);
      if (!layer) return Status::error(in + ": tensor " + name + " (" + t.describe() + "): " + layer.message());
      for (auto& [pname, p] : layer->params) {
        group.emplace_back(module + "." + (pname == "weight" ? weight_name(scheme) : pname), std::move(p));
      }
      ++summary.quantized;
    } else {
      group.emplace_back(name, std::move(t));
      ++summary.copied;
    }
    for (const auto& g : group) summary.output_bytes += static_cast<uint64_t>(g.second.nbytes());
    if (Status s = writer.add(group); !s) return s.with_context(out);
    group.clear();
    ckpt.release_pages(name);  // the input stays mapped, not resident
    if (options.on_tensor) options.on_tensor(name, e.end - e.begin);
  }
  // A file replaced while it was read: refuse what was written from it.
  QL_RETURN_IF_ERROR(ckpt.verify_unchanged());
  QL_ASSIGN_OR_RETURN(auto shards, writer.close());
  summary.shards = shards.size();
  std::map<std::string, std::string> weight_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    if (shards.size() == 1) std::snprintf(file, sizeof file, "model.safetensors");
    else std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    staging.add(shards[i].staged_path, out + "/" + file);
    for (const std::string& t : shards[i].tensors) weight_map[t] = file;
  }
  if (shards.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", summary.output_bytes}}}, {"weight_map", weight_map}};
    QL_RETURN_IF_ERROR(stage_bytes(out, kSafetensorsIndexName, index.dump(2) + "\n", staging));
  }
  if (fs::is_directory(in, ec)) {
    for (const auto& e : fs::directory_iterator(in_dir, ec)) {
      if (!carried_over(e)) continue;
      const std::string file = e.path().filename().string();
      QL_ASSIGN_OR_RETURN(std::string bytes, read_text(e.path()));
      QL_RETURN_IF_ERROR(stage_bytes(out, file, bytes, staging));
      summary.carried_files.push_back(file);
    }
  }
  const std::string config_staged = detail::staged_name(out, "config.json");
  QL_RETURN_IF_ERROR(detail::write_file_atomically(config_staged, {{config_text.data(), config_text.size()}}));
  staging.add(config_staged, out + "/config.json");
  // Commit: config.json (staged last) is renamed last; until then the directory has no config.json.
  const std::string config_path = out + "/config.json";
  if (::unlink(config_path.c_str()) != 0 && errno != ENOENT) {
    return Status::error(config_path + ": cannot remove the old config: " + std::strerror(errno));
  }
  QL_RETURN_IF_ERROR(detail::sync_directory(out));
  for (const auto& [staged, final_path] : staging.files()) {
    if (::rename(staged.c_str(), final_path.c_str()) != 0) {
      return Status::error(final_path + ": cannot rename the staged file into place: " + std::strerror(errno));
    }
  }
  staging.committed();
  QL_RETURN_IF_ERROR(detail::sync_directory(out));
  return summary;
}

}  // namespace qlinear
