// A checkpoint over several safetensors files: model.safetensors.index.json, or every *.safetensors file of a
// directory, or one file. Rules: include/qlinear/safetensors.hpp.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/safetensors_internal.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace detail {

bool is_contained_relative_path(const std::string& name) {
  if (name.empty()) return false;
  const fs::path p(name);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

}  // namespace detail

namespace {

// Reads a whole (small) text file; indexes are kilobytes, the cap only stops a mistaken multi-GB read.
Result<std::string> read_text_file(const fs::path& path, const std::string& what) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::error(what + ": cannot read: " + ec.message());
  if (size > kSafetensorsMaxHeaderBytes) {
    return Status::error(what + ": " + std::to_string(size) + " bytes, above the " +
                         std::to_string(kSafetensorsMaxHeaderBytes) + "-byte limit");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::error(what + ": cannot read");
  return text.str();
}

// {tensor: file} in document order, validated.
Result<std::vector<std::pair<std::string, std::string>>> read_weight_map(const fs::path& index_path) {
  const std::string where = "checkpoint index '" + index_path.string() + "'";
  QL_ASSIGN_OR_RETURN(const std::string text, read_text_file(index_path, where));
  auto index = detail::parse_json_rejecting_duplicates(
      text, [](const std::vector<std::string>& p, const std::string& key) {
        if (p.size() == 1 && p[0] == "weight_map") return "tensor '" + key + "' is listed twice in 'weight_map'";
        return "duplicate key '" + key + "'";
      });
  if (!index) return Status::error(where + ": " + index.message());
  if (!index->is_object()) {
    return Status::error(where + ": not a JSON object (got " + std::string(index->type_name()) + ")");
  }
  if (!index->contains("weight_map")) return Status::error(where + ": missing 'weight_map'");
  const ordered_json& map = (*index)["weight_map"];
  if (!map.is_object()) {
    return Status::error(where + ": 'weight_map' is not an object (got " + std::string(map.type_name()) + ")");
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [tensor, file] : map.items()) {
    if (!file.is_string()) {
      return Status::error(where + ": 'weight_map' entry for tensor '" + tensor + "' is not a file name (got " +
                           detail::json_excerpt(file) + ")");
    }
    const std::string name = file.get<std::string>();
    if (!detail::is_contained_relative_path(name)) {
      return Status::error(where + ": tensor '" + tensor + "' maps to '" + name +
                           "', which is not a relative path inside the checkpoint directory");
    }
    out.emplace_back(tensor, name);
  }
  return out;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir_or_file) {
  Checkpoint c;
  c.root_ = dir_or_file;
  const fs::path root(dir_or_file);
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (ec || !fs::exists(st)) return Status::error("checkpoint '" + dir_or_file + "' does not exist");

  // Opens `file` once, returning its index in c.files_.
  std::map<std::string, size_t> opened;
  auto open_file = [&](const fs::path& given) -> Result<size_t> {
    const fs::path file = given.lexically_normal();  // "a.safetensors" and "./a.safetensors" are one file
    const auto it = opened.find(file.string());
    if (it != opened.end()) return it->second;
    QL_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(file.string()));
    c.files_.push_back(std::move(f));
    opened.emplace(file.string(), c.files_.size() - 1);
    return c.files_.size() - 1;
  };
  // Makes every tensor of every opened file visible, refusing a name held by two files.
  auto claim_all = [&](const std::set<std::string>* only) -> Status {
    for (size_t i = 0; i < c.files_.size(); ++i) {
      for (const std::string& name : c.files_[i].names()) {
        const auto [it, inserted] = c.file_index_.emplace(name, i);
        if (!inserted) {
          return Status::error("checkpoint '" + dir_or_file + "': tensor '" + name + "' is in both '" +
                               c.files_[it->second].path() + "' and '" + c.files_[i].path() + "'");
        }
      }
    }
    if (only != nullptr) std::erase_if(c.file_index_, [&](const auto& kv) { return only->count(kv.first) == 0; });
    return Status::ok();
  };

  if (fs::is_regular_file(st)) {
    QL_RETURN_IF_ERROR(open_file(root).status());
    QL_RETURN_IF_ERROR(claim_all(nullptr));
    return c;
  }
  if (!fs::is_directory(st)) return Status::error("checkpoint '" + dir_or_file + "' is not a file or directory");

  const fs::path index_path = root / kSafetensorsIndexName;
  if (fs::exists(index_path, ec)) {
    QL_ASSIGN_OR_RETURN(const auto weight_map, read_weight_map(index_path));
    const std::string where = "checkpoint index '" + index_path.string() + "'";
    std::set<std::string> listed;
    for (const auto& [tensor, file] : weight_map) {
      const fs::path shard = root / file;
      if (!fs::exists(shard, ec)) {
        return Status::error(where + ": shard '" + file + "' (holding tensor '" + tensor + "') does not exist");
      }
      QL_ASSIGN_OR_RETURN(const size_t i, open_file(shard));
      if (!c.files_[i].has(tensor)) {
        return Status::error(where + ": tensor '" + tensor + "' is assigned to shard '" + file +
                             "', which does not hold it");
      }
      listed.insert(tensor);
    }
    // A tensor held by two shards is ambiguous even when the index names one of them.
    QL_RETURN_IF_ERROR(claim_all(&listed));
    return c;
  }

  std::vector<fs::path> shards;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) shards.push_back(e.path());
  }
  if (ec) return Status::error("checkpoint '" + dir_or_file + "': cannot list the directory: " + ec.message());
  if (shards.empty()) {
    return Status::error("checkpoint directory '" + dir_or_file + "' has neither " + kSafetensorsIndexName +
                         " nor any *.safetensors file");
  }
  std::sort(shards.begin(), shards.end());
  for (const fs::path& shard : shards) QL_RETURN_IF_ERROR(open_file(shard).status());
  QL_RETURN_IF_ERROR(claim_all(nullptr));
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(file_index_.size());
  for (const auto& [name, file] : file_index_) out.push_back(name);
  return out;
}

bool Checkpoint::has(const std::string& name) const { return file_index_.count(name) > 0; }

Result<std::string> Checkpoint::file_of(const std::string& name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end()) return Status::error("checkpoint '" + root_ + "': no tensor '" + name + "'");
  return files_[it->second].path();
}

Result<SafetensorsEntry> Checkpoint::entry(const std::string& name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end()) return Status::error("checkpoint '" + root_ + "': no tensor '" + name + "'");
  return files_[it->second].entry(name);
}

Result<Tensor> Checkpoint::tensor(const std::string& name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end()) return Status::error("checkpoint '" + root_ + "': no tensor '" + name + "'");
  return files_[it->second].tensor(name);
}

void Checkpoint::release_pages(const std::string& name) const {
  if (auto it = file_index_.find(name); it != file_index_.end()) files_[it->second].release_pages(name);
}

void Checkpoint::load_pages(const std::string& name) const {
  if (auto it = file_index_.find(name); it != file_index_.end()) files_[it->second].load_pages(name);
}

Status Checkpoint::verify_unchanged() const {
  for (const SafetensorsFile& f : files_) QL_RETURN_IF_ERROR(f.verify_unchanged());
  return Status::ok();
}

Status write_index_json(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                        std::optional<uint64_t> total_size) {
  const std::string path = (fs::path(dir) / kSafetensorsIndexName).string();
  ordered_json index = ordered_json::object();
  if (total_size) index["metadata"] = {{"total_size", *total_size}};
  ordered_json map = ordered_json::object();
  for (const auto& [tensor, file] : weight_map) {
    if (!detail::is_contained_relative_path(file)) {
      return Status::error("writing '" + path + "': tensor '" + tensor + "' maps to '" + file +
                           "', which is not a relative path inside '" + dir + "'");
    }
    map[tensor] = file;
  }
  index["weight_map"] = std::move(map);
  std::string text;
  try {
    text = index.dump(2) + "\n";
  } catch (const ordered_json::exception& e) {
    return Status::error("writing '" + path + "': " + e.what());
  }
  return detail::write_file_atomically(path, {{text.data(), text.size()}});
}

}  // namespace qlinear
