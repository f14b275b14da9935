#include "qlinear/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace qlinear {

bool log_enabled(std::string_view topic) {
  const char* env = std::getenv("QLINEAR_LOG");
  if (env == nullptr) return false;
  std::string_view list(env);
  // Comma-separated topics; "all" enables every topic.
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(pos, end - pos);
    if (item == topic || item == "all") return true;
    pos = end + 1;
  }
  return false;
}

void log_line(std::string_view topic, std::string_view message) {
  static std::mutex mutex;  // whole lines from concurrent selections
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[qlinear:%.*s] %.*s\n", static_cast<int>(topic.size()), topic.data(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace qlinear
