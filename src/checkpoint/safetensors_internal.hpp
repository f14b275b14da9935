#pragma once
// Pieces shared by the safetensors reader/writer (safetensors.cpp) and the multi-file checkpoint
// (safetensors_index.cpp). Not part of the public API.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qlinear/status.hpp"

namespace qlinear::detail {

// Describes a duplicate key for an error message. `path` holds the keys of the enclosing objects, outermost
// first (empty for a key of the top-level object); an array level appears as "[]".
using DuplicateKeyMessage = std::function<std::string(const std::vector<std::string>& path, const std::string& key)>;

// Parses `text` as one JSON value, keeping object keys in document order. Unlike nlohmann::json::parse, which
// silently keeps the last of two equal keys, a duplicate key anywhere is an error (worded by `on_duplicate`).
// Syntax errors come back with the parser's position.
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
