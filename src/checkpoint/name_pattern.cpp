#include "qlinear/name_pattern.hpp"

#include <re2/re2.h>

#include <algorithm>

namespace qlinear {

std::string quote_pattern(std::string_view pattern) {
  constexpr size_t kShown = 60;
  if (pattern.size() <= kShown) return "\"" + std::string(pattern) + "\"";
  return "\"" + std::string(pattern.substr(0, kShown)) + "\"... (" + std::to_string(pattern.size()) + " characters)";
}

namespace {

bool starts_with_at(std::string_view p, size_t i, std::string_view what) { return p.substr(i, what.size()) == what; }

// The first construct of Python's `re` that needs a backtracking engine (or, for a huge count, that RE2 would
// read differently from Python), as "<what> \"<text>\" at character N", or "" if none. RE2 refuses most of
// these too, but with a generic message ("invalid escape sequence", "invalid or unsupported Perl syntax");
// naming the construct tells the user what to rewrite.
std::string backtracking_construct(std::string_view p) {
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    auto at = [&](std::string_view what, size_t len) {
      return std::string(what) + " \"" + std::string(p.substr(i, len)) + "\" at character " + std::to_string(i + 1);
    };
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (!in_class && e >= '1' && e <= '9') return at("a backreference", 2);
      if (!in_class && e == 'k' && i + 2 < p.size() && p[i + 2] == '<') return at("a named backreference", 3);
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') ++i;
      if (i + 1 < p.size() && p[i + 1] == ']') ++i;  // a ']' first in a class is literal
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      if (starts_with_at(p, i, "(?=")) return at("a lookahead", 3);
      if (starts_with_at(p, i, "(?!")) return at("a negative lookahead", 3);
      if (starts_with_at(p, i, "(?<=")) return at("a lookbehind", 4);
      if (starts_with_at(p, i, "(?<!")) return at("a negative lookbehind", 4);
      if (starts_with_at(p, i, "(?P=")) return at("a named backreference", 4);
      if (starts_with_at(p, i, "(?>")) return at("an atomic group", 3);
      if (starts_with_at(p, i, "(?(")) return at("a conditional group", 3);
    }
    if (c == '{') {  // {n}, {n,}, {n,m}: RE2 reads a count too large for an int as literal text; Python refuses it
      size_t j = i + 1, longest = 0, run = 0;
      for (; j < p.size() && ((p[j] >= '0' && p[j] <= '9') || p[j] == ','); ++j) {
        run = p[j] == ',' ? 0 : run + 1;
        longest = std::max(longest, run);
      }
      if (j < p.size() && p[j] == '}' && longest > 4) return at("a repetition count over 1000", j + 1 - i);
    }
    if ((c == '*' || c == '+' || c == '?' || c == '}') && i + 1 < p.size() && p[i + 1] == '+') {
      return at("a possessive quantifier", 2);
    }
  }
  return "";
}

}  // namespace

Result<NamePattern> NamePattern::compile(std::string_view pattern, Anchor anchor) {
  if (pattern.size() > kMaxPatternChars) {
    return Status::error("regex " + quote_pattern(pattern) + " is longer than the " + std::to_string(kMaxPatternChars) +
                         " characters qlinear accepts (real layer patterns are under 300)");
  }
  if (std::string construct = backtracking_construct(pattern); !construct.empty()) {
    return Status::error("regex " + quote_pattern(pattern) + " uses " + construct +
                         ", which qlinear does not accept: it matches names in linear time (RE2 syntax: no "
                         "backreferences, lookaround, atomic groups, possessive quantifiers or counts over 1000)");
  }
  RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_shared<const re2::RE2>(re2::StringPiece(pattern.data(), pattern.size()), options);
  if (!re->ok()) {
    // RE2's message names the offending part ("missing ]: [").
    return Status::error("regex " + quote_pattern(pattern) + " does not compile: " + re->error().substr(0, 200));
  }
  NamePattern out;
  out.re_ = std::move(re);
  out.pattern_ = std::string(pattern);
  out.anchor_ = anchor;
  return out;
}

bool NamePattern::matches(std::string_view name) const {
  if (!re_) return false;
  return re_->Match(re2::StringPiece(name.data(), name.size()), 0, name.size(),
                    anchor_ == Anchor::kStart ? RE2::ANCHOR_START : RE2::UNANCHORED, nullptr, 0);
}

}  // namespace qlinear
