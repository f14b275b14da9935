#include "cli/bench_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace qlinear::cli {

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                                    "#17becf", "#bcbd22", "#000080", "#006400", "#b8860b", "#4b0082"};

// Plot area inside a kChartWidth x kChartHeight chart; the legend sits right of it.
constexpr double kLeft = 64, kRight = 460, kTop = 40, kBottom = kChartHeight - 48;

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

size_t scheme_index(const BenchRun& run, const std::string& scheme) {
  auto it = std::find(run.schemes.begin(), run.schemes.end(), scheme);
  return static_cast<size_t>(it - run.schemes.begin());
}

std::string svg_open(const std::string& cls, const std::string& title) {
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' class='" << cls << "' width='" << kChartWidth << "' height='"
    << kChartHeight << "' viewBox='0 0 " << kChartWidth << " " << kChartHeight
    << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='" << kChartWidth << "' height='" << kChartHeight << "' fill='white'/>\n"
    << "<text x='" << kChartWidth / 2 << "' y='20' text-anchor='middle' font-size='14' font-weight='bold'>"
    << esc(title) << "</text>\n";
  return o.str();
}

std::string axes(const std::string& x_label, const std::string& y_label) {
  std::ostringstream o;
  o << "<line x1='" << kLeft << "' y1='" << kBottom << "' x2='" << kRight << "' y2='" << kBottom
    << "' stroke='black'/>\n<line x1='" << kLeft << "' y1='" << kTop << "' x2='" << kLeft << "' y2='" << kBottom
    << "' stroke='black'/>\n<text x='" << (kLeft + kRight) / 2 << "' y='" << kChartHeight - 10
    << "' text-anchor='middle'>" << esc(x_label) << "</text>\n<text x='16' y='" << (kTop + kBottom) / 2
    << "' text-anchor='middle' transform='rotate(-90 16 " << (kTop + kBottom) / 2 << ")'>" << esc(y_label)
    << "</text>\n";
  return o.str();
}

std::string legend(const BenchRun& run, const std::vector<std::string>& schemes) {
  std::ostringstream o;
  double y = kTop + 8;
  for (const std::string& s : schemes) {
    const char* c = scheme_colour(scheme_index(run, s));
    o << "<g class='legend' data-scheme='" << esc(s) << "'><line x1='" << kRight + 14 << "' y1='" << y << "' x2='"
      << kRight + 34 << "' y2='" << y << "' stroke='" << c << "' stroke-width='3'/><text x='" << kRight + 40
      << "' y='" << y + 4 << "'>" << esc(s) << "</text></g>\n";
    y += 18;
  }
  return o.str();
}

std::vector<std::string> schemes_of(const std::vector<const BenchRow*>& rows) {
  std::vector<std::string> out;
  for (const BenchRow* r : rows) {
    if (std::find(out.begin(), out.end(), r->scheme) == out.end()) out.push_back(r->scheme);
  }
  return out;
}

// Speed-up over `anchor` against M (log2 axis), one line per scheme; the speed-up on a log axis too, so that
// 2x faster and 2x slower are the same distance from the 1.0 line.
std::string speedup_svg(const BenchRun& run, const std::vector<const BenchRow*>& rows, const std::string& shape,
                        const std::string& anchor) {
  std::set<std::string> anchor_names;
  double lo = 1e30, hi = 0, qlo = 1, qhi = 1;
  for (const BenchRow* r : rows) {
    lo = std::min(lo, std::log2(static_cast<double>(r->ours.m)));
    hi = std::max(hi, std::log2(static_cast<double>(r->ours.m)));
    const double q = r->ratio(anchor);
    if (q > 0) {
      qlo = std::min(qlo, q);
      qhi = std::max(qhi, q);
      anchor_names.insert(r->compare.at(anchor).name);
    }
  }
  if (hi <= lo) {
    lo -= 1;
    hi += 1;
  }
  const double ylo = std::log10(qlo / 1.25), yhi = std::log10(qhi * 1.25);
  auto px = [&](double m) { return kLeft + (kRight - kLeft) * (std::log2(m) - lo) / (hi - lo); };
  auto py = [&](double q) { return kBottom - (kBottom - kTop) * (std::log10(q) - ylo) / (yhi - ylo); };
  std::ostringstream o;
  const std::string named = anchor_names.size() == 1 ? " (" + *anchor_names.begin() + ")" : "";
  o << svg_open("speedup", shape + ": speed-up over " + anchor + named);
  // Ticks at 1, 2, 5 x 10^e inside the range (only the powers of ten when the range is wide).
  std::vector<double> ticks;
  const bool wide = yhi - ylo > 2.5;
  for (int e = static_cast<int>(std::floor(ylo)); e <= static_cast<int>(std::ceil(yhi)); ++e) {
    for (double f : {1.0, 2.0, 5.0}) {
      const double v = f * std::pow(10, e);
      if ((f == 1.0 || !wide) && std::log10(v) >= ylo && std::log10(v) <= yhi) ticks.push_back(v);
    }
  }
  for (double q : ticks) {
    o << "<line x1='" << kLeft << "' y1='" << py(q) << "' x2='" << kRight << "' y2='" << py(q)
      << "' stroke='#e4e4e4'/><text x='" << kLeft - 6 << "' y='" << py(q) + 4 << "' text-anchor='end'>"
      << fmt("%g", q) << "</text>\n";
  }
  std::set<int64_t> ms;
  for (const BenchRow* r : rows) ms.insert(r->ours.m);
  for (int64_t m : ms) {
    o << "<text x='" << px(static_cast<double>(m)) << "' y='" << kBottom + 16 << "' text-anchor='middle'>" << m
      << "</text>\n";
  }
  o << axes("M (tokens per call, log scale)", "speed-up: anchor time / qlinear time (log)");
  o << "<line class='parity' x1='" << kLeft << "' y1='" << py(1) << "' x2='" << kRight << "' y2='" << py(1)
    << "' stroke='#555' stroke-dasharray='6 4'/><text x='" << kRight - 4 << "' y='" << py(1) - 5
    << "' text-anchor='end' fill='#555'>1.0 = as fast as the anchor</text>\n";
  const std::vector<std::string> schemes = schemes_of(rows);
  bool any = false;
  for (const std::string& s : schemes) {
    std::vector<const BenchRow*> line;
    for (const BenchRow* r : rows) {
      if (r->scheme == s && r->ratio(anchor) > 0) line.push_back(r);
    }
    std::sort(line.begin(), line.end(), [](const BenchRow* a, const BenchRow* b) { return a->ours.m < b->ours.m; });
    if (line.empty()) continue;
    any = true;
    const char* c = scheme_colour(scheme_index(run, s));
    o << "<g class='line' data-scheme='" << esc(s) << "'><polyline fill='none' stroke='" << c
      << "' stroke-width='3' points='";
    for (const BenchRow* r : line) o << px(static_cast<double>(r->ours.m)) << "," << py(r->ratio(anchor)) << " ";
    o << "'/>";
    for (const BenchRow* r : line) {
      o << "<circle cx='" << px(static_cast<double>(r->ours.m)) << "' cy='" << py(r->ratio(anchor)) << "' r='4' fill='"
        << c << "'><title>" << esc(s) << " M=" << r->ours.m << ": " << fmt("%.2f", r->ratio(anchor))
        << "x</title></circle>";
    }
    o << "</g>\n";
  }
  if (!any) {
    o << "<text x='" << (kLeft + kRight) / 2 << "' y='" << (kTop + kBottom) / 2
      << "' text-anchor='middle' fill='#a00'>the " << esc(anchor) << " anchor could not run this shape</text>\n";
  }
  o << legend(run, schemes) << "</svg>\n";
  return o.str();
}

// GOP/s against arithmetic intensity (log-log), the roofline of each peak the schemes use, one point per row.
std::string roofline_svg(const BenchRun& run, const std::vector<const BenchRow*>& rows, const std::string& title) {
  double ai_lo = 1e30, ai_hi = 0, g_lo = 1e30, g_hi = 0;
  for (const BenchRow* r : rows) {
    ai_lo = std::min(ai_lo, r->ops_per_byte);
    ai_hi = std::max(ai_hi, r->ops_per_byte);
    g_lo = std::min(g_lo, r->ours.tflops * 1e3);
    g_hi = std::max(g_hi, r->ours.tflops * 1e3);
  }
  std::vector<std::pair<std::string, double>> peaks;  // label, GOP/s
  const Roofline& rf = run.roofline;
  if (run.have_roofline && rf.dram_gbps > 0) {
    for (const auto& [label, v] : {std::pair<std::string, double>{"bf16", rf.bf16_gflops},
                                   {"fp32", rf.bf16_gflops > 0 ? 0 : rf.fp32_gflops},
                                   {"int8", rf.int8_gops},
                                   {"fp8", rf.fp8_gflops}}) {
      if (v > 0) {
        peaks.emplace_back(label, v);
        g_hi = std::max(g_hi, v);
      }
    }
  }
  const double x0 = std::floor(std::log10(std::max(ai_lo, 1e-3))) , x1 = std::max(x0 + 1, std::ceil(std::log10(std::max(ai_hi, 1e-3) * 1.01)) + (peaks.empty() ? 0 : 1));
  const double y0 = std::floor(std::log10(std::max(g_lo, 1e-3))), y1 = std::max(y0 + 1, std::ceil(std::log10(std::max(g_hi, 1e-3) * 1.01)));
  auto px = [&](double ai) { return kLeft + (kRight - kLeft) * (std::log10(ai) - x0) / (x1 - x0); };
  auto py = [&](double g) {
    const double v = std::clamp(std::log10(std::max(g, 1e-9)), y0, y1);
    return kBottom - (kBottom - kTop) * (v - y0) / (y1 - y0);
  };
  std::ostringstream o;
  o << svg_open("roofline", title);
  for (double e = x0; e <= x1 + 1e-9; e += 1) {
    o << "<line x1='" << px(std::pow(10, e)) << "' y1='" << kTop << "' x2='" << px(std::pow(10, e)) << "' y2='"
      << kBottom << "' stroke='#e4e4e4'/><text x='" << px(std::pow(10, e)) << "' y='" << kBottom + 16
      << "' text-anchor='middle'>" << fmt("%g", std::pow(10, e)) << "</text>\n";
  }
  for (double e = y0; e <= y1 + 1e-9; e += 1) {
    o << "<line x1='" << kLeft << "' y1='" << py(std::pow(10, e)) << "' x2='" << kRight << "' y2='"
      << py(std::pow(10, e)) << "' stroke='#e4e4e4'/><text x='" << kLeft - 6 << "' y='" << py(std::pow(10, e)) + 4
      << "' text-anchor='end'>" << fmt("%g", std::pow(10, e)) << "</text>\n";
  }
  o << axes("arithmetic intensity (OP per DRAM byte, log scale)", "GOP/s (log scale)");
  double last_label_y = -100;
  for (const auto& [label, peak] : peaks) {
    const double ridge = peak / rf.dram_gbps;
    // Peaks close together (FP8 and INT8 on a GPU) get their labels stacked, not drawn over each other.
    double label_y = py(peak) - 4;
    if (std::abs(label_y - last_label_y) < 13) label_y = last_label_y + 13;
    last_label_y = label_y;
    const double a = std::pow(10, x0), b = std::pow(10, x1);
    o << "<polyline class='roof' fill='none' stroke='#777' stroke-width='1.5' points='" << px(a) << ","
      << py(rf.dram_gbps * a) << " " << px(std::clamp(ridge, a, b)) << "," << py(std::min(peak, rf.dram_gbps * b))
      << " " << px(b) << "," << py(std::min(peak, rf.dram_gbps * b)) << "'/><text x='" << kRight - 4 << "' y='"
      << label_y << "' text-anchor='end' fill='#555'>" << label << " " << fmt("%.0f", peak) << " GOP/s</text>\n";
  }
  if (!peaks.empty()) {
    o << "<text x='" << kLeft + 6 << "' y='" << kTop + 14 << "' fill='#555'>DRAM " << fmt("%.1f", rf.dram_gbps)
      << " GB/s</text>\n";
  }
  const std::vector<std::string> schemes = schemes_of(rows);
  // Every point carries its (scheme, M) in a tooltip; the visible "M=" label is drawn where it does not
  // overlap one already drawn (many schemes put their points close together).
  std::vector<std::pair<double, double>> placed;
  for (const BenchRow* r : rows) {
    const char* c = scheme_colour(scheme_index(run, r->scheme));
    const double x = px(r->ops_per_byte), y = py(r->ours.tflops * 1e3);
    o << "<g class='point' data-scheme='" << esc(r->scheme) << "'><circle cx='" << x << "' cy='" << y << "' r='4' fill='"
      << c << "'><title>" << esc(r->scheme) << " " << esc(r->shape) << " M=" << r->ours.m << ": "
      << fmt("%.1f", r->ours.tflops * 1e3) << " GOP/s</title></circle>";
    const std::string label = "M=" + std::to_string(r->ours.m);
    const double lx = x + 6, ly = y - 5, lw = 7.0 * static_cast<double>(label.size());
    bool free = lx + lw < kRight + 40;
    for (const auto& [px0, py0] : placed) {
      if (std::abs(ly - py0) < 12 && lx < px0 + lw && px0 < lx + lw) free = false;
    }
    if (free) {
      placed.emplace_back(lx, ly);
      o << "<text x='" << lx << "' y='" << ly << "' fill='" << c << "' font-size='11'>" << label << "</text>";
    }
    o << "</g>\n";
  }
  o << legend(run, schemes) << "</svg>\n";
  return o.str();
}

std::string table_html(const BenchRun& run, const std::vector<const BenchRow*>& rows) {
  std::ostringstream o;
  o << "<table><tr><th>scheme</th><th>M</th><th>kernel</th><th>median ms</th><th>min ms</th>";
  if (run.backend == "cuda") o << "<th>host µs/call</th>";
  o << "<th>TFLOP/s</th><th>weight GB/s</th><th>roofline</th>";
  for (const std::string& a : run.anchors) o << "<th>" << esc(a) << " anchor</th><th>" << esc(a) << " ms</th><th>speed-up</th>";
  o << "</tr>\n";
  for (const BenchRow* r : rows) {
    o << "<tr><td>" << esc(r->scheme) << "</td><td>" << r->ours.m << "</td><td>" << esc(r->kernel) << "</td><td>"
      << fmt("%.4f", r->ours.median_ms) << "</td><td>" << fmt("%.4f", r->ours.min_ms) << "</td>";
    if (run.backend == "cuda") o << "<td>" << (r->ours.host_us >= 0 ? fmt("%.1f", r->ours.host_us) : "") << "</td>";
    o << "<td>" << fmt("%.3f", r->ours.tflops) << "</td><td>" << fmt("%.1f", r->ours.weight_gbps) << "</td><td>"
      << (r->roofline_fraction >= 0 ? fmt("%.0f%%", 100 * r->roofline_fraction) : "") << "</td>";
    for (const std::string& kind : run.anchors) {
      auto it = r->compare.find(kind);
      if (it == r->compare.end() || !it->second.error.empty()) {
        o << "<td colspan='3' class='err'>" << (it == r->compare.end() ? "" : esc(it->second.error)) << "</td>";
      } else {
        o << "<td>" << esc(it->second.name) << "</td><td>" << fmt("%.4f", it->second.median_ms) << "</td><td>"
          << fmt("%.2fx", r->ratio(kind)) << "</td>";
      }
    }
    o << "</tr>\n";
  }
  o << "</table>\n";
  for (const SkippedRow& k : run.skipped) {
    if (!rows.empty() && k.shape == rows.front()->shape) {
      o << "<p class='skipped'>" << esc(k.scheme) << " M=" << k.m << " not measured: " << esc(k.reason) << "</p>\n";
    }
  }
  return o.str();
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return Status::error("cannot open " + path + " for writing");
  out << text;
  out.close();
  if (!out) return Status::error("writing " + path + " failed");
  return Status::ok();
}

}  // namespace

const char* scheme_colour(size_t index) { return kPalette[index % (sizeof kPalette / sizeof kPalette[0])]; }

Status write_report_html(const std::string& path, const BenchRun& run) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>qlinear bench</title>\n<style>"
       "body{font-family:sans-serif;margin:16px;color:#111}table{border-collapse:collapse;margin:8px 0 28px}"
       "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px;text-align:right}td:first-child,th{text-align:left}"
       "td.err{color:#a00;text-align:left}table.machine td{text-align:left}pre{background:#f4f4f4;padding:6px}.charts{display:flex;flex-wrap:wrap;gap:12px}"
       "</style></head><body>\n<h1>qlinear bench</h1>\n<table class='machine'>";
  for (const auto& [key, value] : run.machine) o << "<tr><th>" << esc(key) << "</th><td>" << esc(value) << "</td></tr>";
  if (run.have_roofline) o << "<tr><th>roofline</th><td>" << esc(run.roofline.describe()) << "</td></tr>";
  o << "<tr><th>load</th><td>" << run.load << " busy processes</td></tr></table>\n"
    << "<p>Regenerate this page with:</p><pre>" << esc(run.command) << "</pre>\n"
    << "<p>Speed-up: the anchor's median time over qlinear's, both measured in this run (&gt; 1: qlinear is "
       "faster). Times: medians of the repetitions, weights cold (rotated copies; on CUDA the L2 flushed before "
       "each repetition).</p>\n";
  std::vector<std::string> shapes;
  for (const BenchRow& r : run.rows) {
    if (std::find(shapes.begin(), shapes.end(), r.shape) == shapes.end()) shapes.push_back(r.shape);
  }
  for (const std::string& shape : shapes) {
    std::vector<const BenchRow*> rows;
    for (const BenchRow& r : run.rows) {
      if (r.shape == shape) rows.push_back(&r);
    }
    o << "<h2>" << esc(shape) << " (N=" << rows.front()->n << ", K=" << rows.front()->k << ")</h2>\n<div class='charts'>\n";
    for (const std::string& anchor : run.anchors) o << speedup_svg(run, rows, shape, anchor);
    o << roofline_svg(run, rows, shape + ": roofline") << "</div>\n" << table_html(run, rows);
  }
  o << "</body></html>\n";
  return write_file(path, o.str());
}

Status write_plot_svg(const std::string& path, const BenchRun& run) {
  std::vector<const BenchRow*> rows;
  for (const BenchRow& r : run.rows) rows.push_back(&r);
  std::string title = "qlinear bench roofline (" + run.backend + "):";
  std::set<std::string> shapes;
  for (const BenchRow& r : run.rows) shapes.insert(r.shape);
  for (const std::string& s : shapes) title += " " + s;
  return write_file(path, roofline_svg(run, rows, title));
}

}  // namespace qlinear::cli
