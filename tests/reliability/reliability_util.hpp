#pragma once
// Shared pieces of the reliability tests: the layers every scheme makes, the kernel this machine's CPU
// priority list selects for each, a scratch directory, and a runner for the qlinear binary that reports its
// exit status, its signal (if any) and what it printed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::reliability {

// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "qlinear-reliability-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    // A test may have made the directory read-only; give the permission back before removing it.
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// One layer of `scheme` at [n, k], quantized from seeded random weights, not yet processed.
inline LinearLayer make_layer(const Scheme& scheme, int64_t n, int64_t k, uint64_t seed) {
  MakeLayerOptions opt;
  opt.input_min = -3.0f;
  opt.input_max = 3.0f;
  const Tensor w = random_normal(DType::kF32, {n, k}, seed, 0.2);
  auto layer = quantize_layer("reliability." + std::string(scheme.name), scheme, w, opt);
  EXPECT_TRUE(layer) << scheme.name << ": " << layer.message();
  return layer ? std::move(*layer) : LinearLayer{};
}

// Shapes every scheme accepts: K a multiple of 128 (FP8 blocks, MX 1x32, NVFP4 1x16), N of 128.
inline constexpr int64_t kN = 128;
inline constexpr int64_t kK = 256;

struct SelectedKernel {
  const Scheme* scheme;
  const LinearKernel* kernel;
};

// For every scheme, the kernel this machine's CPU priority list selects for a [kN, kK] layer.
inline std::vector<SelectedKernel> cpu_selected_kernels() {
  std::vector<SelectedKernel> out;
  SelectOptions so;
  so.read_environment = false;
  for (const Scheme& s : all_schemes()) {
    auto k = select_kernel(make_config(s, kN, kK), Platform::host_cpu(), so);
    EXPECT_TRUE(k) << s.name << ": " << k.message();
    if (k) out.push_back({&s, *k});
  }
  return out;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

// ---- The qlinear binary ----------------------------------------------------------------------------------

struct CliResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it (0: none)
  bool timed_out = false;
  std::string out, err;
  std::string describe() const {
    std::ostringstream s;
    s << "exit " << exit_code << " signal " << signal << (timed_out ? " (timed out)" : "") << "\nstderr: " << err
      << "\nstdout: " << out.substr(0, 2000);
    return s.str();
  }
};

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs QLINEAR_CLI_PATH with `args`; `env` entries ("NAME=value") are added to the environment.
inline CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                         int timeout_s = 300) {
  TempDir io;
  const std::string out_path = io / "stdout", err_path = io / "stderr";
  std::vector<std::string> argv_s = {QLINEAR_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  // Everything the child needs is built before fork(): between fork and exec only async-signal-safe calls.
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);  // earlier entries win in getenv
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0) ::_exit(126);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  CliResult r;
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return r;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_all(out_path);
  r.err = read_all(err_path);
  return r;
}

}  // namespace qlinear::reliability
