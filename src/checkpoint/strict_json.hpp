#pragma once
// JSON as qlinear reads it from files it did not write (safetensors headers, index.json, config.json):
// bounded nesting, optional refusal of duplicate keys, and error messages that quote a bounded excerpt of a
// bad value. Not part of the public API.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qlinear/status.hpp"

namespace qlinear::detail {

// Deepest nesting of arrays and objects accepted. Real headers and configs nest fewer than 10 levels. Every
// walk of a parsed value that recurses per level (copies, dump(), comparisons) stays far from the end of
// the stack: 100000 levels, 200 KB of brackets, overflow it (finding R6 in docs/RELIABILITY.md).
inline constexpr int kMaxJsonNesting = 64;

// The most characters of a value an error message quotes.
inline constexpr size_t kMaxQuotedChars = 100;

// Describes a duplicate key for an error message. `path` holds the keys of the enclosing objects, outermost
// first (empty for a key of the top-level object); an array level appears as "[]".
using DuplicateKeyMessage = std::function<std::string(const std::vector<std::string>& path, const std::string& key)>;

// Parses `text` as one JSON value, keeping object keys in document order. Errors: syntax ("invalid JSON:
// <parser message with position>"), a number beyond double, nesting deeper than kMaxJsonNesting. When
// `on_duplicate` is given, a duplicate key anywhere is an error worded by it (nlohmann::json::parse silently
// keeps the last of two equal keys, as Python's json does; without `on_duplicate` so does this).
Result<nlohmann::ordered_json> parse_json_bounded(std::string_view text,
                                                  const DuplicateKeyMessage* on_duplicate = nullptr);

// The JSON text of `v`, cut to at most `max_chars` characters ("..." marks the cut), built without
// serializing more of a large value than that.
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_chars = kMaxQuotedChars);

}  // namespace qlinear::detail
