// qlinear bench: medians of a kernel over repetitions with cold weights, TFLOP/s, weight GB/s, the fraction
// of this machine's roofline, and the ratio to an anchor measured in the same run.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/layer_runner.hpp"
#include "cli/onednn_anchor.hpp"
#include "cli/platform_option.hpp"
#include "cli/roofline.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--scheme", "S", "scheme to benchmark (qlinear kernels --list-schemes)"},
    {"--backend", "B", "cpu (default), cuda, reference, or a kernel name to force"},
    {"--m", "LIST", "token counts (default 1,16,128)"},
    {"--n", "N", "output features (default 4096)"},
    {"--k", "K", "input features (default 4096)"},
    {"--shapes", "SET", "llama3-8b or llama3-70b: the model's qkv, o, gate_up and down shapes"},
    {"--compare", "A", "reference, onednn (CPU) or cublaslt (CUDA): measured in the same run"},
    {"--reps", "N", "timed repetitions (default 20)"},
    {"--check", "", "also compare each output with the reference kernel"},
    {"--roofline", "", "measure and print this machine's roofline (with no --scheme: only that)"},
    {"--plot", "FILE", "draw the results against the roofline as SVG"},
    {"--json", "", "machine-readable output"},
    {"--help", "", "this help"},
};

struct Shape3 {
  std::string name;
  int64_t n, k;
};

std::vector<Shape3> shape_set(const std::string& set) {
  if (set == "llama3-8b") {
    return {{"8b.qkv", 6144, 4096}, {"8b.o", 4096, 4096}, {"8b.gate_up", 28672, 4096}, {"8b.down", 4096, 14336}};
  }
  if (set == "llama3-70b") {
    return {{"70b.qkv", 10240, 8192}, {"70b.o", 8192, 8192}, {"70b.gate_up", 57344, 8192}, {"70b.down", 8192, 28672}};
  }
  return {};
}

struct Record {
  std::string shape, kernel;
  Measurement ours;
  double ops_per_byte = 0, roofline_fraction = -1;
  std::string compare_name, compare_impl, compare_error;
  double compare_ms = -1;
};

void write_svg(const std::string& path, const Roofline& r, bool int8_family, const std::vector<Record>& records) {
  // Log-log axes: arithmetic intensity 0.1 .. 1000 OP/byte, rate 1 .. 10^4 GOP/s.
  const double peak = int8_family ? r.int8_gops : (r.bf16_gflops > 0 ? r.bf16_gflops : r.fp32_gflops);
  auto px = [](double ai) { return 60 + 500 * (std::log10(ai) + 1) / 4; };
  auto py = [](double g) { return 360 - 320 * std::log10(std::max(g, 1.0)) / 4; };
  std::ofstream out(path);
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='600' height='400' font-family='sans-serif' font-size='11'>\n"
      << "<rect width='600' height='400' fill='white'/>\n"
      << "<line x1='60' y1='360' x2='560' y2='360' stroke='black'/><line x1='60' y1='40' x2='60' y2='360' stroke='black'/>\n"
      << "<text x='250' y='390'>arithmetic intensity (OP/byte)</text>\n"
      << "<text x='5' y='30'>GOP/s</text>\n";
  for (int e = -1; e <= 3; ++e) out << "<text x='" << px(std::pow(10, e)) - 8 << "' y='375'>1e" << e << "</text>\n";
  for (int e = 0; e <= 4; ++e) out << "<text x='25' y='" << py(std::pow(10, e)) + 4 << "'>1e" << e << "</text>\n";
  // Roofline: bandwidth slope up to the ridge, then the peak.
  const double ridge = peak / r.dram_gbps;
  out << "<polyline fill='none' stroke='steelblue' stroke-width='2' points='" << px(0.1) << "," << py(r.dram_gbps * 0.1)
      << " " << px(ridge) << "," << py(peak) << " " << px(1000) << "," << py(peak) << "'/>\n";
  for (const Record& rec : records) {
    const double gops = rec.ours.tflops * 1e3;
    out << "<circle cx='" << px(rec.ops_per_byte) << "' cy='" << py(gops) << "' r='4' fill='crimson'/>"
        << "<text x='" << px(rec.ops_per_byte) + 6 << "' y='" << py(gops) - 4 << "'>" << rec.shape << " M=" << rec.ours.m
        << "</text>\n";
  }
  out << "</svg>\n";
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 0);
  if (!args) {
    std::fprintf(stderr, "qlinear bench: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear bench --scheme S [--backend B] [--m LIST] [--n N --k K | --shapes SET]\n"
                "                     [--compare reference|onednn|cublaslt] [--json] [--roofline] [--plot FILE.svg]\n\n%s",
                options_help(kSpecs).c_str());
    return 0;
  }
  const bool json = args->flag("--json");
  const std::string backend = args->get_or("--backend", "cpu");
  auto platform = parse_platform(backend == "cuda" ? "cuda" : "cpu");
  if (!platform) {
    std::fprintf(stderr, "qlinear bench: --backend %s: %s\n", backend.c_str(), platform.message().c_str());
    return 2;
  }
  Roofline roof;
  const bool want_roofline = args->flag("--roofline") || args->get("--plot").has_value();
  if (want_roofline && platform->kind == PlatformKind::kX86Cpu) roof = measure_roofline(*platform);
  const auto scheme_name = args->get("--scheme");
  if (!scheme_name) {
    if (!args->flag("--roofline")) {
      std::fprintf(stderr, "qlinear bench: --scheme is required (one of: %s)\n", scheme_names().c_str());
      return 2;
    }
    if (json) {
      std::printf("%s\n", nlohmann::json({{"dram_gbps", roof.dram_gbps}, {"fp32_gflops", roof.fp32_gflops},
                                          {"bf16_gflops", roof.bf16_gflops}, {"int8_gops", roof.int8_gops}})
                              .dump(2)
                              .c_str());
    } else {
      std::printf("%s: %s\n", platform->describe().c_str(), roof.describe().c_str());
    }
    return 0;
  }
  const Scheme* scheme = find_scheme(*scheme_name);
  if (scheme == nullptr) {
    std::fprintf(stderr, "qlinear bench: unknown scheme '%s' for --scheme; schemes: %s\n", scheme_name->c_str(),
                 scheme_names().c_str());
    return 2;
  }
  auto ms = args->get_int_list("--m", {1, 16, 128}, 1, kMaxDimension);
  auto n = args->get_int("--n", 4096, 1, kMaxDimension);
  auto k = args->get_int("--k", 4096, 1, kMaxDimension);
  auto reps = args->get_int("--reps", 20, 1, kMaxReps);
  for (const Status& s : {ms.status(), n.status(), k.status(), reps.status()}) {
    if (!s) {
      std::fprintf(stderr, "qlinear bench: %s\n", s.message().c_str());
      return 2;
    }
  }
  std::vector<Shape3> shapes = {{"custom", *n, *k}};
  if (auto set = args->get("--shapes")) {
    shapes = shape_set(*set);
    if (shapes.empty()) {
      std::fprintf(stderr, "qlinear bench: --shapes %s: expected llama3-8b or llama3-70b\n", set->c_str());
      return 2;
    }
  }
  const std::string compare = args->get_or("--compare", "");
  if (!compare.empty() && compare != "reference" && compare != "onednn" && compare != "cublaslt") {
    std::fprintf(stderr, "qlinear bench: --compare %s: expected reference, onednn or cublaslt\n", compare.c_str());
    return 2;
  }
  SelectOptions select;
  if (backend == "reference") {
    select.force = "reference_" + std::string(family_name(scheme->family));
  } else if (backend != "cpu" && backend != "cuda") {
    if (find_kernel(backend) == nullptr) {
      std::fprintf(stderr, "qlinear bench: --backend %s: not cpu, cuda, reference or a kernel name (qlinear kernels)\n",
                   backend.c_str());
      return 2;
    }
    select.force = backend;
    if (std::string(backend).rfind("cublaslt", 0) == 0 || std::string(backend).rfind("sm90", 0) == 0 ||
        std::string(backend).rfind("cuda", 0) == 0) {
      platform = parse_platform("cuda");
    }
  }
  const bool int8_family = scheme->family == Family::kInt8ScaledMM;
  std::vector<Record> records;
  int failures = 0;
  if (!json) {
    std::printf("qlinear bench %s on %s%s\n", std::string(scheme->name).c_str(), platform->describe().c_str(),
                want_roofline ? ("\nroofline: " + roof.describe()).c_str() : "");
    std::printf("%-12s %6s %6s %6s %-28s %10s %9s %9s %8s %-14s %10s %7s\n", "shape", "M", "N", "K", "kernel",
                "median ms", "TFLOP/s", "GB/s", "roofline", "compare", "median ms", "ratio");
  }
  for (const Shape3& sh : shapes) {
    auto layer = quantize_layer("bench." + sh.name, *scheme, random_normal(DType::kF32, {sh.n, sh.k}, 7, 0.02));
    if (!layer) {
      std::fprintf(stderr, "qlinear bench: %s\n", layer.message().c_str());
      return 1;
    }
    int64_t bytes = 0;
    for (const auto& [name, t] : layer->params) bytes += t.nbytes();
    auto runner = LayerRunner::create(*layer, Tensor(), *platform, select, cold_copies_for(bytes));
    if (!runner) {
      std::fprintf(stderr, "qlinear bench: %s\n", runner.message().c_str());
      return 1;
    }
    std::unique_ptr<LayerRunner> anchor_runner;
    if (compare == "reference" || compare == "cublaslt") {
      SelectOptions anchor_select;
      // cuBLASLt is the vendor anchor of the FP8 families (its MX scale modes are Blackwell-only).
      anchor_select.force = compare == "reference"                        ? "reference_" + std::string(family_name(scheme->family))
                            : scheme->family == Family::kFp8BlockScaled ? "cublaslt_fp8_block_scaled"
                                                                         : "cublaslt_fp8_scaled_mm";
      auto ar = LayerRunner::create(*layer, Tensor(), *platform, anchor_select, compare == "reference" ? 1 : cold_copies_for(bytes));
      if (!ar) {
        std::fprintf(stderr, "qlinear bench: --compare %s: %s\n", compare.c_str(), ar.message().c_str());
        return 1;
      }
      anchor_runner = std::move(*ar);
    }
    for (int64_t m : *ms) {
      auto r = (*runner)->measure(m, static_cast<int>(*reps), args->flag("--check"), 11);
      if (!r) {
        std::fprintf(stderr, "qlinear bench: %s M=%lld: %s\n", sh.name.c_str(), static_cast<long long>(m),
                     r.message().c_str());
        ++failures;
        continue;
      }
      Record rec{sh.name, std::string((*runner)->kernel().name()), *r};
      const double io_bytes = bytes + 2.0 * m * sh.k + 2.0 * m * sh.n;
      rec.ops_per_byte = 2.0 * m * sh.n * sh.k / io_bytes;
      if (want_roofline && roof.dram_gbps > 0) {
        rec.roofline_fraction = r->tflops * 1e3 / attainable_gops(roof, int8_family, true, rec.ops_per_byte);
      }
      if (compare == "onednn") {
        auto a = time_onednn_matmul(int8_family, m, sh.n, sh.k, static_cast<int>(*reps));
        rec.compare_name = int8_family ? "onednn_s8s8" : "onednn_bf16";
        if (a) {
          rec.compare_name = a->name;
          rec.compare_ms = a->median_ms;
          rec.compare_impl = a->impl;
        } else {
          rec.compare_error = a.message();
        }
      } else if (anchor_runner) {
        rec.compare_name = std::string(anchor_runner->kernel().name());
        auto a = anchor_runner->measure(m, compare == "reference" ? 1 : static_cast<int>(*reps), false, 11);
        if (a) {
          rec.compare_ms = a->median_ms;
        } else {
          rec.compare_error = a.message();
        }
      }
      records.push_back(rec);
      if (!json) {
        char cmp[64] = "", ratio[32] = "";
        if (rec.compare_ms > 0) {
          std::snprintf(cmp, sizeof cmp, "%10.4f", rec.compare_ms);
          std::snprintf(ratio, sizeof ratio, "%6.2fx", rec.compare_ms / r->median_ms);
        }
        char frac[16] = "-";
        if (rec.roofline_fraction >= 0) std::snprintf(frac, sizeof frac, "%7.0f%%", 100 * rec.roofline_fraction);
        std::printf("%-12s %6lld %6lld %6lld %-28s %10.4f %9.3f %9.1f %8s %-14s %10s %7s\n", sh.name.c_str(),
                    static_cast<long long>(m), static_cast<long long>(sh.n), static_cast<long long>(sh.k),
                    rec.kernel.c_str(), r->median_ms, r->tflops, r->weight_gbps, frac, rec.compare_name.c_str(), cmp,
                    ratio);
        if (!rec.compare_error.empty()) std::printf("  compare failed: %s\n", rec.compare_error.c_str());
        std::fflush(stdout);
      }
    }
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Record& r : records) {
      nlohmann::json j = {{"scheme", scheme->name}, {"kernel", r.kernel}, {"shape", r.shape}, {"m", r.ours.m},
                          {"n", 0}, {"k", 0}, {"median_ms", r.ours.median_ms}, {"tflops", r.ours.tflops},
                          {"weight_gbps", r.ours.weight_gbps}};
      for (const Shape3& sh : shapes) {
        if (sh.name == r.shape) {
          j["n"] = sh.n;
          j["k"] = sh.k;
        }
      }
      if (r.roofline_fraction >= 0) j["roofline_fraction"] = r.roofline_fraction;
      if (r.ours.rel_err >= 0) j["rel_err_reference"] = r.ours.rel_err;
      if (!r.compare_name.empty()) {
        j["compare"] = {{"name", r.compare_name},
                        {"median_ms", r.compare_ms > 0 ? nlohmann::json(r.compare_ms) : nlohmann::json(nullptr)},
                        {"ratio", r.compare_ms > 0 ? nlohmann::json(r.compare_ms / r.ours.median_ms) : nlohmann::json(nullptr)},
                        {"impl", r.compare_impl}};
        if (!r.compare_error.empty()) j["compare"]["error"] = r.compare_error;
      }
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
  }
  if (auto plot = args->get("--plot")) write_svg(*plot, roof, int8_family, records);
  return failures == 0 ? 0 : 1;
}

}  // namespace qlinear::cli
