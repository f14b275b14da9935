#pragma once
// A one-line progress display for long commands (`qlinear quantize`, `qlinear run` on a model): items done
// of the total, bytes done, GB/s, elapsed time and the time left, redrawn in place on stderr. Quiet (draws
// nothing) when stderr is not a terminal or the command prints JSON, so logs and pipes stay clean.
#include <chrono>
#include <cstdint>
#include <string>

namespace qlinear::cli {

class Progress {
 public:
  // `noun`: what the items are ("tensors", "layers"). total_bytes 0: no byte figures.
  Progress(std::string noun, uint64_t total_items, uint64_t total_bytes, bool json_output);
  ~Progress();  // ends a drawn line

  bool active() const { return active_; }
  // One more item done, of `bytes` bytes; `what` names it (cut to fit).
  void step(const std::string& what, uint64_t bytes = 0);
  // Erases the line so that the caller can print; the next step() draws it again.
  void clear();
  // The line as it would be drawn (for tests): "12/291 tensors  3.10/16.06 GB  1.05 GB/s  0:03 elapsed  0:12 left  NAME"
  // (MB below 1 GB in all).
  std::string line(const std::string& what) const;

 private:
  std::string noun_;
  uint64_t total_items_, total_bytes_;
  uint64_t items_ = 0, bytes_ = 0;
  bool active_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
};

// "m:ss" or "h:mm:ss".
std::string format_duration(double seconds);

}  // namespace qlinear::cli
