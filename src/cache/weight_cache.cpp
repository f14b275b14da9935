// The processed-weight cache (weight_cache.hpp, docs/WEIGHT_CACHE.md): keys, entry files, lookups.
#include "qlinear/weight_cache.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "qlinear/log.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {

namespace fs = std::filesystem;

// ---- Content hash -----------------------------------------------------------------------------------------
// Four independent multiply-rotate lanes over 32-byte stripes (the structure of xxHash64's main loop, our own
// constants and code), a 64-bit avalanche finalizer, and a chunked tree on top: each 4 MiB chunk is hashed
// alone (in parallel), then the chunk hashes are hashed in order with the total length. The result depends
// only on the bytes.
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kChunk = uint64_t{4} << 20;

inline uint64_t rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t lane(uint64_t acc, uint64_t word) { return rotl(acc + word * kP2, 31) * kP1; }
inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t hash_serial(const uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t a = seed + kP1, b = seed ^ kP2, c = seed + kP3, d = seed - kP1;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = lane(a, load64(p + i));
    b = lane(b, load64(p + i + 8));
    c = lane(c, load64(p + i + 16));
    d = lane(d, load64(p + i + 24));
  }
  uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + n;
  for (; i + 8 <= n; i += 8) h = rotl(h ^ lane(0, load64(p + i)), 27) * kP1 + kP3;
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP3), 11) * kP1;
  return avalanche(h);
}

}  // namespace

uint64_t content_hash(const void* data, uint64_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (bytes <= kChunk) return hash_serial(p, bytes, 0);
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  std::vector<uint64_t> h(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < chunks; ++i) {
    const uint64_t begin = static_cast<uint64_t>(i) * kChunk;
    h[i] = hash_serial(p + begin, std::min(kChunk, bytes - begin), static_cast<uint64_t>(i));
  }
  return hash_serial(reinterpret_cast<const uint8_t*>(h.data()), h.size() * 8, bytes);
}

std::string hash_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ---- Keys -----------------------------------------------------------------------------------------------

std::string WeightCacheKey::get(std::string_view field) const {
  for (const auto& [k, v] : fields) {
    if (k == field) return v;
  }
  return {};
}

namespace {

uint64_t tensor_hash(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  return content_hash(c.raw(), static_cast<uint64_t>(c.nbytes()));
}

std::string platform_capability(const Platform& p) {
  if (p.kind == PlatformKind::kCuda) return p.cuda ? "sm_" + std::to_string(p.cuda->compute_capability) : "sm_?";
  return p.cpu.to_string();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

constexpr std::string_view kKeyPrefix = "key.";
constexpr std::string_view kSumPrefix = "sum.";
constexpr const char* kPayloadList = "payload.tensors";
constexpr const char* kLayoutVersion = "payload.layout_version";
constexpr const char* kMetaChecksum = "entry.checksum";

// Checksum of every metadata entry but the checksum itself, in key order (std::map): "k=v\n" each.
std::string metadata_checksum(const std::map<std::string, std::string>& meta) {
  std::string text;
  for (const auto& [k, v] : meta) {
    if (k == kMetaChecksum) continue;
    text += k;
    text += '=';
    text += v;
    text += '\n';
  }
  return hash_hex(content_hash(text.data(), text.size()));
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size() && !s.empty()) {
    const size_t end = s.find(',', begin);
    out.push_back(s.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

// An entry file read and verified (format, metadata checksum, every payload checksum): the payload as
// zero-copy views of the mapping, or what is wrong.
struct VerifiedEntry {
  SafetensorsFile file;
  ProcessedWeights weights;
  uint64_t payload_bytes = 0;
};

Result<VerifiedEntry> read_entry(const std::string& path) {
  QL_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  const auto& meta = file.metadata();
  auto field = [&](const std::string& k) -> std::string {
    auto it = meta.find(k);
    return it == meta.end() ? std::string() : it->second;
  };
  const std::string format = field(std::string(kKeyPrefix) + "format_version");
  if (format != std::to_string(kWeightCacheFormatVersion)) {
    return Status::error("cache format version '" + format + "', this qlinear reads version " +
                         std::to_string(kWeightCacheFormatVersion));
  }
  const std::string want_meta_sum = metadata_checksum(meta);
  if (field(kMetaChecksum) != want_meta_sum) {
    return Status::error("metadata checksum mismatch (stored '" + field(kMetaChecksum) + "', computed " +
                         want_meta_sum + "): the entry's header is corrupt");
  }
  const std::vector<std::string> names = split_commas(field(kPayloadList));
  if (names.size() != file.names().size()) {
    return Status::error("the entry lists " + std::to_string(names.size()) + " payload tensors in " + kPayloadList +
                         " but holds " + std::to_string(file.names().size()));
  }
  VerifiedEntry e{file, {}, 0};
  try {
    e.weights.layout_version = static_cast<uint32_t>(std::stoul(field(kLayoutVersion)));
  } catch (const std::exception&) {
    return Status::error("unreadable " + std::string(kLayoutVersion) + " '" + field(kLayoutVersion) + "'");
  }
  for (const std::string& name : names) {
    QL_ASSIGN_OR_RETURN(Tensor t, file.tensor(name));
    const std::string stored = field(std::string(kSumPrefix) + name);
    const std::string computed = hash_hex(content_hash(t.raw(), static_cast<uint64_t>(t.nbytes())));
    if (stored != computed) {
      return Status::error("payload tensor '" + name + "' checksum mismatch (stored '" + stored + "', computed " +
                           computed + "): the entry is corrupt");
    }
    e.payload_bytes += static_cast<uint64_t>(t.nbytes());
    e.weights.tensors.emplace_back(name, std::move(t));
  }
  return e;
}

// The first key field that differs, as a reason; empty when all match.
std::string key_difference(const WeightCacheKey& want, const std::map<std::string, std::string>& meta) {
  for (const auto& [k, v] : want.fields) {
    auto it = meta.find(std::string(kKeyPrefix) + k);
    const std::string got = it == meta.end() ? std::string("<absent>") : it->second;
    if (got != v) {
      // Long fields (tensor lists, hashes) are named, not printed in full.
      const bool short_values = got.size() <= 80 && v.size() <= 80;
      return "key field " + k + " differs" +
             (short_values ? ": the entry has '" + got + "', this load needs '" + v + "'" : std::string());
    }
  }
  return {};
}

std::string sanitize(const std::string& s) {
  std::string out = s.empty() ? std::string("unnamed") : s;
  for (char& ch : out) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                    ch == '_' || ch == '-';
    if (!ok) ch = '_';
  }
  if (out[0] == '.') out[0] = '_';  // never a hidden file (temporary files are)
  return out;
}

bool is_entry_name(const std::string& name) {
  return name.size() > kWeightCacheSuffix.size() && name[0] != '.' &&
         name.compare(name.size() - kWeightCacheSuffix.size(), kWeightCacheSuffix.size(), kWeightCacheSuffix) == 0;
}

// write_safetensors' temporary files of an entry: ".<entry>.tmp.<pid>.<n>".
bool is_entry_temp_name(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find(std::string(kWeightCacheSuffix) + ".tmp.") != std::string::npos;
}

}  // namespace

WeightCacheKey weight_cache_key(const LinearLayer& layer, const LinearKernel& kernel, const Platform& platform,
                                std::string_view scheme) {
  WeightCacheKey key;
  auto add = [&](std::string k, std::string v) { key.fields.emplace_back(std::move(k), std::move(v)); };
  add("format_version", std::to_string(kWeightCacheFormatVersion));
  add("qlinear_version", std::string(kQlinearVersion));
  add("layer", layer.name);
  add("config", layer.config.to_string() + " in=" + std::string(name(layer.config.input_dtype)));
  add("scheme", std::string(scheme));
  add("kernel", std::string(kernel.name()));
  add("layout_version", std::to_string(kernel.processed_layout_version()));
  add("tp_rank", std::to_string(layer.tp_rank));
  add("tp_size", std::to_string(layer.tp_size));
  add("platform_kind", std::string(platform_kind_name(platform.kind)));
  add("platform_capability", platform_capability(platform));
  std::string tensors, hashes;
  for (const auto& [n, t] : layer.params) {  // std::map: sorted by name
    if (!t.defined()) continue;
    tensors += (tensors.empty() ? "" : ";") + n + ":" + t.describe();
    hashes += hash_hex(tensor_hash(t));
  }
  add("checkpoint_tensors", tensors);
  add("checkpoint_hash", hash_hex(content_hash(hashes.data(), hashes.size())));
  return key;
}

std::string WeightCache::entry_path(const LinearLayer& layer) const {
  const std::string file = sanitize(layer.name) + ".tp" + std::to_string(layer.tp_rank) + "of" +
                           std::to_string(layer.tp_size) + std::string(kWeightCacheSuffix);
  return (fs::path(dir_) / file).string();
}

Status WeightCache::store(const LinearLayer& layer, const LinearKernel& kernel, const WeightCacheKey& key) const {
  QL_ASSIGN_OR_RETURN(ProcessedWeights w, kernel.export_processed(layer));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::error("cannot create weight cache directory '" + dir_ + "': " + ec.message());
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : key.fields) meta[std::string(kKeyPrefix) + k] = v;
  std::string list;
  for (const auto& [n, t] : w.tensors) {
    if (n.empty() || n.find(',') != std::string::npos) {
      return Status::error("kernel " + std::string(kernel.name()) + " exported a tensor named '" + n +
                           "' (names must be non-empty and free of commas)");
    }
    list += (list.empty() ? "" : ",") + n;
    meta[std::string(kSumPrefix) + n] = hash_hex(content_hash(t.raw(), static_cast<uint64_t>(t.nbytes())));
  }
  meta[kPayloadList] = list;
  meta[kLayoutVersion] = std::to_string(w.layout_version);
  meta[kMetaChecksum] = metadata_checksum(meta);
  return write_safetensors(entry_path(layer), w.tensors, meta);
}

Result<WeightCacheOutcome> WeightCache::process(LinearLayer& layer, const LinearKernel& kernel,
                                                const Platform& platform, std::string_view scheme) const {
  WeightCacheOutcome out;
  const std::string path = entry_path(layer);
  WeightCacheKey key;
  if (!kernel.supports_pre_processed_weights()) {
    out.miss_reason = "kernel " + std::string(kernel.name()) + " does not support pre-processed weights";
  } else {
    auto t0 = std::chrono::steady_clock::now();
    key = weight_cache_key(layer, kernel, platform, scheme);
    out.key_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      out.miss_reason = "no entry " + path;
    } else if (auto entry = read_entry(path); !entry) {
      out.miss_reason = "entry " + path + " unusable: " + entry.message();
    } else if (std::string diff = key_difference(key, entry->file.metadata()); !diff.empty()) {
      out.miss_reason = "entry " + path + " is for another load: " + diff;
    } else if (Status s = kernel.import_processed(layer, entry->weights); !s) {
      out.miss_reason = "entry " + path + " could not be imported: " + s.message();
    } else {
      out.hit = true;
    }
    out.load_ms = ms_since(t0);
  }
  if (out.hit) {
    if (log_enabled("cache")) log_line("cache", "hit " + layer.name + " (" + path + ")");
    return out;
  }
  if (log_enabled("cache")) log_line("cache", "miss " + layer.name + ": " + out.miss_reason);
  auto t0 = std::chrono::steady_clock::now();
  QL_RETURN_IF_ERROR(kernel.process_weights_after_loading(layer));
  out.process_ms = ms_since(t0);
  if (kernel.supports_pre_processed_weights()) {
    t0 = std::chrono::steady_clock::now();
    if (Status s = store(layer, kernel, key); !s) {
      out.store_error = s.message();
      if (log_enabled("cache")) log_line("cache", "store " + layer.name + " failed: " + s.message());
    } else {
      out.stored = true;
    }
    out.store_ms = ms_since(t0);
  }
  return out;
}

Result<std::vector<WeightCacheEntryInfo>> list_weight_cache(const std::string& dir, bool verify) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::error("weight cache directory '" + dir + "' does not exist");
  std::vector<WeightCacheEntryInfo> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file(ec) || !is_entry_name(name)) continue;
    WeightCacheEntryInfo info;
    info.path = it->path().string();
    info.file_bytes = static_cast<uint64_t>(it->file_size(ec));
    info.verified = verify;
    if (verify) {
      auto e = read_entry(info.path);
      if (!e) {
        info.ok = false;
        info.problem = e.message();
      } else {
        info.payload_bytes = e->payload_bytes;
      }
    }
    if (auto f = SafetensorsFile::open(info.path); f) {
      for (const auto& [k, v] : f->metadata()) {
        if (k.rfind(kKeyPrefix, 0) == 0) info.key[k.substr(kKeyPrefix.size())] = v;
      }
      if (!verify) {
        for (const std::string& n : f->names()) {
          if (auto en = f->entry(n); en) info.payload_bytes += en->end - en->begin;
        }
      }
    } else {
      info.ok = false;
      info.problem = f.message();
    }
    entries.push_back(std::move(info));
  }
  if (ec) return Status::error("cannot list weight cache directory '" + dir + "': " + ec.message());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return entries;
}

Result<int> clear_weight_cache(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::error("weight cache directory '" + dir + "' does not exist");
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) && (is_entry_name(name) || is_entry_temp_name(name))) doomed.push_back(it->path());
  }
  if (ec) return Status::error("cannot list weight cache directory '" + dir + "': " + ec.message());
  int removed = 0;
  for (const fs::path& p : doomed) {
    if (!fs::remove(p, ec) || ec) return Status::error("cannot remove '" + p.string() + "': " + ec.message());
    ++removed;
  }
  return removed;
}

}  // namespace qlinear
