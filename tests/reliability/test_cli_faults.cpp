// Faults met by the qlinear program itself: a checkpoint file replaced while `qlinear run` works through it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "reliability_util.hpp"

namespace qlinear::reliability {
namespace {

namespace fs = std::filesystem;

// `qlinear run` on a copy of a 4-layer fixture, slowed by many repetitions; once it has printed its first
// layer's row, model.safetensors is replaced (a new file renamed over it, as a download or a re-save does).
// The run notices before the next layer (verify_unchanged), names the file and the change, exits 1, and is
// not killed by a signal.
TEST(CliFaults, CheckpointReplacedWhileRunIsProcessingIt) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  fs::create_directories(ckpt);
  const std::string fixture = std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a16-fp8";
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture + "/" + f, ckpt + "/" + f);
  const std::string out_path = dir / "stdout", err_path = dir / "stderr";
  std::vector<std::string> argv_s = {QLINEAR_CLI_PATH, "run", ckpt, "--m", "1,16", "--reps", "100"};
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0) ::_exit(126);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  bool replaced = false;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL() << "qlinear run did not finish in 240 s";
    }
    // The first layer's rows are out (stdout is flushed after each layer): replace the file.
    if (!replaced && read_all(out_path).find("encoder.layer.0.attention.output.dense") != std::string::npos) {
      const std::string fresh = ckpt + "/.fresh";
      fs::copy_file(fixture + "/model.safetensors", fresh);
      fs::rename(fresh, ckpt + "/model.safetensors");
      replaced = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(replaced) << "the run ended before the file could be replaced:\n" << read_all(out_path);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = read_all(err_path);
  EXPECT_NE(err.find(ckpt + "/model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("it was replaced by another file"), std::string::npos) << err;
  EXPECT_EQ(err.find("internal error"), std::string::npos) << err;
}

}  // namespace
}  // namespace qlinear::reliability
