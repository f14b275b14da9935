#pragma once
// Safetensors shards written as a stream: groups of tensors are appended to a staged shard file as they
// come, and a shard is closed (header written, fsync'ed) when the next group would take it past the size
// limit. The header's size is not known until a shard closes, so each shard reserves `header_reserve`
// bytes for it, and the header is padded with spaces to fill them (the format allows trailing whitespace).
// Tensors are aligned without holes: the data section starts at a multiple of 8, tensors whose size is a
// multiple of 8 are written at once, the rest (small: norms, odd shapes) are held back and written at the
// shard's end, largest element size first.
//
// I/O: bytes are gathered in a 4096-aligned staging buffer that is written, while the next one fills, by a
// background thread with O_DIRECT where the file system allows it (else plain pwrite): on Linux a buffered
// write() costs more CPU in page-cache work than quantizing the bytes did, and the final fsync would wait
// for all of it anyway. Direct writes are whole 4096-byte blocks: a shard's last block is padded and the
// file truncated to its size; the header, known only at close, is patched into a kept copy of the first
// blocks and rewritten.
#include <cstdint>
#include <future>
#include <memory>
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
  Status flush_buffer(bool last);  // hands the filled buffer to the background write
  Status wait_pending();

  std::string dir_;
  uint64_t max_shard_bytes_, header_reserve_;
  int fd_ = -1;
  bool direct_ = false;
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, FreeDeleter> buffers_[2];
  uint64_t buffer_bytes_ = 0;   // capacity of each
  int current_ = 0;             // the buffer being filled
  uint64_t fill_ = 0;           // bytes in it
  uint64_t buffer_offset_ = 0;  // its offset in the file
  std::string prefix_;          // the file's first blocks (header + first data), kept for the header patch
  std::future<Status> pending_;
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
