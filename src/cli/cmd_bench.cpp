// qlinear bench: one or more schemes on one or more shapes and token counts, timed with the device's method
// (src/bench/timing.hpp), TFLOP/s, weight GB/s, the fraction of this machine's roofline, and the ratio to
// each anchor of --compare measured in the same run. --json, --report (HTML) and --plot (SVG) give the same
// rows in other forms.
#include <omp.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/shapes.hpp"
#include "bench/timing.hpp"
#include "cli/args.hpp"
#include "cli/bench_anchor.hpp"
#include "cli/bench_layer.hpp"
#include "cli/bench_load.hpp"
#include "cli/bench_record.hpp"
#include "cli/bench_report.hpp"
#include "cli/commands.hpp"
#include "cli/onednn_anchor.hpp"
#include "cli/platform_option.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--scheme", "LIST", "schemes to benchmark, comma-separated (qlinear kernels --list-schemes)"},
    {"--backend", "B", "cpu (default), cuda, reference, or a kernel name to force"},
    {"--m", "LIST", "token counts (default 1,16,128)"},
    {"--n", "N", "output features (default 4096)"},
    {"--k", "K", "input features (default 4096)"},
    {"--shapes", "SETS",
     "models' qkv, o, gate_up and down shapes, comma-separated: llama3-8b, llama3-70b, qwen2.5-7b"},
    {"--compare", "LIST", "anchors measured in the same run: bf16, vendor, reference, read (CUDA: the read floor of the layer's bytes; comma-separated)"},
    {"--reps", "N", "timed repetitions (default 20; at least 20 on CUDA)"},
    {"--sustain-ms", "T", "CUDA: warm up back to back for T ms, then time for at least T ms (the clock under "
                          "continuous load; as QLINEAR_BENCH_SUSTAIN_MS)"},
    {"--graph", "", "CUDA: time each call replayed from a CUDA graph (ours and the anchors; as QLINEAR_BENCH_GRAPH=1): "
                    "what a caller that captures its decode step pays, without launch latency"},
    {"--check", "", "also compare each output with the reference kernel"},
    {"--roofline", "", "measure and print this machine's roofline (with no --scheme: only that)"},
    {"--load", "N", "run N busy processes for the duration (a machine that is not idle)"},
    {"--plot", "FILE", "draw the results against the roofline as SVG"},
    {"--report", "FILE", "write an HTML page: speed-up over the anchor against M, rooflines, tables"},
    {"--json", "", "machine-readable output"},
    {"--help", "", "this help"},
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

std::string command_line(int argc, char** argv) {
  std::string out = "qlinear";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool quote = a.find_first_of(" \t'\"$") != std::string::npos;
    out += " " + (quote ? "'" + a + "'" : a);
  }
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

double cpu_mhz() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (in >> khz) return khz / 1000;
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("cpu MHz", 0) == 0) return std::stod(line.substr(line.find(':') + 2));
  }
  return 0;
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::vector<std::pair<std::string, std::string>> describe_machine(const Platform& platform) {
  std::vector<std::pair<std::string, std::string>> m;
  char cpu[512];
  std::snprintf(cpu, sizeof cpu, "%s, %.0f MHz, %d threads, last-level cache %lld MiB (%s)", cpu_model().c_str(),
                cpu_mhz(), omp_get_max_threads(), static_cast<long long>(bench::last_level_cache_bytes() >> 20),
                Platform::host_cpu().cpu.to_string().c_str());
  m.emplace_back("cpu", cpu);
  if (platform.kind == PlatformKind::kCuda) {
    auto timer = bench::DeviceTimer::create(platform.cuda ? platform.cuda->index : 0);
    m.emplace_back("gpu", timer ? (*timer)->describe() : platform.describe());
    if (timer) {
      m.emplace_back("method", (*timer)->method());
      // What the events read around a call that enqueues nothing: the floor under every figure of the run
      // (tools/bench_crosscheck.py subtracts each timer's own floor before comparing).
      auto floor = (*timer)->time([](int) { return Status::ok(); }, bench::kMinDeviceReps);
      if (floor) m.emplace_back("timer floor us", fmt_double(1000.0 * floor->median_ms));
    }
  } else {
    m.emplace_back("method", bench::host_method());
  }
  std::ifstream loadavg("/proc/loadavg");
  double load1 = -1;
  if (loadavg >> load1) {
    m.emplace_back("load average", fmt_double(load1) + " (1 min, before the run) on " +
                                       std::to_string(std::thread::hardware_concurrency()) + " CPUs");
  }
  std::string versions = "qlinear " QLINEAR_VERSION_STRING ", compiler " __VERSION__;
  if (onednn_available()) versions += ", oneDNN " + onednn_version();
  m.emplace_back("versions", versions);
  return m;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "qlinear bench: %s\n", message.c_str());
  return 2;
}

const auto g_start = std::chrono::steady_clock::now();

double elapsed_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count(); }

void print_row(FILE* out, const BenchRun& run, const BenchRow& r) {
  char frac[16] = "-";
  if (r.roofline_fraction >= 0) std::snprintf(frac, sizeof frac, "%.0f%%", 100 * r.roofline_fraction);
  char host[24] = "";
  if (r.ours.host_us >= 0) std::snprintf(host, sizeof host, " host %.1f us", r.ours.host_us);
  std::fprintf(out, "%-18s %-14s %6lld %6lld %6lld %-30s %10.4f %10.4f %9.3f %9.1f %8s%s", r.scheme.c_str(),
              r.shape.c_str(), static_cast<long long>(r.ours.m), static_cast<long long>(r.n),
              static_cast<long long>(r.k), r.kernel.c_str(), r.ours.median_ms, r.ours.min_ms, r.ours.tflops,
              r.ours.weight_gbps, frac, host);
  for (const std::string& kind : run.anchors) {
    auto it = r.compare.find(kind);
    if (it == r.compare.end()) continue;
    if (it->second.error.empty()) {
      std::fprintf(out, "  | %s %s %.4f ms %.2fx", kind.c_str(), it->second.name.c_str(), it->second.median_ms, r.ratio(kind));
    } else {
      std::fprintf(out, "  | %s: none", kind.c_str());
    }
  }
  std::fprintf(out, "  at %.1f s\n", elapsed_s());
  if (!r.ours.note.empty()) std::fprintf(out, "    timed %s\n", r.ours.note.c_str());
  for (const auto& [kind, a] : r.compare) {
    if (!a.error.empty()) std::fprintf(out, "    %s anchor could not run: %s\n", kind.c_str(), a.error.c_str());
  }
  std::fflush(out);
}

// The anchor `kind` of one row: measured once per (anchor, M) within a shape and shared by the schemes
// whose anchor it is; an anchor that cannot run gives the row its error.
AnchorRow measure_anchor(const std::string& kind, const Scheme& scheme, const LinearLayer& layer,
                         const Platform& platform, int64_t m, int reps,
                         std::map<std::string, std::unique_ptr<BenchAnchor>>& made,
                         std::map<std::pair<std::string, int64_t>, AnchorRow>& measured) {
  AnchorRow a;
  auto key = BenchAnchor::key_for(kind, scheme, layer, platform);
  if (!key) {
    a.name = kind;
    a.error = key.message();
    return a;
  }
  if (auto hit = measured.find({*key, m}); hit != measured.end()) return hit->second;
  // An anchor whose call at a smaller M took half a measurement's budget is not run at larger M.
  for (const auto& [km, row] : measured) {
    if (km.first == *key && km.second < m && row.median_ms * 1e-3 > bench::kBudgetSeconds / 2) {
      a.name = row.name;
      a.error = "skipped: one call took " + std::to_string(row.median_ms * 1e-3) + " s at M=" +
                std::to_string(km.second) + " (time budget)";
      return measured[{*key, m}] = a;
    }
  }
  auto it = made.find(*key);
  if (it == made.end()) {
    auto created = BenchAnchor::create(kind, scheme, layer, platform);
    if (!created) {
      a.name = kind;
      a.error = created.message();
      return measured[{*key, m}] = a;
    }
    it = made.emplace(*key, std::move(*created)).first;
  }
  a.name = it->second->name();
  auto t = it->second->measure(m, reps);
  if (t) {
    a.name = t->name;
    a.impl = t->impl;
    a.median_ms = t->timing.median_ms;
    a.min_ms = t->timing.min_ms;
    a.note = t->timing.note;
  } else {
    a.error = t.message();
  }
  return measured[{*key, m}] = a;
}

volatile std::sig_atomic_t g_stop = 0;
void on_stop_signal(int sig) { g_stop = sig; }

}  // namespace

int cmd_bench(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 0);
  if (!args) return usage_error(args.message());
  if (args->flag("--help")) {
    std::printf("Usage: qlinear bench --scheme A[,B...] [--backend B] [--m LIST] [--n N --k K | --shapes SETS]\n"
                "                     [--compare bf16,vendor,reference] [--load N] [--sustain-ms T] [--graph] [--json]\n"
                "                     [--roofline] [--plot FILE.svg] [--report FILE.html]\n\n%s",
                options_help(kSpecs).c_str());
    return 0;
  }
  BenchRun run;
  run.command = command_line(argc, argv);
  const bool json = args->flag("--json");
  run.backend = args->get_or("--backend", "cpu");
  auto platform = parse_platform(run.backend == "cuda" ? "cuda" : "cpu");
  if (!platform) return usage_error("--backend " + run.backend + ": " + platform.message());

  auto ms = args->get_int_list("--m", {1, 16, 128}, 1, kMaxDimension);
  auto n = args->get_int("--n", 4096, 1, kMaxDimension);
  auto k = args->get_int("--k", 4096, 1, kMaxDimension);
  auto reps = args->get_int("--reps", 20, 1, kMaxReps);
  auto load = args->get_int("--load", 0, 0, 1024);
  auto sustain = args->get_int("--sustain-ms", 0, 0, static_cast<int64_t>(bench::kMaxSustainMs));
  for (const Status& s : {ms.status(), n.status(), k.status(), reps.status(), load.status(), sustain.status()}) {
    if (!s) return usage_error(s.message());
  }
  // Every device timer of this run (ours and the anchors') reads it, so they all measure the same way.
  if (args->get("--sustain-ms")) setenv("QLINEAR_BENCH_SUSTAIN_MS", std::to_string(*sustain).c_str(), 1);
  std::vector<const Scheme*> schemes;
  if (auto list = args->get("--scheme")) {
    for (const std::string& name : split_commas(*list)) {
      const Scheme* s = find_scheme(name);
      if (s == nullptr) {
        return usage_error("unknown scheme '" + name + "' for --scheme; schemes: " + scheme_names());
      }
      schemes.push_back(s);
      run.schemes.emplace_back(s->name);
    }
  } else if (!args->flag("--roofline")) {
    return usage_error("--scheme is required (one of: " + scheme_names() + ")");
  }
  std::vector<bench::LayerShape> shapes = {{"custom", *n, *k}};
  if (auto sets = args->get("--shapes")) {
    shapes.clear();
    for (const std::string& set : split_commas(*sets)) {
      const bench::ShapeSet* found = bench::find_shape_set(set);
      if (found == nullptr) {
        return usage_error("--shapes " + set + ": expected " + bench::shape_set_names() +
                           " (one or a comma-separated list)");
      }
      shapes.insert(shapes.end(), found->layers.begin(), found->layers.end());
    }
  }
  if (auto list = args->get("--compare")) {
    auto anchors = BenchAnchor::parse_list(*list);
    if (!anchors) return usage_error(anchors.message());
    run.anchors = *anchors;
  }
  SelectOptions select;
  if (run.backend != "cpu" && run.backend != "cuda" && run.backend != "reference") {
    if (find_kernel(run.backend) == nullptr) {
      return usage_error("--backend " + run.backend + ": not cpu, cuda, reference or a kernel name (qlinear kernels)");
    }
    select.force = run.backend;
    if (run.backend.rfind("cublaslt", 0) == 0 || run.backend.rfind("sm90", 0) == 0 || run.backend.rfind("cuda", 0) == 0) {
      platform = parse_platform("cuda");
      if (!platform) return usage_error("--backend " + run.backend + ": " + platform.message());
    }
  }

  if (args->flag("--graph")) {
    if (platform->kind != PlatformKind::kCuda) {
      return usage_error("--graph: CUDA graphs time CUDA calls; this run is on the " + run.backend + " backend (use --backend cuda)");
    }
    setenv("QLINEAR_BENCH_GRAPH", "1", 1);
  }

  // SIGTERM / SIGINT (timeout, Ctrl-C): finish the current row, then print what was measured.
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  run.machine = describe_machine(*platform);  // the load average before --load adds to it
  BusyLoad busy;  // before any thread pool exists (fork)
  if (*load > 0) {
    if (Status s = busy.start(static_cast<int>(*load)); !s) {
      std::fprintf(stderr, "qlinear bench: %s\n", s.message().c_str());
      return 1;
    }
  }
  run.load = static_cast<int>(*load);
  const bool want_roofline = args->flag("--roofline") || args->get("--plot") || args->get("--report");
  if (want_roofline) {
    if (platform->kind == PlatformKind::kCuda) {
      auto r = measure_cuda_roofline(*platform);
      if (r) {
        run.roofline = *r;
        run.have_roofline = true;
      } else {
        std::fprintf(stderr, "qlinear bench: roofline: %s\n", r.message().c_str());
      }
    } else {
      run.roofline = measure_cpu_roofline(*platform);
      run.have_roofline = true;
    }
  }
  if (schemes.empty()) {  // --roofline alone
    if (json) {
      std::printf("%s\n", run.to_json().dump(2).c_str());
    } else {
      std::printf("%s: %s\n", platform->describe().c_str(), run.roofline.describe().c_str());
    }
    return 0;
  }
  // Rows as they are measured: on stdout, or on stderr when stdout carries the JSON (a log of a run that is
  // stopped still shows what it reached).
  FILE* progress = json ? stderr : stdout;
  std::fprintf(progress, "qlinear bench on %s%s%s\n", platform->describe().c_str(),
               run.have_roofline ? ("\nroofline: " + run.roofline.describe()).c_str() : "",
               run.load > 0 ? ("\nload: " + std::to_string(run.load) + " busy processes").c_str() : "");
  std::fprintf(progress, "%-18s %-14s %6s %6s %6s %-30s %10s %10s %9s %9s %8s  anchors (time, anchor/ours)\n",
               "scheme", "shape", "M", "N", "K", "kernel", "median ms", "min ms", "TFLOP/s", "GB/s", "roofline");
  std::fflush(progress);
  int failures = 0;
  // Shapes outer, schemes inner: anchors that several schemes share (cuBLAS BF16, one cuBLASLt mode, one
  // oneDNN matmul) are made and measured once per shape and M.
  for (const bench::LayerShape& sh : shapes) {
    std::map<std::string, std::unique_ptr<BenchAnchor>> made;  // by key_for
    std::map<std::pair<std::string, int64_t>, AnchorRow> measured;
    for (const Scheme* scheme : schemes) {
      if (g_stop) break;
      SelectOptions scheme_select = select;
      if (run.backend == "reference") scheme_select.force = "reference_" + std::string(family_name(scheme->family));
      auto layer = bench_layer("bench." + sh.name, *scheme, sh.n, sh.k, 7);
      if (!layer) {
        std::fprintf(stderr, "qlinear bench: %s\n", layer.message().c_str());
        return 1;
      }
      auto runner = LayerRunner::create(*layer, Tensor(), *platform, scheme_select, LayerRunner::kCopiesForMethod);
      if (!runner) {
        std::fprintf(stderr, "qlinear bench: %s %s: %s\n", std::string(scheme->name).c_str(), sh.name.c_str(),
                     runner.message().c_str());
        ++failures;
        continue;
      }
      double slow_call_s = 0;  // > half the budget at a smaller M: larger M are skipped
      int64_t slow_m = 0;
      for (int64_t m : *ms) {
        if (g_stop) break;
        if (slow_call_s > 0 && m > slow_m) {
          char why[200];
          std::snprintf(why, sizeof why, "one call of %s took %.3g s at M=%lld (time budget of %.0f s per measurement)",
                        std::string((*runner)->kernel().name()).c_str(), slow_call_s, static_cast<long long>(slow_m),
                        bench::kBudgetSeconds);
          run.skipped.push_back({std::string(scheme->name), sh.name, m, why});
          std::fprintf(progress, "%-18s %-14s %6lld skipped: %s\n", std::string(scheme->name).c_str(), sh.name.c_str(),
                       static_cast<long long>(m), why);
          continue;
        }
        auto r = (*runner)->measure(m, static_cast<int>(*reps), args->flag("--check"), 11);
        if (!r) {
          std::fprintf(stderr, "qlinear bench: %s %s M=%lld: %s\n", std::string(scheme->name).c_str(),
                       sh.name.c_str(), static_cast<long long>(m), r.message().c_str());
          ++failures;
          continue;
        }
        if (r->median_ms * 1e-3 > bench::kBudgetSeconds / 2) {
          slow_call_s = r->median_ms * 1e-3;
          slow_m = m;
        }
        BenchRow row;
        row.scheme = std::string(scheme->name);
        row.family = std::string(family_name(scheme->family));
        row.shape = sh.name;
        row.kernel = std::string((*runner)->kernel().name());
        row.n = sh.n;
        row.k = sh.k;
        row.ours = *r;
        const double io_bytes = (*runner)->weight_bytes() + 2.0 * m * sh.k + 2.0 * m * sh.n;
        row.ops_per_byte = 2.0 * m * sh.n * sh.k / io_bytes;
        if (run.have_roofline && run.roofline.dram_gbps > 0) {
          row.roofline_fraction = r->tflops * 1e3 / attainable_gops(run.roofline, *scheme, row.ops_per_byte);
        }
        for (const std::string& kind : run.anchors) {
          row.compare[kind] = measure_anchor(kind, *scheme, *layer, *platform, m, static_cast<int>(*reps), made, measured);
        }
        run.rows.push_back(row);
        print_row(progress, run, run.rows.back());
      }
    }
  }
  if (g_stop) {
    run.interrupted = "stopped by signal " + std::to_string(static_cast<int>(g_stop)) + " after " +
                      std::to_string(run.rows.size()) + " rows";
    std::fprintf(stderr, "qlinear bench: %s\n", run.interrupted.c_str());
    ++failures;
  }
  busy.stop();
  if (json) std::printf("%s\n", run.to_json().dump(2).c_str());
  if (auto plot = args->get("--plot")) {
    if (Status s = write_plot_svg(*plot, run); !s) {
      std::fprintf(stderr, "qlinear bench: --plot %s: %s\n", plot->c_str(), s.message().c_str());
      ++failures;
    }
  }
  if (auto report = args->get("--report")) {
    if (Status s = write_report_html(*report, run); !s) {
      std::fprintf(stderr, "qlinear bench: --report %s: %s\n", report->c_str(), s.message().c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace qlinear::cli
