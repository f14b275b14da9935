// The qlinear command end to end: every subcommand's help, the quantize -> inspect -> run pipeline on a
// small model, JSON output that parses, and the demo.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "qlinear/random.hpp"
#include "qlinear/scheme.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

using test_cli::CliRun;
using test_cli::json_of;
using test_cli::run;

TEST(Cli, EverySubcommandHasHelp) {
  CliRun top = run("--help");
  EXPECT_EQ(top.code, 0);
  for (const char* cmd : {"demo", "inspect", "run", "bench", "quantize", "kernels"}) {
    EXPECT_NE(top.out.find(cmd), std::string::npos) << cmd;
    CliRun r = run(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("Usage: qlinear " + std::string(cmd)), std::string::npos) << r.out;
  }
}

TEST(Cli, KernelsListsAndExplainsAsJson) {
  CliRun list = run("kernels --json");
  ASSERT_EQ(list.code, 0) << list.out;
  auto j = json_of(list.out);
  EXPECT_GE(j["kernels"].size(), 8u);
  CliRun schemes = run("kernels --list-schemes --json");
  ASSERT_EQ(schemes.code, 0);
  EXPECT_EQ(json_of(schemes.out).size(), all_schemes().size());
  CliRun explain = run("kernels --explain --scheme w8a8-mxfp8 --n 64 --k 100 --json");
  EXPECT_EQ(explain.code, 1);  // nothing fits: K is not a multiple of 32
  auto e = json_of(explain.out);
  EXPECT_TRUE(e["selected"].is_null());
  EXPECT_NE(e["candidates"].back()["reason"].get<std::string>().find("K=100 is not a multiple of 32"),
            std::string::npos);
  CliRun sm90 = run("kernels --explain --scheme w8a8-fp8-channel --platform sm90");
  EXPECT_EQ(sm90.code, 0) << sm90.out;
  // The decode GEMM's tuned routes for the layer (tuning/mma_decode_tuned_h200.inc: 70b.down, MXFP4): 256-row
  // units with 4 K splits at M 17..32 and 33..64, the built-in rules in the two buckets above.
  CliRun tuned = run("kernels --explain --scheme w4a16-mxfp4 --n 8192 --k 28672 --platform sm90 --json");
  ASSERT_EQ(tuned.code, 0) << tuned.out;
  const auto all_routes = json_of(tuned.out)["mma_decode_tuned"];
  nlohmann::json routes = nlohmann::json::array();  // the H200's entries (the H100's are listed too)
  for (const auto& r : all_routes) {
    if (r["device"] == "NVIDIA H200") routes.push_back(r);
  }
  ASSERT_EQ(routes.size(), 4u) << tuned.out;
  EXPECT_EQ(routes[0]["m_min"], 17);
  EXPECT_EQ(routes[0]["m_max"], 32);
  EXPECT_EQ(routes[1]["m_max"], 64);
  EXPECT_EQ(routes[1]["route"], "wgmma 64 tokens x 256 rows, split-K 4");
  EXPECT_EQ(routes[3]["m_max"], 256);
  EXPECT_EQ(routes[3]["route"], "the built-in rule");
}

TEST(Cli, TuneDecodeRejectsWhatItDoesNotTune) {
  EXPECT_EQ(run("tune --decode --m 16").code, 2);           // M <= 16 runs other kernels
  EXPECT_EQ(run("tune --decode --kinds int8").code, 2);     // cuBLASLt's option
  EXPECT_EQ(run("tune --schemes w4a16-mxfp4").code, 2);     // needs --decode
  CliRun help = run("tune --help");
  EXPECT_NE(help.out.find("qlinear tune --decode"), std::string::npos) << help.out;
}

TEST(Cli, QuantizeInspectRunPipeline) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qlinear-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir / "dense");
  // A tiny dense "model": two projections, a norm and an embedding.
  ASSERT_TRUE(write_safetensors((dir / "dense/model.safetensors").string(),
                                {{"model.layers.0.mlp.up_proj.weight", random_normal(DType::kBF16, {96, 64}, 1, 0.1)},
                                 {"model.layers.0.mlp.down_proj.weight", random_normal(DType::kBF16, {64, 96}, 2, 0.1)},
                                 {"model.norm.weight", random_normal(DType::kBF16, {64}, 3)},
                                 {"model.embed_tokens.weight", random_normal(DType::kBF16, {10, 64}, 4)}}));
  std::ofstream(dir / "dense/config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})";
  for (const char* scheme : {"w8a8-int8-dynamic", "w6a16-mxfp6-e3m2", "w8a8-fp8-tensor"}) {
    SCOPED_TRACE(scheme);
    const std::string out = (dir / scheme).string();
    const std::string extra = std::string(scheme) == "w8a8-fp8-tensor" ? " --input-range -4,4" : "";
    CliRun q = run("quantize " + (dir / "dense").string() + " " + out + " --scheme " + scheme + extra);
    ASSERT_EQ(q.code, 0) << q.out;
    EXPECT_NE(q.out.find("2 linear layers"), std::string::npos) << q.out;
    CliRun i = run("inspect " + out + " --json");
    ASSERT_EQ(i.code, 0) << i.out;
    auto ij = json_of(i.out);
    ASSERT_EQ(ij["layers"].size(), 2u);
    EXPECT_EQ(ij["layers"][0]["scheme"], scheme);
    CliRun r = run("run " + out + " --m 1,3 --reps 2 --json");
    ASSERT_EQ(r.code, 0) << r.out;
    auto rj = json_of(r.out);
    ASSERT_EQ(rj.size(), 4u);
    for (const auto& rec : rj) {
      EXPECT_TRUE(rec["ok"].get<bool>()) << rec.dump();
      EXPECT_LT(rec["rel_err_reference"].get<double>(), 1e-2);
    }
  }
  // A static scheme without the activation range is refused with the remedy.
  CliRun missing = run("quantize " + (dir / "dense").string() + " " + (dir / "x").string() + " --scheme w8a8-int8-static");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("--input-range MIN,MAX"), std::string::npos) << missing.out;
  fs::remove_all(dir);
}

TEST(Cli, DemoRunsEverySchemeAndAgreesWithTheReference) {
  CliRun d = run("demo --m 3 --n 64 --k 128 --json");
  ASSERT_EQ(d.code, 0) << d.out;
  auto j = json_of(d.out);
  ASSERT_EQ(j.size(), all_schemes().size());
  for (const auto& row : j) {
    EXPECT_EQ(row["error"], "") << row.dump();
    EXPECT_LT(row["rel_err_reference"].get<double>(), 1e-2) << row.dump();
    EXPECT_LT(row["rel_err_fp64"].get<double>(), 0.2) << row.dump();  // 4-bit formats lose the most
  }
}

}  // namespace
}  // namespace qlinear

namespace qlinear::test_cli {
namespace {

// Progress lines go to a terminal only: through a pipe (and with --json) stderr stays free of them; under a
// pseudo-terminal (script(1), when installed) `quantize` and `run` draw "N/M tensors|layers ... left".
TEST(Cli, ProgressOnlyOnATerminal) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qlinear-progress-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "dense");
  ASSERT_TRUE(write_safetensors((dir / "dense/model.safetensors").string(),
                                {{"model.layers.0.mlp.up_proj.weight", random_normal(DType::kBF16, {96, 64}, 1, 0.1)},
                                 {"model.layers.0.mlp.down_proj.weight", random_normal(DType::kBF16, {64, 96}, 2, 0.1)},
                                 {"model.norm.weight", random_normal(DType::kBF16, {64}, 3)}}));
  std::ofstream(dir / "dense/config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})";
  const std::string in = (dir / "dense").string();
  CliRun piped = run("quantize " + in + " " + (dir / "a").string() + " --scheme w8a16-fp8");
  ASSERT_EQ(piped.code, 0) << piped.out;
  EXPECT_EQ(piped.out.find("3/3 tensors"), std::string::npos) << piped.out;
  EXPECT_EQ(piped.out.find('\r'), std::string::npos) << piped.out;
  CliRun json = run("run " + (dir / "a").string() + " --m 1 --reps 1 --json");
  ASSERT_EQ(json.code, 0) << json.out;
  EXPECT_EQ(json.out.find('\r'), std::string::npos) << json.out;
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) not installed";
  auto under_pty = [&](const std::string& args) {
    CliRun r;
    const std::string cmd = "script -qec \"" + std::string(QLINEAR_CLI_PATH) + " " + args + "\" /dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::array<char, 4096> buf;
    size_t n;
    while (p != nullptr && (n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    r.code = p != nullptr ? WEXITSTATUS(::pclose(p)) : -1;
    return r;
  };
  CliRun q = under_pty("quantize " + in + " " + (dir / "b").string() + " --scheme w8a16-fp8");
  ASSERT_EQ(q.code, 0) << q.out;
  EXPECT_NE(q.out.find("3/3 tensors"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find(" left"), std::string::npos) << q.out;
  CliRun r = under_pty("run " + (dir / "b").string() + " --m 1 --reps 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("2/2 layers"), std::string::npos) << r.out;
  CliRun rj = under_pty("run " + (dir / "b").string() + " --m 1 --reps 1 --json");
  EXPECT_EQ(rj.out.find("layers  "), std::string::npos) << rj.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qlinear::test_cli
