#pragma once
// Minimal topic logging: QLINEAR_LOG=dispatch,load,... enables topics; messages go to stderr.
#include <string_view>

namespace qlinear {
bool log_enabled(std::string_view topic);
void log_line(std::string_view topic, std::string_view message);
}  // namespace qlinear
