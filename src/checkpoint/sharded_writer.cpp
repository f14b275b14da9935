#include "checkpoint/sharded_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/staged_files.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::detail {

namespace {
int alignment(DType d) { return std::max(1, element_size(d)); }
}  // namespace

ShardedSafetensorsWriter::ShardedSafetensorsWriter(std::string dir, uint64_t max_shard_bytes,
                                                   uint64_t header_reserve)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes), header_reserve_((header_reserve + 7) / 8 * 8) {}

ShardedSafetensorsWriter::~ShardedSafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!handed_out_) {
    for (const Shard& s : shards_) ::unlink(s.staged_path.c_str());
  }
}

Status ShardedSafetensorsWriter::write_bytes(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, std::min<uint64_t>(size, uint64_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::error(shards_.back().staged_path + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
    }
    p += n;
    size -= static_cast<uint64_t>(n);
  }
  return Status::ok();
}

Status ShardedSafetensorsWriter::open_shard() {
  Shard s;
  s.staged_path = staged_name(dir_, "model-" + std::to_string(shards_.size() + 1) + ".safetensors");
  fd_ = ::open(s.staged_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) return Status::error(s.staged_path + ": cannot create: " + std::strerror(errno));
  shards_.push_back(std::move(s));
  data_bytes_ = 0;
  entries_.clear();
  held_.clear();
  if (::lseek(fd_, static_cast<off_t>(8 + header_reserve_), SEEK_SET) < 0) {
    return Status::error(shards_.back().staged_path + ": seek failed: " + std::strerror(errno));
  }
  return Status::ok();
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
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(header_reserve_ >> (8 * i));
  if (::lseek(fd_, 0, SEEK_SET) < 0) return Status::error(shard.staged_path + ": seek failed: " + std::strerror(errno));
  QL_RETURN_IF_ERROR(write_bytes(length, 8));
  QL_RETURN_IF_ERROR(write_bytes(text.data(), text.size()));
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
