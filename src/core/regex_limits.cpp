#include "qlinear/regex_limits.hpp"

#include <cstdint>
#include <vector>

namespace qlinear {

std::string quote_pattern(std::string_view pattern) {
  constexpr size_t kShown = 60;
  if (pattern.size() <= kShown) return "\"" + std::string(pattern) + "\"";
  return "\"" + std::string(pattern.substr(0, kShown)) + "\"... (" + std::to_string(pattern.size()) + " characters)";
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// At pattern[i], a brace quantifier {n}, {n,} or {n,m}: its length (0 if none) and whether it repeats
// (can match its atom more than once).
size_t brace_quantifier(std::string_view p, size_t i, bool& repeats) {
  size_t j = i + 1;
  const size_t n0 = j;
  while (j < p.size() && is_digit(p[j])) ++j;
  if (j == n0) return 0;
  const int64_t n = std::stoll(std::string(p.substr(n0, j - n0)));  // <= 9 digits (checked before)
  if (j < p.size() && p[j] == '}') {
    repeats = n > 1;
    return j + 1 - i;
  }
  if (j >= p.size() || p[j] != ',') return 0;
  const size_t m0 = ++j;
  while (j < p.size() && is_digit(p[j])) ++j;
  if (j >= p.size() || p[j] != '}') return 0;
  repeats = j == m0 || std::stoll(std::string(p.substr(m0, j - m0))) > 1;
  return j + 1 - i;
}

// Where a repetition is repeated again: a quantifier right after another (".**", "a+*"; "*?" is the lazy
// form, allowed), or a repeating quantifier on a group that holds one ("(a+)*", "(.*x){2,}"). npos if none.
// libstdc++'s std::regex matches by backtracking, and these make it try exponentially many ways to split a
// name that does not match (a 40-character layer name: hours). Patterns with one level of repetition ("re:.*
// mlp\.gate$", "(.*\.)?layers\..*") pass.
size_t nested_repetition(std::string_view p) {
  struct Group {
    bool has_repeat = false;
  };
  std::vector<Group> groups(1);
  enum class Last { kNone, kAtom, kGroup, kQuantifier, kLazy } last = Last::kNone;
  bool group_repeats = false;  // the group just closed holds a repetition
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    bool repeats = false;
    size_t qlen = 0;
    if (c == '*' || c == '+') {
      repeats = true;
      qlen = 1;
    } else if (c == '?') {
      qlen = 1;
    } else if (c == '{') {
      qlen = brace_quantifier(p, i, repeats);
    }
    if (qlen > 0) {
      if (last == Last::kQuantifier && c == '?') {
        last = Last::kLazy;
        continue;
      }
      if (last == Last::kQuantifier || last == Last::kLazy) return i;
      if (last == Last::kGroup && group_repeats && repeats) return i;
      if (repeats) groups.back().has_repeat = true;
      last = Last::kQuantifier;
      i += qlen - 1;
      continue;
    }
    switch (c) {
      case '\\':
        ++i;
        last = Last::kAtom;
        break;
      case '[': {  // a class: to its closing bracket (a ']' first in it is literal)
        size_t j = i + 1;
        if (j < p.size() && p[j] == '^') ++j;
        if (j < p.size() && p[j] == ']') ++j;
        while (j < p.size() && p[j] != ']') j += p[j] == '\\' ? 2 : 1;
        i = j;
        last = Last::kAtom;
        break;
      }
      case '(':
        groups.emplace_back();
        if (i + 1 < p.size() && p[i + 1] == '?') i += 2;  // (?: (?= (?!: not a quantifier
        last = Last::kNone;
        break;
      case ')':
        if (groups.size() > 1) {
          group_repeats = groups.back().has_repeat;
          groups.pop_back();
          groups.back().has_repeat = groups.back().has_repeat || group_repeats;
        }
        last = Last::kGroup;
        break;
      case '|':
        last = Last::kNone;
        break;
      default:
        last = Last::kAtom;
        break;
    }
  }
  return std::string_view::npos;
}

}  // namespace

Status check_regex_limits(std::string_view pattern) {
  if (pattern.size() > kMaxRegexChars) {
    return Status::error("regex " + quote_pattern(pattern) + " is longer than the " + std::to_string(kMaxRegexChars) +
                         " characters qlinear accepts (real layer patterns are under 300)");
  }
  size_t run = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    run = pattern[i] >= '0' && pattern[i] <= '9' ? run + 1 : 0;
    if (run > kMaxRegexDigitRun) {
      size_t end = i;
      while (end < pattern.size() && pattern[end] >= '0' && pattern[end] <= '9') ++end;
      return Status::error("regex " + quote_pattern(pattern) + " has a run of " + std::to_string(end - (i + 1 - run)) +
                           " digits; at most " + std::to_string(kMaxRegexDigitRun) +
                           " are accepted (std::regex cannot read larger counts safely)");
    }
  }
  if (const size_t at = nested_repetition(pattern); at != std::string_view::npos) {
    return Status::error("regex " + quote_pattern(pattern) + " repeats a repetition at character " +
                         std::to_string(at + 1) + " (like \".**\" or \"(a+)*\"): std::regex would backtrack "
                         "exponentially on names it does not match; write it with one level of repetition");
  }
  return Status::ok();
}

Result<std::regex> compile_regex(std::string_view pattern) {
  QL_RETURN_IF_ERROR(check_regex_limits(pattern));
  try {
    return std::regex(pattern.begin(), pattern.end(), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return Status::error("regex " + quote_pattern(pattern) + " does not compile: " + e.what());
  }
}

}  // namespace qlinear
