#pragma once
// Regular expressions that come from files and flags: "re:" targets and ignore entries of compressed-tensors
// and Quark configs, `--layers`, `quantize --ignore`. They are compiled and matched with RE2, whose matching
// time is linear in the name's length for every pattern (no backtracking), so no config.json can make the
// loader hang. The syntax is RE2's, which is Python's `re` (what vLLM uses) less the constructs that need
// backtracking: a pattern with a backreference ("\1", "(?P=name)") or a lookaround ("(?=", "(?!", "(?<=",
// "(?<!") is refused with the construct named, never run with another engine.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "qlinear/status.hpp"

namespace re2 {
class RE2;
}

namespace qlinear {

// Real layer patterns are under 300 characters; RE2 compiles within a memory budget, the cap keeps messages
// and compile time small.
inline constexpr size_t kMaxPatternChars = 4096;

class NamePattern {
 public:
  // kStart: the match starts at the name's first character and may end anywhere (Python's re.match, as
  // vLLM's "re:" entries). kSearch: anywhere in the name (re.search; --layers and quantize --ignore).
  enum class Anchor { kStart, kSearch };

  // The pattern compiled, or an error quoting it (its first 60 characters) with the reason: longer than
  // kMaxPatternChars, a construct RE2 cannot express (named), or RE2's own parse error. Callers prefix
  // where it came from (the config field or the flag).
  static Result<NamePattern> compile(std::string_view pattern, Anchor anchor);

  bool matches(std::string_view name) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::shared_ptr<const re2::RE2> re_;
  std::string pattern_;
  Anchor anchor_ = Anchor::kStart;
};

// `"abc"`, or `"<first 60 characters>"... (N characters)` for a longer pattern: for messages.
std::string quote_pattern(std::string_view pattern);

}  // namespace qlinear
