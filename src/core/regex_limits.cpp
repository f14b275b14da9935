#include "qlinear/regex_limits.hpp"

namespace qlinear {

std::string quote_pattern(std::string_view pattern) {
  constexpr size_t kShown = 60;
  if (pattern.size() <= kShown) return "\"" + std::string(pattern) + "\"";
  return "\"" + std::string(pattern.substr(0, kShown)) + "\"... (" + std::to_string(pattern.size()) + " characters)";
}

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
