#include "cli/bench_load.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace qlinear::cli {

Status BusyLoad::start(int processes) {
  for (int i = 0; i < processes; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      stop();
      return Status::error("--load: fork of busy process " + std::to_string(i + 1) + " failed: " + why);
    }
    if (pid == 0) {
      // The child: spin until killed; dies with the parent should the parent die first.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    pids_.push_back(pid);
  }
  return Status::ok();
}

void BusyLoad::stop() {
  for (pid_t pid : pids_) ::kill(pid, SIGKILL);
  for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  pids_.clear();
}

}  // namespace qlinear::cli
