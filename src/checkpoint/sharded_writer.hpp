#pragma once
// Safetensors shards written as a stream: groups of tensors are appended to a staged shard file as they
// come, and a shard is closed (header written, fsync'ed) when the next group would take it past the size
// limit. The header's size is not known until a shard closes, so each shard reserves `header_reserve`
// bytes for it, and the header is padded with spaces to fill them (the format allows trailing whitespace).
// Tensors are aligned without holes: the data section starts at a multiple of 8, tensors whose size is a
// multiple of 8 are written at once, the rest (small: norms, odd shapes) are held back and written at the
// shard's end, largest element size first.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qlinear/status.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear::detail {

class ShardedSafetensorsWriter {
 public:
  struct Shard {
    std::string staged_path;
    std::vector<std::string> tensors;
    uint64_t bytes = 0;  // the file's size
  };

  ShardedSafetensorsWriter(std::string dir, uint64_t max_shard_bytes, uint64_t header_reserve);
  ~ShardedSafetensorsWriter();  // removes every staged shard not handed out by close()
  ShardedSafetensorsWriter(const ShardedSafetensorsWriter&) = delete;
  ShardedSafetensorsWriter& operator=(const ShardedSafetensorsWriter&) = delete;

  // Appends a group (one module's tensors: they land in one shard). Tensors: defined, host, contiguous.
  Status add(const std::vector<std::pair<std::string, Tensor>>& group);
  // Closes the last shard; the staged shards, in order. The caller renames them (and removes them on failure).
  Result<std::vector<Shard>> close();

 private:
  Status open_shard();
  Status close_shard();
  Status write_bytes(const void* data, uint64_t size);

  std::string dir_;
  uint64_t max_shard_bytes_, header_reserve_;
  int fd_ = -1;
  uint64_t data_bytes_ = 0;  // written to the current shard's data section
  std::vector<std::pair<std::string, Tensor>> held_;  // written at the shard's end
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries_;
  std::vector<Shard> shards_;
  bool handed_out_ = false;
};

}  // namespace qlinear::detail
