#pragma once
// Drawings of a bench run (bench_record.hpp), self-contained (inline SVG, no script, no font or file from
// the network):
//   write_report_html  a page with the machine and the regenerating command; per shape, a chart of the
//                      speed-up over each anchor against M (log M, one line per scheme, the 1.0 line
//                      marked), a roofline chart of the (scheme, M) points, and the table of numbers;
//   write_plot_svg     one roofline chart of every row, with a title, axis units and a legend.
#include <string>

#include "cli/bench_record.hpp"
#include "qlinear/status.hpp"

namespace qlinear::cli {

// Chart size in pixels (the browser test checks the rendered size).
inline constexpr int kChartWidth = 640;
inline constexpr int kChartHeight = 360;

// The colour of the i-th scheme of a run (a line, its points and its legend entry).
const char* scheme_colour(size_t index);

Status write_report_html(const std::string& path, const BenchRun& run);
Status write_plot_svg(const std::string& path, const BenchRun& run);

}  // namespace qlinear::cli
