#pragma once
// Pieces shared by the safetensors reader/writer (safetensors.cpp) and the multi-file checkpoint
// (safetensors_index.cpp). Not part of the public API.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/strict_json.hpp"
#include "qlinear/status.hpp"

namespace qlinear::detail {

// parse_json_bounded (strict_json.hpp) with duplicate keys refused: nesting deeper than kMaxJsonNesting,
// syntax errors (with the parser's position) and a duplicate key anywhere (worded by `on_duplicate`) are
// errors.
Result<nlohmann::ordered_json> parse_json_rejecting_duplicates(std::string_view text,
                                                              const DuplicateKeyMessage& on_duplicate);

// One contiguous piece of a file being written.
struct ByteSpan {
  const void* data;
  size_t size;
};

// Writes the concatenation of `pieces` to a temporary file in `path`'s directory, fsyncs it and renames it
// over `path`. On any failure `path` is untouched and the temporary file is removed.
Status write_file_atomically(const std::string& path, const std::vector<ByteSpan>& pieces);

// True when `name` is a relative path that stays inside its base directory ("a.safetensors", "sub/b"):
// not empty, not absolute, no ".." component.
bool is_contained_relative_path(const std::string& name);

}  // namespace qlinear::detail
