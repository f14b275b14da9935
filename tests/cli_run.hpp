#pragma once
// Running the qlinear program from a test (QLINEAR_CLI_PATH, set per test program by tests/CMakeLists.txt):
// its exit code and output, and the JSON document in that output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace qlinear::test_cli {

struct CliRun {
  int code = -1;
  std::string out;  // stdout and stderr together
};

inline CliRun run(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(QLINEAR_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// JSON from a command's output (stderr is merged; the JSON document is the part from the first '[' or '{').
inline nlohmann::json json_of(const std::string& out) {
  const size_t at = out.find_first_of("[{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at));
}

// A committed checkpoint under tests/fixtures.
inline std::string fixture(const std::string& name) {
  return std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/" + name;
}

}  // namespace qlinear::test_cli
