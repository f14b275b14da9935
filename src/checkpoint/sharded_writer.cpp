#include "checkpoint/sharded_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/staged_files.hpp"
#include "core/threads.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::detail {

namespace {

int alignment(DType d) { return std::max(1, element_size(d)); }

constexpr uint64_t kBlock = 4096;                  // O_DIRECT's unit of offsets, lengths and addresses
constexpr uint64_t kStagingBytes = uint64_t{32} << 20;  // per buffer; two of them

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// memcpy of a large tensor into the staging buffer on the thread pool (one core copies ~5-10 GB/s, and the
// source pages of a mapped input are often being read in for the first time).
void copy_bytes(uint8_t* dst, const uint8_t* src, uint64_t n) {
  constexpr uint64_t kPiece = uint64_t{2} << 20;
  if (n < 4 * kPiece) {
    std::memcpy(dst, src, n);
    return;
  }
  const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
  threads::parallel_for(pieces, threads::max_threads(), [&](int64_t i) {
    const uint64_t at = static_cast<uint64_t>(i) * kPiece;
    std::memcpy(dst + at, src + at, std::min(kPiece, n - at));
  });
}

Status pwrite_all(int fd, const uint8_t* p, uint64_t size, uint64_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min<uint64_t>(size, uint64_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    // A file system that took O_DIRECT but refuses these writes (its own alignment rules): write through
    // the page cache instead.
    if (n < 0 && errno == EINVAL) {
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags >= 0 && (flags & O_DIRECT) != 0 && ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) == 0) continue;
    }
    if (n <= 0) return Status::error(path + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

}  // namespace

void ShardedSafetensorsWriter::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

ShardedSafetensorsWriter::ShardedSafetensorsWriter(std::string dir, uint64_t max_shard_bytes,
                                                   uint64_t header_reserve)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes), header_reserve_((header_reserve + 7) / 8 * 8) {
  // The first blocks (header and the data in its last block) must lie in the first buffer.
  buffer_bytes_ = std::max(kStagingBytes, align_up(8 + header_reserve_, kBlock));
}

ShardedSafetensorsWriter::~ShardedSafetensorsWriter() {
  (void)wait_pending();
  if (fd_ >= 0) ::close(fd_);
  if (!handed_out_) {
    for (const Shard& s : shards_) ::unlink(s.staged_path.c_str());
  }
}

Status ShardedSafetensorsWriter::wait_pending() {
  if (!pending_.valid()) return Status::ok();
  return pending_.get();
}

Status ShardedSafetensorsWriter::flush_buffer(bool last) {
  uint8_t* buf = buffers_[current_].get();
  if (buffer_offset_ == 0) prefix_.assign(reinterpret_cast<const char*>(buf), std::min(fill_, align_up(8 + header_reserve_, kBlock)));
  uint64_t length = fill_;
  if (last && direct_) {
    length = align_up(fill_, kBlock);
    std::memset(buf + fill_, 0, length - fill_);
  }
  QL_RETURN_IF_ERROR(wait_pending());
  pending_ = std::async(std::launch::async, [fd = fd_, buf, length, offset = buffer_offset_,
                                             path = shards_.back().staged_path] {
    return pwrite_all(fd, buf, length, offset, path);
  });
  buffer_offset_ += fill_;
  fill_ = 0;
  current_ ^= 1;
  return Status::ok();
}

Status ShardedSafetensorsWriter::write_bytes(const void* data, uint64_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const uint64_t n = std::min(size, buffer_bytes_ - fill_);
    if (p != nullptr) {
      copy_bytes(buffers_[current_].get() + fill_, p, n);
      p += n;
    } else {
      std::memset(buffers_[current_].get() + fill_, 0, n);
    }
    fill_ += n;
    size -= n;
    if (fill_ == buffer_bytes_) QL_RETURN_IF_ERROR(flush_buffer(false));
  }
  return Status::ok();
}

Status ShardedSafetensorsWriter::open_shard() {
  Shard s;
  s.staged_path = staged_name(dir_, "model-" + std::to_string(shards_.size() + 1) + ".safetensors");
  fd_ = ::open(s.staged_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) return Status::error(s.staged_path + ": cannot create: " + std::strerror(errno));
  shards_.push_back(std::move(s));
  // Direct I/O where the file system takes it (not tmpfs, for one): then plain writes.
  const int flags = ::fcntl(fd_, F_GETFL);
  direct_ = flags >= 0 && ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0;
  for (auto& b : buffers_) {
    if (!b) {
      b.reset(static_cast<uint8_t*>(std::aligned_alloc(kBlock, buffer_bytes_)));
      if (!b) return Status::error(shards_.back().staged_path + ": cannot allocate the write buffer");
    }
  }
  data_bytes_ = 0;
  entries_.clear();
  held_.clear();
  fill_ = 0;
  buffer_offset_ = 0;
  prefix_.clear();
  return write_bytes(nullptr, 8 + header_reserve_);  // the header's place, filled at close
}

Status ShardedSafetensorsWriter::close_shard() {
  Shard& shard = shards_.back();
  std::stable_sort(held_.begin(), held_.end(),
                   [](const auto& a, const auto& b) { return alignment(a.second.dtype()) > alignment(b.second.dtype()); });
  for (const auto& [name, t] : held_) {
    const uint64_t bytes = static_cast<uint64_t>(t.nbytes());
    QL_RETURN_IF_ERROR(write_bytes(t.raw(), bytes));
    entries_.push_back({name, t.dtype(), t.shape(), data_bytes_, data_bytes_ + bytes});
    data_bytes_ += bytes;
  }
  held_.clear();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", std::string(traits(e.dtype).safetensors_name)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
    shard.tensors.push_back(e.name);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& ex) {  // a name that is not valid UTF-8
    return Status::error(shard.staged_path + ": cannot encode the header: " + ex.what());
  }
  if (text.size() > header_reserve_) {
    return Status::error(shard.staged_path + ": the header needs " + std::to_string(text.size()) +
                         " bytes, more than the " + std::to_string(header_reserve_) + " reserved for it");
  }
  text.append(header_reserve_ - text.size(), ' ');
  const uint64_t file_bytes = 8 + header_reserve_ + data_bytes_;
  QL_RETURN_IF_ERROR(flush_buffer(true));
  QL_RETURN_IF_ERROR(wait_pending());
  // The header into the kept first blocks, written again (padded to whole blocks for direct I/O).
  for (int i = 0; i < 8; ++i) prefix_[static_cast<size_t>(i)] = static_cast<char>(header_reserve_ >> (8 * i));
  prefix_.replace(8, text.size(), text);
  uint8_t* buf = buffers_[current_].get();
  std::memcpy(buf, prefix_.data(), prefix_.size());
  const uint64_t prefix_bytes = direct_ ? align_up(prefix_.size(), kBlock) : prefix_.size();
  std::memset(buf + prefix_.size(), 0, prefix_bytes - prefix_.size());
  QL_RETURN_IF_ERROR(pwrite_all(fd_, buf, prefix_bytes, 0, shard.staged_path));
  if (::ftruncate(fd_, static_cast<off_t>(file_bytes)) != 0) {
    return Status::error(shard.staged_path + ": cannot set the file's size: " + std::strerror(errno));
  }
  if (::fsync(fd_) != 0) return Status::error(shard.staged_path + ": fsync failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Status::error(shard.staged_path + ": close failed: " + std::strerror(errno));
  shard.bytes = 8 + header_reserve_ + data_bytes_;
  entries_.clear();
  return Status::ok();
}

Status ShardedSafetensorsWriter::add(const std::vector<std::pair<std::string, Tensor>>& group) {
  uint64_t bytes = 0;
  for (const auto& [name, t] : group) {
    if (!t.defined() || t.device().kind != DeviceKind::kCpu || !t.is_contiguous() ||
        traits(t.dtype()).safetensors_name.empty()) {
      return Status::error("tensor " + name + " (" + (t.defined() ? t.describe() : "undefined") +
                           ") cannot be written to safetensors (host, contiguous, a safetensors dtype)");
    }
    bytes += static_cast<uint64_t>(t.nbytes());
  }
  uint64_t held_bytes = 0;
  for (const auto& h : held_) held_bytes += static_cast<uint64_t>(h.second.nbytes());
  if (fd_ >= 0 && data_bytes_ + held_bytes > 0 && 8 + header_reserve_ + data_bytes_ + held_bytes + bytes > max_shard_bytes_) {
    QL_RETURN_IF_ERROR(close_shard());
  }
  if (fd_ < 0) QL_RETURN_IF_ERROR(open_shard());
  for (const auto& [name, t] : group) {
    const uint64_t size = static_cast<uint64_t>(t.nbytes());
    if (size % 8 != 0) {
      held_.emplace_back(name, t.clone());  // small in practice (norm weights, odd shapes)
      continue;
    }
    QL_RETURN_IF_ERROR(write_bytes(t.raw(), size));
    entries_.push_back({name, t.dtype(), t.shape(), data_bytes_, data_bytes_ + size});
    data_bytes_ += size;
  }
  return Status::ok();
}

Result<std::vector<ShardedSafetensorsWriter::Shard>> ShardedSafetensorsWriter::close() {
  if (fd_ >= 0) QL_RETURN_IF_ERROR(close_shard());
  handed_out_ = true;
  return shards_;
}

}  // namespace qlinear::detail
