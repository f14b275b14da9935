#include "checkpoint/staged_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace qlinear::detail {

std::string staged_name(const std::string& dir, const std::string& file) {
  static std::atomic<uint64_t> counter{0};
  return dir + "/." + file + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) +
         ".staged";
}

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

long temporary_owner(const std::string& name) {
  if (name.size() < 2 || name[0] != '.') return 0;
  std::string_view s(name);
  const bool staged = s.ends_with(".staged");
  if (staged) s.remove_suffix(7);
  // The last two dot-separated fields: <pid>.<n>.
  const size_t dot_n = s.rfind('.');
  if (dot_n == std::string_view::npos || !all_digits(s.substr(dot_n + 1))) return 0;
  const size_t dot_pid = s.rfind('.', dot_n - 1);
  if (dot_pid == std::string_view::npos || dot_pid == 0) return 0;
  const std::string_view pid_text = s.substr(dot_pid + 1, dot_n - dot_pid - 1);
  if (!all_digits(pid_text)) return 0;
  if (!staged && !s.substr(0, dot_pid).ends_with(".tmp")) return 0;
  long pid = 0;
  std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
  return pid;
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const long pid = temporary_owner(name);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to probe)
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    if (::unlink(it->path().c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::error(dir + ": cannot open the directory to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::error(dir + ": fsync of the directory failed: " + std::strerror(err));
  return Status::ok();
}

}  // namespace qlinear::detail
