#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace qlinear::cli {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

Progress::Progress(std::string noun, uint64_t total_items, uint64_t total_bytes, bool json_output)
    : noun_(std::move(noun)), total_items_(total_items), total_bytes_(total_bytes),
      active_(!json_output && ::isatty(2) != 0) {}

Progress::~Progress() {
  if (active_ && drawn_) std::fputc('\n', stderr);
}

std::string Progress::line(const std::string& what) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "%llu/%llu %s", static_cast<unsigned long long>(items_),
                        static_cast<unsigned long long>(total_items_), noun_.c_str());
  // The time left follows bytes when there are any (tensors differ in size by 1000x), else items.
  double fraction = total_items_ > 0 ? static_cast<double>(items_) / total_items_ : 1.0;
  if (total_bytes_ > 0) {
    fraction = static_cast<double>(bytes_) / total_bytes_;
    const bool gb = total_bytes_ >= 1'000'000'000;
    const double unit = gb ? 1e9 : 1e6;
    n += std::snprintf(buf + n, sizeof buf - n, "  %.2f/%.2f %s  %.2f %s/s", bytes_ / unit, total_bytes_ / unit,
                       gb ? "GB" : "MB", elapsed > 0 ? bytes_ / unit / elapsed : 0.0, gb ? "GB" : "MB");
  }
  const double left = fraction > 0 ? elapsed * (1 - fraction) / fraction : -1;
  n += std::snprintf(buf + n, sizeof buf - n, "  %s elapsed  %s left", format_duration(elapsed).c_str(),
                     fraction > 0 ? format_duration(left).c_str() : "?");
  std::string out(buf);
  if (!what.empty()) out += "  " + (what.size() > 48 ? "..." + what.substr(what.size() - 45) : what);
  return out;
}

void Progress::step(const std::string& what, uint64_t bytes) {
  ++items_;
  bytes_ += bytes;
  if (!active_) return;
  // At most 10 redraws a second (thousands of small tensors would otherwise flood the terminal), and the last.
  const auto now = std::chrono::steady_clock::now();
  if (items_ < total_items_ && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::fprintf(stderr, "\r%s\033[K", line(what).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::clear() {
  if (!active_ || !drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace qlinear::cli
