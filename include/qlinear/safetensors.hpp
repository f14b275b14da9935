#pragma once
// Reading and writing safetensors checkpoints (https://github.com/huggingface/safetensors), own code.
//
// File layout:
//
//   +----------------+---------------------------+------------------------------------------+
//   | N: u64 LE      | header: N bytes of JSON   | data section                             |
//   +----------------+---------------------------+------------------------------------------+
//   0                8                           8+N                                        file end
//
//   header = {"<tensor>": {"dtype": "F8_E4M3", "shape": [4096, 128], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"<key>": "<string>", ...}}          (__metadata__ optional)
//
// `data_offsets` are byte offsets relative to the start of the data section. Sub-byte formats (F4, F6) are
// declared with their logical shape; their byte range holds the packed codes (see formats.hpp).
//
// Reading is strict: every malformed header comes back as an error naming the file, the tensor and the field.
// Byte ranges may leave holes (before the first tensor, between tensors, at the end): the format allows it,
// even though the official reader refuses such files; ranges may never overlap.
//
// Writing produces files the official reader accepts: no holes, header padded with spaces to a multiple of
// 8 bytes, every tensor starting at a multiple of its element size.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qlinear/formats.hpp"
#include "qlinear/status.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear {

// Largest header the reader accepts (the official implementation's limit): a bigger one is corrupt or hostile.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One header entry, validated.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;          // logical shape, as declared
  uint64_t begin = 0;   // byte range [begin, end) relative to the data section
  uint64_t end = 0;
};

// One memory-mapped safetensors file. Cheap to copy: copies share the mapping. Immutable, so safe to read
// from several threads.
//
// Tensors are zero-copy views into a read-only (PROT_READ, MAP_PRIVATE) mapping: writing through one
// raises SIGSEGV; clone() a tensor to modify it. Each view's owner keeps the mapping alive after the
// SafetensorsFile is gone. A tensor whose bytes are not aligned to its element size (legal in the format,
// never produced by the official writer or ours) is copied into an aligned host buffer instead.
//
// LIMITATION: a mapping does not protect against another process truncating the file: touching a page past
// the new end raises SIGBUS, which a library cannot turn into an error. open() records the file's device,
// inode, size and modification time; call verify_unchanged() before a heavy read (loading a layer) to turn
// the common cases (file rewritten in place, truncated, replaced) into an error. A change that happens
// after the check is not caught; a caller that cannot rule that out should clone() what it reads.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const;
  // Tensor names in header order.
  const std::vector<std::string>& names() const;
  bool has(const std::string& name) const;
  // The validated header entry (dtype, shape, byte range) without touching the data.
  Result<SafetensorsEntry> entry(const std::string& name) const;
  // A view of the tensor's bytes (see the class comment for ownership, read-only-ness and alignment).
  Result<Tensor> tensor(const std::string& name) const;
  // The header's __metadata__ (empty when absent).
  const std::map<std::string, std::string>& metadata() const;

  uint64_t file_size() const;
  uint64_t data_offset() const;  // 8 + N: where the data section starts in the file

  // Re-stats the file and fails if it is no longer the file that was mapped (different device or inode,
  // size or modification time). See LIMITATION above.
  Status verify_unchanged() const;

  // Drops the whole pages of `name`'s bytes from this process's resident set (madvise MADV_DONTNEED; a
  // streaming reader calls it when done with a tensor). Views stay valid: touched again, the pages are read
  // from the file. Unknown names are ignored.
  void release_pages(const std::string& name) const;
  // Maps `name`'s pages in one call (madvise MADV_POPULATE_READ, or MADV_WILLNEED where the kernel lacks it),
  // so that a reader that will touch every byte takes no page fault per page. Unknown names are ignored.
  void load_pages(const std::string& name) const;

  struct State;  // implementation detail (safetensors.cpp)

 private:
  explicit SafetensorsFile(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// A checkpoint spread over one or more safetensors files. open() accepts:
//   - a single .safetensors file;
//   - a directory holding model.safetensors.index.json ({"weight_map": {tensor: file}}): the index is
//     authoritative; each listed file is opened and must hold the tensors the index assigns to it; tensors a
//     shard holds beyond those are not visible, but one held by two shards is an error (which copy is right
//     is unknowable);
//   - a directory without an index: every *.safetensors file in it; a tensor name in two files is an error.
// Every file is opened and validated up front.
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& dir_or_file);

  // The directory or file given to open().
  const std::string& root() const { return root_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;
  Result<SafetensorsEntry> entry(const std::string& name) const;
  Result<Tensor> tensor(const std::string& name) const;
  // Path of the file holding `name`.
  Result<std::string> file_of(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // verify_unchanged() of every file.
  Status verify_unchanged() const;
  // SafetensorsFile::release_pages of the file holding `name`.
  void release_pages(const std::string& name) const;
  // SafetensorsFile::load_pages of the file holding `name`.
  void load_pages(const std::string& name) const;

 private:
  std::string root_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> file_index_;  // tensor name -> index into files_
};

// Writes `tensors` (defined, contiguous, host) to a safetensors file at `path`. The header lists the tensors
// in the given order; the data section places them in that order stably sorted by element size, largest
// first, which, with the data section starting at a multiple of 8, starts each tensor at a multiple of its
// element size without leaving holes (the official reader refuses holes). Metadata goes in __metadata__
// (omitted when empty).
//
// The file is written to a temporary name in the same directory, fsync'ed and renamed over `path`, so `path`
// is never left partially written: on any error it is untouched and the temporary file is removed.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Writes `dir`/model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map": {tensor: file}}
// ("metadata" only when total_size is given), atomically like write_safetensors. File names must be
// relative to `dir` and must not leave it.
Status write_index_json(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                        std::optional<uint64_t> total_size = std::nullopt);

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

}  // namespace qlinear
