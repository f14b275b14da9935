#pragma once
// Limits on regular expressions that come from files and flags ("re:" entries of config.json, --layers,
// quantize --ignore), checked before std::regex sees them. libstdc++'s std::regex compiles a pattern by
// recursion, once per nesting level, so a 200 KB pattern of nested groups overflows the stack (finding R7
// in docs/RELIABILITY.md); and it reads a brace count or back-reference number into a signed long without
// an overflow check, undefined behaviour from 19 digits on (R5); and it matches by backtracking, so a
// repetition of a repetition (".**", "(a+)*") takes exponential time on a name it does not match (R8).
// Real patterns are under 300 characters, their counts a few digits, their repetition one level deep.
#include <cstddef>
#include <regex>
#include <string>
#include <string_view>

#include "qlinear/status.hpp"

namespace qlinear {

inline constexpr size_t kMaxRegexChars = 4096;
inline constexpr size_t kMaxRegexDigitRun = 9;

// ok, or an error quoting the pattern (its first 60 characters) and saying which limit it breaks. Callers
// prefix where the pattern came from.
Status check_regex_limits(std::string_view pattern);

// check_regex_limits, then std::regex (ECMAScript); a pattern that does not compile is an error quoting it
// with the compiler's reason.
Result<std::regex> compile_regex(std::string_view pattern);

// `"abc"`, or `"<first 60 characters>"... (N characters)` for a longer pattern: for messages.
std::string quote_pattern(std::string_view pattern);

}  // namespace qlinear
