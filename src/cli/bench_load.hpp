#pragma once
// `qlinear bench --load N`: N busy processes (one spinning loop each) for the duration of the run, so that
// the kernels are measured on a machine that is not idle; stopped (SIGKILL, reaped) when the object goes.
#include <sys/types.h>

#include <vector>

#include "qlinear/status.hpp"

namespace qlinear::cli {

class BusyLoad {
 public:
  BusyLoad() = default;
  ~BusyLoad() { stop(); }
  BusyLoad(const BusyLoad&) = delete;
  BusyLoad& operator=(const BusyLoad&) = delete;
  Status start(int processes);
  void stop();
  int running() const { return static_cast<int>(pids_.size()); }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace qlinear::cli
