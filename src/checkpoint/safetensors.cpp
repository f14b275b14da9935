// One safetensors file: strict header validation, a read-only memory mapping, zero-copy tensor views, and
// the writer. Layout and guarantees: include/qlinear/safetensors.hpp.
#include "qlinear/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "checkpoint/safetensors_internal.hpp"
#include "checkpoint/staged_files.hpp"

namespace qlinear {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// ---- Strict JSON ------------------------------------------------------------------------------------------

namespace detail {

Result<ordered_json> parse_json_rejecting_duplicates(std::string_view text,
                                                     const DuplicateKeyMessage& on_duplicate) {
  return parse_json_bounded(text, &on_duplicate);
}

Status write_file_atomically(const std::string& path, const std::vector<ByteSpan>& pieces) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // Hidden, unique per process and call, in the target's directory so that rename() stays on one file system.
  static std::atomic<uint64_t> counter{0};
  std::string tmp_name = ".";  // built by appending: GCC 12 warns falsely (-Wrestrict) on "." + std::string
  tmp_name += target.filename().string();
  tmp_name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const fs::path tmp = dir / tmp_name;
  const std::string where = "writing '" + path + "'";
  remove_stale_temporaries(dir.string());  // a killed writer's leftovers; ours are named by this pid
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    return Status::error(where + ": cannot create temporary file '" + tmp.string() + "': " + std::strerror(errno));
  }
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::error(where + ": " + what + ": " + std::strerror(err));
  };
  for (const ByteSpan& piece : pieces) {
    const char* p = static_cast<const char*>(piece.data);
    size_t left = piece.size;
    while (left > 0) {
      const ssize_t n = ::write(fd, p, std::min<size_t>(left, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail("write failed", n < 0 ? errno : EIO);
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) return fail("fsync failed", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::error(where + ": close failed: " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::error(where + ": cannot rename the temporary file into place: " + std::strerror(err));
  }
  // Makes the rename itself durable. Best effort: the file is complete and in place either way.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

}  // namespace detail

// ---- Reading ----------------------------------------------------------------------------------------------

namespace {

// The whole file, mapped PROT_READ / MAP_PRIVATE. Tensor views hold it through aliasing shared_ptrs.
struct Mapping {
  void* base = nullptr;
  size_t size = 0;
  Mapping(void* b, size_t s) : base(b), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(base, size); }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(base); }
};

struct FileIdentity {
  dev_t dev;
  ino_t ino;
  off_t size;
  timespec mtime;
};

FileIdentity identity_of(const struct stat& st) { return {st.st_dev, st.st_ino, st.st_size, st.st_mtim}; }

// "F64, F32, ..." from the format table: the dtypes a header may name.
std::string supported_dtypes() {
  std::string s;
  for (const FormatTraits& t : all_formats()) {
    if (t.safetensors_name.empty()) continue;
    s += (s.empty() ? "" : ", ") + std::string(t.safetensors_name);
  }
  return s;
}

// Only safetensors names: dtype_from_name also takes qlinear's own names ("f32"), which a header must not use.
std::optional<DType> safetensors_dtype(const std::string& text) {
  const std::optional<DType> d = dtype_from_name(text);
  if (!d || traits(*d).safetensors_name != text) return std::nullopt;
  return d;
}

int alignment_of(DType d) { return std::max(1, element_size(d)); }

bool as_u64(const ordered_json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;  // nlohmann parses every non-negative integer literal as unsigned
  *out = v.get<uint64_t>();
  return true;
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const ordered_json& v, uint64_t data_size) {
  const std::string where = "tensor '" + name + "': ";
  if (!v.is_object()) return Status::error(where + "entry is not an object (got " + v.type_name() + ")");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) return Status::error(where + "missing '" + field + "'");
  }
  SafetensorsEntry e;
  e.name = name;

  const ordered_json& dtype = v["dtype"];
  if (!dtype.is_string()) return Status::error(where + "'dtype' is not a string (got " + detail::json_excerpt(dtype) + ")");
  const std::optional<DType> d = safetensors_dtype(dtype.get<std::string>());
  if (!d) {
    return Status::error(where + "unknown dtype '" + dtype.get<std::string>() + "' (supported: " +
                         supported_dtypes() + ")");
  }
  e.dtype = *d;

  const ordered_json& shape = v["shape"];
  if (!shape.is_array()) return Status::error(where + "'shape' is not an array (got " + detail::json_excerpt(shape) + ")");
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = 0;
    if (!as_u64(shape[i], &dim) || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::error(where + "shape[" + std::to_string(i) + "] = " + detail::json_excerpt(shape[i]) +
                           " is not a non-negative integer");
    }
    e.shape.push_back(static_cast<int64_t>(dim));
    overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
  }
  // Zero in any dimension makes the product 0 whatever overflowed before it.
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) numel = 0, overflow = false;

  const ordered_json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0], &e.begin) || !as_u64(offsets[1], &e.end)) {
    return Status::error(where + "'data_offsets' must be two non-negative integers [begin, end] (got " +
                         detail::json_excerpt(offsets) + ")");
  }
  const std::string range = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.end < e.begin) return Status::error(where + range + ": end is before begin");
  if (e.end > data_size) {
    return Status::error(where + range + " run past the end of the data section (" + std::to_string(data_size) +
                         " bytes)");
  }

  // Every format spends at least 4 bits per element, so more than 2 elements per byte of the data section
  // cannot fit; checking that first keeps storage_bytes() far from overflow.
  const uint64_t have = e.end - e.begin;
  const std::string declared = std::string(dtype.get<std::string>()) + " " + shape_to_string(e.shape);
  if (overflow || numel > 2 * data_size + 2) {
    return Status::error(where + "shape " + declared + " needs more bytes than the whole data section (" +
                         std::to_string(data_size) + " bytes)");
  }
  const uint64_t need = static_cast<uint64_t>(storage_bytes(e.dtype, static_cast<int64_t>(numel)));
  if (need != have) {
    return Status::error(where + "shape " + declared + " needs " + std::to_string(need) + " bytes but " + range +
                         " hold " + std::to_string(have));
  }
  return e;
}

Result<std::map<std::string, std::string>> parse_metadata(const ordered_json& v) {
  if (!v.is_object()) return Status::error(std::string("'__metadata__' is not an object (got ") + v.type_name() + ")");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return Status::error("'__metadata__' value for key '" + key + "' is not a string (got " + detail::json_excerpt(value) + ")");
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

}  // namespace

struct SafetensorsFile::State {
  std::string path;
  std::shared_ptr<const Mapping> mapping;
  uint64_t data_offset = 0;
  std::vector<std::string> names;
  std::unordered_map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  FileIdentity identity{};
};

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const std::string where = "safetensors file '" + path + "'";
  auto fail = [&](const std::string& what) { return Status::error(where + ": " + what); };

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return fail(std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return fail("file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  }
  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (base == MAP_FAILED) return fail(std::string("cannot mmap: ") + std::strerror(map_errno));
  auto mapping = std::make_shared<const Mapping>(base, file_size);

  // N: little-endian u64, assembled bytewise so that the host's byte order does not matter.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | mapping->bytes()[i];
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return fail("header length " + std::to_string(header_len) + " is above the " +
                std::to_string(kSafetensorsMaxHeaderBytes) + "-byte limit (corrupt file?)");
  }
  if (header_len > file_size - 8) {
    return fail("header length " + std::to_string(header_len) + " runs past the end of the file (" +
                std::to_string(file_size) + " bytes)");
  }
  const uint64_t data_offset = 8 + header_len;
  const uint64_t data_size = file_size - data_offset;

  auto state = std::make_shared<State>();
  state->path = path;
  state->data_offset = data_offset;
  state->identity = identity_of(st);

  const std::string_view header_text(reinterpret_cast<const char*>(mapping->bytes() + 8), header_len);
  auto header = detail::parse_json_rejecting_duplicates(
      header_text, [](const std::vector<std::string>& p, const std::string& key) {
        if (p.empty()) return "duplicate tensor name '" + key + "' in the header";
        return "duplicate key '" + key + "' in the header entry '" + p[0] + "'";
      });
  if (!header) return fail(header.message());
  if (!header->is_object()) return fail(std::string("header is not a JSON object (got ") + header->type_name() + ")");

  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") {
      auto metadata = parse_metadata(value);
      if (!metadata) return fail(metadata.message());
      state->metadata = std::move(*metadata);
      continue;
    }
    auto entry = parse_entry(name, value, data_size);
    if (!entry) return fail(entry.message());
    state->names.push_back(name);
    state->entries.emplace(name, std::move(*entry));
  }

  // Holes are allowed, overlaps are not. Empty ranges hold nothing and overlap nothing.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& [name, e] : state->entries) {
    if (e.end > e.begin) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& a = *by_offset[i - 1];
    const SafetensorsEntry& b = *by_offset[i];
    if (b.begin < a.end) {
      auto range = [](const SafetensorsEntry& e) {
        return std::string("[").append(std::to_string(e.begin)).append(", ").append(std::to_string(e.end)) + ")";
      };
      return fail("byte ranges of tensors '" + a.name + "' " + range(a) + " and '" + b.name + "' " + range(b) +
                  " overlap");
    }
  }
  state->mapping = std::move(mapping);
  return SafetensorsFile(std::move(state));
}

const std::string& SafetensorsFile::path() const { return state_->path; }
const std::vector<std::string>& SafetensorsFile::names() const { return state_->names; }
bool SafetensorsFile::has(const std::string& name) const { return state_->entries.count(name) > 0; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return state_->metadata; }
uint64_t SafetensorsFile::file_size() const { return state_->mapping->size; }
uint64_t SafetensorsFile::data_offset() const { return state_->data_offset; }

Result<SafetensorsEntry> SafetensorsFile::entry(const std::string& name) const {
  const auto it = state_->entries.find(name);
  if (it == state_->entries.end()) {
    return Status::error("safetensors file '" + state_->path + "': no tensor '" + name + "'");
  }
  return it->second;
}

Result<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  QL_ASSIGN_OR_RETURN(const SafetensorsEntry e, entry(name));
  const uint8_t* p = state_->mapping->bytes() + state_->data_offset + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % alignment_of(e.dtype) == 0) {
    // Aliasing shared_ptr: shares ownership of the mapping, points at the tensor's bytes.
    std::shared_ptr<void> owner(std::const_pointer_cast<Mapping>(state_->mapping), const_cast<uint8_t*>(p));
    return Tensor::from_blob(const_cast<uint8_t*>(p), e.dtype, e.shape, std::move(owner));
  }
  Tensor copy = Tensor::empty(e.dtype, e.shape);
  std::memcpy(copy.raw(), p, e.end - e.begin);
  return copy;
}

namespace {

// The whole pages of [begin, end) of a mapping: [first, last), empty when none.
std::pair<uint64_t, uint64_t> whole_pages(uint64_t begin, uint64_t end, bool outward) {
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t size = page > 0 ? static_cast<uint64_t>(page) : 4096;
  if (outward) return {begin / size * size, (end + size - 1) / size * size};
  return {(begin + size - 1) / size * size, end / size * size};
}

}  // namespace

void SafetensorsFile::release_pages(const std::string& name) const {
  auto it = state_->entries.find(name);
  if (it == state_->entries.end()) return;
  const uint64_t begin = state_->data_offset + it->second.begin, end = state_->data_offset + it->second.end;
  const auto [first, last] = whole_pages(begin, end, false);
  if (last <= first) return;
  // A private read-only file mapping: dropped pages are read from the file again if touched.
  (void)::madvise(static_cast<uint8_t*>(state_->mapping->base) + first, last - first, MADV_DONTNEED);
}

void SafetensorsFile::load_pages(const std::string& name) const {
  auto it = state_->entries.find(name);
  if (it == state_->entries.end()) return;
  const uint64_t begin = state_->data_offset + it->second.begin, end = state_->data_offset + it->second.end;
  auto [first, last] = whole_pages(begin, end, true);
  last = std::min<uint64_t>(last, (state_->mapping->size + 4095) / 4096 * 4096);
  if (last <= first) return;
  void* at = static_cast<uint8_t*>(state_->mapping->base) + first;
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14
#endif
  if (::madvise(at, last - first, MADV_POPULATE_READ) != 0) (void)::madvise(at, last - first, MADV_WILLNEED);
}

Status SafetensorsFile::verify_unchanged() const {
  const std::string where = "safetensors file '" + state_->path + "' changed since it was opened: ";
  struct stat st {};
  if (::stat(state_->path.c_str(), &st) != 0) return Status::error(where + "cannot stat: " + std::strerror(errno));
  const FileIdentity now = identity_of(st);
  const FileIdentity& then = state_->identity;
  if (now.dev != then.dev || now.ino != then.ino) return Status::error(where + "it was replaced by another file");
  if (now.size != then.size) {
    return Status::error(where + "size went from " + std::to_string(then.size) + " to " + std::to_string(now.size) +
                         " bytes");
  }
  if (now.mtime.tv_sec != then.mtime.tv_sec || now.mtime.tv_nsec != then.mtime.tv_nsec) {
    return Status::error(where + "it was modified (modification time differs)");
  }
  return Status::ok();
}

// ---- Writing ----------------------------------------------------------------------------------------------

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  const std::string where = "writing safetensors file '" + path + "'";
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    const std::string what = where + ": tensor '" + name + "': ";
    if (name == "__metadata__") return Status::error(what + "the name is reserved for the metadata");
    if (!seen.insert(name).second) return Status::error(what + "duplicate tensor name");
    if (!t.defined()) return Status::error(what + "undefined tensor");
    if (t.device().kind != DeviceKind::kCpu) {
      return Status::error(what + "tensor is on " + t.device().to_string() + ", expected host memory");
    }
    if (!t.is_contiguous()) return Status::error(what + "tensor " + t.describe() + " is not contiguous");
    if (traits(t.dtype()).safetensors_name.empty()) {
      return Status::error(what + "dtype " + std::string(qlinear::name(t.dtype())) + " has no safetensors name");
    }
  }

  // Data layout: the given order, stably sorted by element size, largest first. The data section starts at
  // a multiple of 8 (the header is padded), and every tensor before one of element size s has a size that
  // is a multiple of s (element sizes are powers of two), so each tensor starts aligned and no holes are
  // needed.
  std::vector<size_t> layout(tensors.size());
  std::iota(layout.begin(), layout.end(), size_t{0});
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return alignment_of(tensors[a].second.dtype()) > alignment_of(tensors[b].second.dtype());
  });
  std::vector<std::pair<uint64_t, uint64_t>> ranges(tensors.size());
  uint64_t offset = 0;
  for (size_t i : layout) {
    const uint64_t bytes = static_cast<uint64_t>(tensors[i].second.nbytes());
    ranges[i] = {offset, offset + bytes};
    offset += bytes;
  }

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = std::move(m);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    ordered_json entry = ordered_json::object();
    entry["dtype"] = std::string(traits(t.dtype()).safetensors_name);
    entry["shape"] = t.shape();
    entry["data_offsets"] = {ranges[i].first, ranges[i].second};
    header[tensors[i].first] = std::move(entry);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {  // a name or metadata string that is not valid UTF-8
    return Status::error(where + ": cannot encode the header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::vector<detail::ByteSpan> pieces = {{length, 8}, {text.data(), text.size()}};
  for (size_t i : layout) {
    pieces.push_back({tensors[i].second.raw(), static_cast<size_t>(ranges[i].second - ranges[i].first)});
  }
  return detail::write_file_atomically(path, pieces);
}

}  // namespace qlinear
