#pragma once
// What one `qlinear bench` run measured: the machine, the command, the roofline and one row per
// (scheme, shape, M) with its anchors. The JSON form (--json) is what tools/gen_perf.py reads; the HTML
// report and the SVG plot (bench_report.hpp) draw the same rows.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/layer_runner.hpp"
#include "cli/roofline.hpp"

namespace qlinear::cli {

struct AnchorRow {
  std::string name;   // the anchor's implementation: "onednn_bf16", "cublas_bf16", ...
  std::string impl;   // the library's own implementation string, where it has one
  double median_ms = -1, min_ms = -1;
  std::string error;  // why the anchor could not run this row (then no times)
  std::string note;   // bench::Timing::note
};

struct BenchRow {
  std::string scheme, family, shape, kernel;
  int64_t n = 0, k = 0;
  Measurement ours;
  double ops_per_byte = 0;       // 2 M N K / (weight + activation + output bytes)
  double roofline_fraction = -1;
  std::map<std::string, AnchorRow> compare;  // by anchor kind: "bf16", "vendor", "reference"
  // anchor time / our time (> 1: we are faster); -1 when the anchor has no time.
  double ratio(const std::string& kind) const;
};

// A (scheme, shape, M) not measured, and why (a smaller M already took most of a measurement's budget).
struct SkippedRow {
  std::string scheme, shape;
  int64_t m = 0;
  std::string reason;
};

struct BenchRun {
  std::vector<std::pair<std::string, std::string>> machine;  // ("cpu", "..."), ("gpu", "..."), ("versions", ...)
  std::string command;       // the command line that regenerates the run
  std::string backend;       // "cpu", "cuda", ...
  std::vector<std::string> schemes, anchors;
  int load = 0;              // busy processes during the run
  bool have_roofline = false;
  Roofline roofline;
  std::vector<BenchRow> rows;
  std::vector<SkippedRow> skipped;
  std::string interrupted;   // why the run stopped early (a signal), with the rows it had measured
  nlohmann::json to_json() const;
};

}  // namespace qlinear::cli
