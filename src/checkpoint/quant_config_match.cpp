// Matching layer names against a quantization config's entries: exact names, "re:" patterns (RE2, anchored
// at the start as Python's re.match, compiled once and cached), fnmatch-style wildcards (Quark), and the
// ignore lists of fused layers (every shard ignored, or none).
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "checkpoint/quant_config_internal.hpp"
#include "qlinear/name_pattern.hpp"

namespace qlinear::quant_config_detail {

Status check_name_pattern(const std::string& entry, const Where& where) {
  if (entry.rfind("re:", 0) != 0) return Status::ok();
  auto compiled = NamePattern::compile(std::string_view(entry).substr(3), NamePattern::Anchor::kStart);
  if (!compiled) return where.error(compiled.message());
  return Status::ok();
}

namespace {

// "re:" entries compiled once: a config's few patterns are matched against every layer name. Bounded, so
// that a long-running process that loads many configs does not grow without end; shared, so that clearing it
// while another thread matches is safe. nullptr: the pattern does not compile.
std::shared_ptr<const NamePattern> cached_start_pattern(std::string_view pattern) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const NamePattern>, std::less<>> cache;
  constexpr size_t kMaxCached = 1024;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(pattern); it != cache.end()) return it->second;
  if (cache.size() >= kMaxCached) cache.clear();
  auto compiled = NamePattern::compile(pattern, NamePattern::Anchor::kStart);
  std::shared_ptr<const NamePattern> value;
  if (compiled) value = std::make_shared<const NamePattern>(std::move(*compiled));
  cache.emplace(std::string(pattern), value);
  return value;
}

}  // namespace

bool equal_or_regex_match(std::string_view value, const std::string& entry) {
  if (entry.rfind("re:", 0) != 0) return value == entry;
  // re.match: the match must start at the first character but may end anywhere.
  const auto re = cached_start_pattern(std::string_view(entry).substr(3));
  return re != nullptr && re->matches(value);  // nullptr: parse_quant_config refused it already
}

bool any_equal_or_regex_match(std::string_view value, std::span<const std::string> entries) {
  return std::any_of(entries.begin(), entries.end(),
                     [&](const std::string& e) { return equal_or_regex_match(value, e); });
}

bool fnmatch(std::string_view p, std::string_view s) {
  // Backtracking over the last '*', the classic wildcard matcher, with [seq] / [!seq] sets.
  size_t pi = 0, si = 0, star_p = std::string_view::npos, star_s = 0;
  auto set_end = [&](size_t i) -> size_t {  // index past the ']' closing a set at i, or npos
    size_t j = i + 1;
    if (j < p.size() && p[j] == '!') ++j;
    if (j < p.size() && p[j] == ']') ++j;
    while (j < p.size() && p[j] != ']') ++j;
    return j < p.size() ? j + 1 : std::string_view::npos;
  };
  auto in_set = [&](size_t i, size_t end, char c) {
    size_t j = i + 1;
    bool negate = j < end && p[j] == '!';
    if (negate) ++j;
    bool found = false;
    for (size_t k = j; k < end - 1; ++k) {
      if (k + 2 < end - 1 && p[k + 1] == '-') {
        if (p[k] <= c && c <= p[k + 2]) found = true;
        k += 2;
      } else if (p[k] == c) {
        found = true;
      }
    }
    return found != negate;
  };
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_s = si;
      continue;
    }
    if (pi < p.size()) {
      if (p[pi] == '[') {
        size_t end = set_end(pi);
        if (end != std::string_view::npos) {
          if (in_set(pi, end, s[si])) {
            pi = end;
            ++si;
            continue;
          }
        } else if (s[si] == '[') {  // an unclosed '[' is literal, as in Python
          ++pi;
          ++si;
          continue;
        }
      } else if (p[pi] == '?' || p[pi] == s[si]) {
        ++pi;
        ++si;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<std::string> full_shard_names(std::string_view layer_name, std::span<const std::string> shards) {
  std::vector<std::string> out;
  size_t dot = layer_name.rfind('.');
  std::string prefix = dot == std::string_view::npos ? "" : std::string(layer_name.substr(0, dot + 1));
  for (const std::string& s : shards) out.push_back(s.find('.') == std::string::npos ? prefix + s : s);
  return out;
}

Result<bool> is_ignored(std::string_view layer_name, std::span<const std::string> shards,
                        std::span<const std::string> ignore, const std::string& list_name, bool skip_if_listed,
                        const std::string& source) {
  bool listed = std::find(ignore.begin(), ignore.end(), layer_name) != ignore.end();
  if (shards.empty() || (skip_if_listed && listed)) return any_equal_or_regex_match(layer_name, ignore);
  std::vector<std::string> names = full_shard_names(layer_name, shards);
  std::vector<std::string> ignored, kept;
  for (const std::string& n : names) (any_equal_or_regex_match(n, ignore) ? ignored : kept).push_back(n);
  if (!ignored.empty() && !kept.empty()) {
    auto join_names = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
      return s;
    };
    return Status::error(source + ": layer " + std::string(layer_name) + ": the " + list_name + " list skips " +
                         join_names(ignored) + " but not " + join_names(kept) +
                         "; the shards of a fused layer must all be quantized or all be skipped");
  }
  return kept.empty();
}

}  // namespace qlinear::quant_config_detail
