#pragma once
// --platform: which platform's priority list to consult. "cpu" (this machine's CPU, the default), "cuda"
// or "cuda:N" (a real device), or synthetic ones for exploring: "sm80", "sm90", "avx2", "avx512", "scalar".
#include <string>

#include "qlinear/platform.hpp"

namespace qlinear::cli {
Result<Platform> parse_platform(const std::string& text);
}  // namespace qlinear::cli
