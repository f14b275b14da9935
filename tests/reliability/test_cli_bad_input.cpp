// Bad input to the qlinear command: each invocation must end with exit status 2 (usage: the command line is
// wrong) or 1 (the command ran and failed: a checkpoint that does not load), print a message that names the
// flag, value or file and what was expected, and never die from a signal.
#include <functional>

#include "reliability_util.hpp"

namespace qlinear::reliability {
namespace {

struct BadInvocation {
  const char* category;
  std::vector<std::string> args;
  int exit_code;
  std::vector<std::string> message;  // every piece must appear in stderr
};

std::string fixture(const std::string& scheme) { return std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/" + scheme; }

std::vector<BadInvocation> bad_invocations() {
  const std::string ckpt = fixture("w8a8-fp8-tensor");
  return {
      {"command", {"frobnicate"}, 2, {"unknown command 'frobnicate'", "Commands:"}},
      {"command", {}, 2, {"Usage: qlinear <command>"}},
      {"option", {"run", ckpt, "--bogus", "1"}, 2, {"unknown option --bogus", "--tp-rank"}},
      {"option", {"kernels", "--json=1"}, 2, {"option --json takes no value"}},
      {"option", {"bench", "--scheme"}, 2, {"option --scheme needs a value"}},
      {"option", {"inspect", ckpt, "extra"}, 2, {"unexpected argument 'extra'"}},
      {"scheme", {"kernels", "--explain", "--scheme", "w9a9"}, 2, {"unknown scheme 'w9a9'", "w8a8-fp8-tensor"}},
      {"scheme", {"bench", "--scheme", "fp8"}, 2, {"unknown scheme 'fp8'", "w4a4-nvfp4"}},
      {"scheme", {"kernels", "--explain"}, 2, {"--scheme is required"}},
      {"scheme", {"bench", "--m", "1"}, 2, {"--scheme is required"}},
      {"integer", {"run", ckpt, "--m", "abc"}, 2, {"option --m: 'abc' is not an integer"}},
      {"integer", {"run", ckpt, "--m", "1,,16"}, 2, {"option --m: '' is not an integer"}},
      {"integer", {"run", ckpt, "--m", "16,"}, 2, {"option --m: '' is not an integer"}},
      {"integer", {"kernels", "--explain", "--scheme", "w8a8-mxfp8", "--k", "4096.5"}, 2, {"'4096.5' is not an integer"}},
      {"integer", {"kernels", "--explain", "--scheme", "w8a8-mxfp8", "--n", "99999999999999999999"}, 2,
       {"option --n: '99999999999999999999' is not an integer"}},
      {"integer", {"run", ckpt, "--m", "-3"}, 2, {"option --m: -3 is below the minimum 1"}},
      {"integer", {"bench", "--scheme", "w8a16-mxfp8", "--n", "0"}, 2, {"option --n: 0 is below the minimum 1"}},
      {"integer", {"run", ckpt, "--reps", "0"}, 2, {"option --reps: 0 is below the minimum 1"}},
      {"integer", {"run", ckpt, "--tp-rank", "-1"}, 2, {"option --tp-rank: -1 is below the minimum 0"}},
      {"tensor-parallel", {"run", ckpt, "--tp-rank", "2", "--tp-size", "2"}, 2, {"--tp-rank 2 must be below --tp-size 2"}},
      {"tensor-parallel", {"run", ckpt, "--tp-size", "0"}, 2, {"option --tp-size: 0 is below the minimum 1"}},
      {"tensor-parallel", {"run", ckpt, "--tp-reduce", "output"}, 2, {"--tp-reduce applies to --tp N"}},
      {"tensor-parallel", {"run", ckpt, "--tp", "2", "--tp-reduce", "f16"}, 2, {"--tp-reduce f16: expected f32 or output"}},
      {"tensor-parallel", {"run", ckpt, "--tp-size", "5", "--tp-rank", "1", "--m", "1"}, 1,
       {"do not split evenly over tensor-parallel size 5"}},
      {"platform", {"run", ckpt, "--platform", "tpu"}, 2, {"--platform tpu: expected cpu, cuda"}},
      {"platform", {"kernels", "--platform", "cuda:x"}, 2, {"--platform cuda:x: expected cuda:N"}},
      {"platform", {"kernels", "--explain", "--scheme", "w8a8-mxfp8", "--out", "f64"}, 2,
       {"--out must be bf16, f16 or f32"}},
      {"platform", {"bench", "--scheme", "w8a16-mxfp8", "--backend", "nokernel", "--n", "64", "--k", "64"}, 2,
       {"--backend nokernel: not cpu, cuda, reference or a kernel name"}},
      {"platform", {"bench", "--scheme", "w8a16-mxfp8", "--compare", "numpy", "--n", "64", "--k", "64"}, 2,
       {"--compare numpy: 'numpy' is not an anchor; expected a list of bf16, vendor, reference, read"}},
      {"platform", {"bench", "--scheme", "w8a16-mxfp8", "--shapes", "llama9"}, 2,
       {"--shapes llama9: expected llama3-8b, llama3-70b, qwen2.5-7b"}},
      {"path", {"run"}, 2, {"missing CKPT"}},
      {"path", {"inspect"}, 2, {"missing CKPT"}},
      {"path", {"run", "/nonexistent/ckpt"}, 1, {"/nonexistent/ckpt", "no such file or directory"}},
      {"path", {"inspect", std::string(QLINEAR_TEST_DATA) + "/safetensors/python_dtypes.safetensors"}, 1,
       {"safetensors/python_dtypes.safetensors is not a checkpoint: the file's directory has no config.json"}},
      {"path", {"run", std::string(QLINEAR_TEST_DATA) + "/formats/decode_bf16.f32"}, 1,
       {"formats/decode_bf16.f32 is not a checkpoint: expected a model directory"}},
      {"path", {"run", std::string(QLINEAR_TEST_DATA) + "/formats"}, 1,
       {"formats is not a checkpoint: the directory has no config.json"}},
      {"regex", {"run", ckpt, "--layers", "(", "--m", "1"}, 1, {"layer regex (--layers): regex \"(\" does not compile: missing )"}},
      {"regex", {"run", ckpt, "--layers", "no_such_layer", "--m", "1"}, 1,
       {"no quantized linear layer matches --layers 'no_such_layer'"}},
      {"quantize", {"quantize", "in.safetensors"}, 2, {"expected IN and OUT"}},
      {"quantize", {"quantize", "in", "out", "--scheme", "zz"}, 2, {"--scheme 'zz' is unknown"}},
  };
}

TEST(CliBadInput, EveryBadInvocationIsAUsageOrRunErrorWithAMessage) {
  const auto cases = bad_invocations();
  ASSERT_GE(cases.size(), 15u);
  for (const BadInvocation& c : cases) {
    SCOPED_TRACE(std::string(c.category) + ": qlinear " + ::testing::PrintToString(c.args));
    const CliResult r = run_cli(c.args, {}, 120);
    EXPECT_EQ(r.signal, 0) << r.describe();
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.describe();
    for (const std::string& piece : c.message) {
      EXPECT_NE(r.err.find(piece), std::string::npos) << "missing \"" << piece << "\"\n" << r.describe();
    }
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.describe();
  }
}

}  // namespace
}  // namespace qlinear::reliability

namespace qlinear::reliability {
namespace {

// A copy of a real fixture with one thing broken.
std::string broken_fixture(const TempDir& dir, const std::string& name,
                           const std::function<void(const std::string& ckpt)>& breakage) {
  const std::string ckpt = dir / name;
  std::filesystem::create_directories(ckpt);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a16-fp8/" + f, ckpt + "/" + f);
  }
  breakage(ckpt);
  return ckpt;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(CliBadInput, BrokenCheckpointsAreRunErrorsThatNameTheFile) {
  TempDir dir;
  struct Case {
    std::string ckpt;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {broken_fixture(dir, "truncated",
                      [](const std::string& c) {
                        std::filesystem::resize_file(c + "/model.safetensors",
                                                     std::filesystem::file_size(c + "/model.safetensors") / 2);
                      }),
       {"model.safetensors", "run past the end of the data section"}},
      {broken_fixture(dir, "header-length",
                      [](const std::string& c) {
                        std::string b = read_all(c + "/model.safetensors");
                        for (int i = 0; i < 8; ++i) b[i] = '\xff';
                        write_file(c + "/model.safetensors", b);
                      }),
       {"model.safetensors", "above the 100000000-byte limit"}},
      {broken_fixture(dir, "empty-model", [](const std::string& c) { write_file(c + "/model.safetensors", ""); }),
       {"model.safetensors", "shorter than the 8-byte header length"}},
      {broken_fixture(dir, "config-not-json", [](const std::string& c) { write_file(c + "/config.json", "{\"a\": "); }),
       {"config.json", "invalid JSON"}},
      {broken_fixture(dir, "config-no-quantization",
                      [](const std::string& c) { write_file(c + "/config.json", "{\"model_type\": \"bert\"}"); }),
       {"config.json", "no \"quantization_config\""}},
      {broken_fixture(dir, "no-config", [](const std::string& c) { std::filesystem::remove(c + "/config.json"); }),
       {"config.json", "cannot open"}},
      {broken_fixture(dir, "no-weights",
                      [](const std::string& c) { std::filesystem::remove(c + "/model.safetensors"); }),
       {"no-weights"}},
  };
  for (const Case& c : cases) {
    for (const char* cmd : {"inspect", "run"}) {
      SCOPED_TRACE(std::string(cmd) + " " + c.ckpt);
      std::vector<std::string> args = {cmd, c.ckpt};
      if (std::string(cmd) == "run") args.insert(args.end(), {"--m", "1", "--reps", "1"});
      const CliResult r = run_cli(args);
      EXPECT_EQ(r.signal, 0) << r.describe();
      EXPECT_EQ(r.exit_code, 1) << r.describe();
      for (const std::string& piece : c.message) {
        EXPECT_NE(r.err.find(piece), std::string::npos) << "missing \"" << piece << "\"\n" << r.describe();
      }
      EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.describe();
    }
  }
}

}  // namespace
}  // namespace qlinear::reliability
