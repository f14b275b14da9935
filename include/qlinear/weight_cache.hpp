#pragma once
// A processed-weight cache on disk: kernels that support pre-processed weights (kernel.hpp) save the state
// process_weights_after_loading computed, and a later load imports it instead of processing again
// (vLLM's supports_pre_processed_weights and its "fast start" weight cache). Format: docs/WEIGHT_CACHE.md.
//
// One entry per layer and tensor-parallel rank, a safetensors file <dir>/<layer>.tp<r>of<w>.qlcache written
// atomically (temporary name, fsync, rename). Its metadata holds the key: everything that changes the
// processed bytes (the checkpoint tensors' names, dtypes, shapes and content hash, the layer config and
// scheme, the kernel and its layout version, the tensor-parallel rank and size, the platform, the cache format
// and qlinear version) and a checksum of every payload tensor and of the metadata itself. A lookup compares
// every field and every checksum; any difference, truncation or corruption is a miss with a reason, the layer
// is processed normally and the entry rewritten. A cache problem never fails a load and never yields a weight
// other than the one processing would have produced.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qlinear/kernel.hpp"

namespace qlinear {

inline constexpr int kWeightCacheFormatVersion = 1;
inline constexpr std::string_view kWeightCacheSuffix = ".qlcache";
// The qlinear version recorded in every entry (CMakeLists.txt's project VERSION).
inline constexpr std::string_view kQlinearVersion = "0.1.0";

// A 64-bit content hash of `bytes` (not cryptographic: it detects corruption and changed checkpoints, not
// tampering). Chunked and parallel over OpenMP threads, with a result independent of the thread count.
uint64_t content_hash(const void* data, uint64_t bytes);
// 16 lowercase hex digits.
std::string hash_hex(uint64_t h);

// The key of one entry: named fields in a fixed order (stored as metadata "key.<name>").
struct WeightCacheKey {
  std::vector<std::pair<std::string, std::string>> fields;
  // The field's value, empty when absent.
  std::string get(std::string_view field) const;
};

// The key of `layer` (unprocessed: its checkpoint tensors as loaded) processed by `kernel` on `platform`.
// Hashes every tensor of the layer (the expensive part: one read of the checkpoint bytes).
WeightCacheKey weight_cache_key(const LinearLayer& layer, const LinearKernel& kernel, const Platform& platform,
                                std::string_view scheme);

struct WeightCacheOutcome {
  bool hit = false;
  std::string miss_reason;  // why the entry was not used (empty on a hit)
  bool stored = false;      // a new entry was written after processing
  std::string store_error;  // why storing failed (a warning; the layer is processed either way)
  double key_ms = 0;        // hashing the checkpoint tensors for the key
  double load_ms = 0;       // reading, verifying and importing the entry (on a miss: as far as it got)
  double process_ms = 0;    // process_weights_after_loading (misses only)
  double store_ms = 0;      // exporting and writing the entry (misses only)
};

class WeightCache {
 public:
  explicit WeightCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // Where the entry of `layer` (by name and tensor-parallel rank) lives.
  std::string entry_path(const LinearLayer& layer) const;

  // Processes `layer` with `kernel`, from its entry when one exists and matches in every field and checksum;
  // otherwise by process_weights_after_loading, then stores a new entry (kernels that support pre-processed
  // weights only; the directory is created when missing). Fails only when processing itself fails. Each miss
  // is logged with its reason to QLINEAR_LOG=cache.
  Result<WeightCacheOutcome> process(LinearLayer& layer, const LinearKernel& kernel, const Platform& platform,
                                     std::string_view scheme = {}) const;

  // Exports `layer` (processed by `kernel`) under `key` into its entry file.
  Status store(const LinearLayer& layer, const LinearKernel& kernel, const WeightCacheKey& key) const;

 private:
  std::string dir_;
};

// One entry file as `qlinear cache ls|verify` shows it.
struct WeightCacheEntryInfo {
  std::string path;
  uint64_t file_bytes = 0;
  uint64_t payload_bytes = 0;
  std::map<std::string, std::string> key;  // key fields (empty when the file cannot be read)
  bool verified = false;                   // checksums were checked
  bool ok = true;                          // readable, and (when verified) every checksum matches
  std::string problem;                     // what is wrong when !ok
};

// The entries (*.qlcache) of `dir`, sorted by path; with `verify`, every payload and metadata checksum is
// checked. An error only when `dir` cannot be listed.
Result<std::vector<WeightCacheEntryInfo>> list_weight_cache(const std::string& dir, bool verify);
// Removes every entry (and leftover temporary file of one) in `dir`, nothing else; returns how many files.
Result<int> clear_weight_cache(const std::string& dir);

}  // namespace qlinear
