// `qlinear bench` on the CPU, end to end (not timed: what is checked is that every row is there and honest):
// every scheme runs and gives a figure; --compare takes a list and each anchor gives a time and a ratio or
// an error row (the run goes on); --load starts and stops its busy processes; --report and --plot write
// self-contained files. The HTML page is checked in a browser by report_in_browser.py.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_run.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {
namespace {

using test_cli::CliRun;
using test_cli::json_of;
using test_cli::run;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("qlinear-bench-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(Bench, EverySchemeGivesAFigureWithTheReferenceAnchor) {
  std::string schemes;
  for (const Scheme& s : all_schemes()) schemes += (schemes.empty() ? "" : ",") + std::string(s.name);
  // N = 1024: the layer is quantized as a 512-row block repeated (bench_layer.hpp); --check proves it valid.
  CliRun r = run("bench --scheme " + schemes + " --n 1024 --k 128 --m 1,3 --reps 2 --compare reference --check --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json_of(r.out);
  ASSERT_EQ(j["rows"].size(), 2 * all_schemes().size());
  EXPECT_EQ(j["schemes"].size(), all_schemes().size());
  for (const auto& row : j["rows"]) {
    SCOPED_TRACE(row.dump());
    EXPECT_GT(row["median_ms"].get<double>(), 0);
    EXPECT_LE(row["min_ms"].get<double>(), row["median_ms"].get<double>());
    EXPECT_EQ(row["n"], 1024);
    EXPECT_EQ(row["k"], 128);
    EXPECT_LT(row["rel_err_reference"].get<double>(), 0.05);
    const auto& ref = row["compare"]["reference"];
    EXPECT_EQ(ref["name"].get<std::string>().rfind("reference_", 0), 0u);
    EXPECT_GT(ref["ratio"].get<double>(), 0);
    EXPECT_NEAR(ref["ratio"].get<double>(), ref["median_ms"].get<double>() / row["median_ms"].get<double>(), 1e-9);
  }
  EXPECT_NE(j["machine"]["cpu"].get<std::string>().find("threads"), std::string::npos);
  EXPECT_NE(j["command"].get<std::string>().find("bench --scheme"), std::string::npos);
}

TEST(Bench, CompareListGivesEachAnchorOrItsErrorAndTheRunGoesOn) {
  // w4a16-mxfp4 has no vendor 4-bit GEMM on the CPU: its vendor anchor is an error row; int8 has one
  // (oneDNN s8s8) when qlinear was built with oneDNN, and an error naming the missing library otherwise.
  CliRun r = run("bench --scheme w4a16-mxfp4,w8a8-int8-dynamic --n 64 --k 128 --m 2 --reps 2 "
                 "--compare bf16,vendor,reference --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json_of(r.out);
  EXPECT_EQ(j["anchors"], nlohmann::json({"bf16", "vendor", "reference"}));
  ASSERT_EQ(j["rows"].size(), 2u);
  for (const auto& row : j["rows"]) {
    SCOPED_TRACE(row.dump());
    const auto& c = row["compare"];
    ASSERT_TRUE(c.contains("bf16") && c.contains("vendor") && c.contains("reference"));
    for (const char* kind : {"bf16", "vendor", "reference"}) {
      const auto& a = c[kind];
      EXPECT_TRUE(a.contains("name"));
      // Either a time and a ratio, or an error and neither.
      EXPECT_NE(a.contains("error"), a.contains("median_ms"));
      EXPECT_EQ(a.contains("median_ms"), a.contains("ratio"));
    }
  }
  const auto& mxfp4 = j["rows"][0];
  EXPECT_EQ(mxfp4["scheme"], "w4a16-mxfp4");
  ASSERT_TRUE(mxfp4["compare"]["vendor"].contains("error"));
  EXPECT_NE(mxfp4["compare"]["vendor"]["error"].get<std::string>().find("no vendor 4-bit GEMM"), std::string::npos);
  const auto& int8 = j["rows"][1]["compare"]["vendor"];
  if (int8.contains("error")) {
    EXPECT_NE(int8["error"].get<std::string>().find("oneDNN"), std::string::npos);
  } else {
    EXPECT_EQ(int8["name"], "onednn_s8s8");
  }
  // The text form names the anchor that could not run and why.
  CliRun text = run("bench --scheme w4a16-mxfp4 --n 64 --k 128 --m 2 --reps 2 --compare vendor");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("vendor anchor could not run: no vendor 4-bit GEMM"), std::string::npos) << text.out;
}

TEST(Bench, TheReadFloorIsACudaAnchorAndSaysSoOnTheCpu) {
  CliRun r = run("bench --scheme w8a16-fp8 --n 64 --k 128 --m 1 --reps 2 --compare read --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json_of(r.out);
  const auto& read = j["rows"][0]["compare"]["read"];
  ASSERT_TRUE(read.contains("error")) << read.dump();
  EXPECT_NE(read["error"].get<std::string>().find("the read floor is a CUDA anchor"), std::string::npos) << read.dump();
}

TEST(Bench, UnknownAnchorOrShapeSetIsAUsageError) {
  CliRun a = run("bench --scheme w8a16-fp8 --compare bf16,cublas");
  EXPECT_EQ(a.code, 2);
  EXPECT_NE(a.out.find("'cublas' is not an anchor; expected a list of bf16, vendor, reference, read"), std::string::npos)
      << a.out;
  CliRun s = run("bench --scheme w8a16-fp8 --shapes qwen9");
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.out.find("qwen2.5-7b"), std::string::npos) << s.out;
  // A list of sets: each is looked up, and the message names the one that is not a set.
  CliRun l = run("bench --scheme w8a16-fp8 --shapes llama3-8b,qwen9");
  EXPECT_EQ(l.code, 2);
  EXPECT_NE(l.out.find("--shapes qwen9: expected llama3-8b"), std::string::npos) << l.out;
}

TEST(Bench, SustainOutsideItsRangeIsAUsageError) {
  CliRun r = run("bench --scheme w8a16-fp8 --sustain-ms 20000");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--sustain-ms: 20000 is above the maximum 10000"), std::string::npos) << r.out;
  CliRun n = run("bench --scheme w8a16-fp8 --sustain-ms -1");
  EXPECT_EQ(n.code, 2) << n.out;
}

TEST(Bench, GraphReplayNeedsTheCudaBackend) {
  CliRun r = run("bench --scheme w8a16-fp8 --n 64 --k 64 --m 1 --graph");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--graph: CUDA graphs time CUDA calls; this run is on the cpu backend"), std::string::npos)
      << r.out;
}

TEST(Bench, LoadStartsBusyProcessesAndStopsThemAfter) {
  CliRun r = run("bench --scheme w8a16-fp8 --n 64 --k 64 --m 1 --reps 2 --load 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json_of(r.out)["load"], 2);
  // Every busy process was stopped: they are forks of the bench process, so they carry its command line.
  CliRun ps = run("bench --scheme w8a16-fp8 --n 64 --k 64 --m 1 --reps 2 --load 1");
  EXPECT_NE(ps.out.find("load: 1 busy processes"), std::string::npos) << ps.out;
  FILE* p = ::popen("ps -eo ppid=,args= | grep -c '[q]linear bench --scheme w8a16-fp8 --n 64 --k 64 --m 1 --reps 2 --load'", "r");
  ASSERT_NE(p, nullptr);
  int count = -1;
  ASSERT_EQ(std::fscanf(p, "%d", &count), 1);
  ::pclose(p);
  EXPECT_EQ(count, 0) << "busy processes were left running";
}

TEST(Bench, ReportAndPlotAreSelfContainedWithOneLinePerScheme) {
  const auto dir = temp_dir("report");
  const auto html = dir / "report.html", svg = dir / "plot.svg";
  CliRun r = run("bench --scheme w8a8-int8-dynamic,w4a16-mxfp4,w8a16-fp8 --n 64 --k 128 --m 1,4,16 --reps 2 "
                 "--compare reference --json --report " + html.string() + " --plot " + svg.string());
  ASSERT_EQ(r.code, 0) << r.out;
  // --report measures the roofline: every rate of this CPU's units is there (int8 and fp32 exist on every
  // x86-64 machine the project supports).
  const auto j = json_of(r.out.substr(r.out.find("\n{") + 1));
  EXPECT_GT(j["roofline"]["dram_gbps"].get<double>(), 0);
  EXPECT_GT(j["roofline"]["fp32_gflops"].get<double>(), 0);
  EXPECT_GT(j["roofline"]["int8_gops"].get<double>(), 0);
  const std::string page = read_file(html);
  // No network resource: no script, no external font, image or stylesheet.
  for (const char* banned : {"<script", "http://", "https://", "@import", "url("}) {
    if (std::string(banned) == "http://") {
      // The SVG namespace is the only URL allowed (it is a name, never fetched).
      std::string p = page;
      for (size_t at; (at = p.find("http://www.w3.org/2000/svg")) != std::string::npos;) p.erase(at, 26);
      EXPECT_EQ(p.find(banned), std::string::npos) << banned;
    } else {
      EXPECT_EQ(page.find(banned), std::string::npos) << banned;
    }
  }
  EXPECT_NE(page.find("Regenerate this page with"), std::string::npos);
  EXPECT_NE(page.find("bench --scheme w8a8-int8-dynamic,w4a16-mxfp4,w8a16-fp8"), std::string::npos);
  for (const char* scheme : {"w8a8-int8-dynamic", "w4a16-mxfp4", "w8a16-fp8"}) {
    EXPECT_NE(page.find("<g class='line' data-scheme='" + std::string(scheme) + "'>"), std::string::npos) << scheme;
  }
  EXPECT_NE(page.find("class='parity'"), std::string::npos);
  EXPECT_NE(page.find("class='roofline'"), std::string::npos);
  const std::string plot = read_file(svg);
  EXPECT_EQ(plot.rfind("<svg", 0), 0u);
  EXPECT_NE(plot.find("arithmetic intensity (OP per DRAM byte"), std::string::npos);
  EXPECT_NE(plot.find("GOP/s"), std::string::npos);
  EXPECT_NE(plot.find("class='legend' data-scheme='w4a16-mxfp4'"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Bench, GenPerfWritesTheDocumentSectionsFromTheJson) {
  // tools/gen_perf.py turns a run's JSON (and its report's charts) into docs/PERF.md's generated sections.
  const auto dir = temp_dir("genperf");
  const auto json = dir / "run.json", html = dir / "run.html", doc = dir / "PERF.md";
  const std::string bench = std::string(QLINEAR_CLI_PATH) +
                            " bench --scheme w4a16-mxfp4,w8a8-int8-static --n 64 --k 128 --m 1,2 --reps 2"
                            " --compare vendor,reference --json --report " + html.string() + " 2>/dev/null > " +
                            json.string();
  ASSERT_EQ(std::system(bench.c_str()), 0) << bench;
  {
    std::ofstream d(doc);
    d << "# Perf\n\nhand-written\n\n<!-- BEGIN generated by tools/gen_perf.py: do not edit by hand -->\nold\n"
         "<!-- END generated by tools/gen_perf.py -->\n\ntail\n";
  }
  const std::string cmd = "python3 " + std::string(QLINEAR_SOURCE_DIR) + "/tools/gen_perf.py " + json.string() +
                          " --doc " + doc.string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string text = read_file(doc);
  for (const char* want : {"hand-written", "tail", "#### Floors", "#### mxfp4", "#### int8_scaled_mm",
                           "qlinear bench --scheme w4a16-mxfp4,w8a8-int8-static", "vendor anchor could not run 2 rows",
                           "| custom | 2 | w8a8-int8-static |", "![custom: speed-up over reference](run/01-speedup.svg)"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_EQ(text.find("\nold\n"), std::string::npos) << "the old generated text was not replaced";
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "00-speedup.svg"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qlinear
