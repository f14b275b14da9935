// qlinear demo: a small layer in every scheme — quantize, select a kernel, process, run — and a table of
// the error against FP64 on the unquantized inputs, the agreement with the reference kernel, and the time.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--m", "M", "tokens (default 16)"},
    {"--n", "N", "output features (default 256)"},
    {"--k", "K", "input features (default 512)"},
    {"--json", "", "machine-readable output"},
    {"--help", "", "this help"},
};

// ||a - b|| / ||b|| over all elements.
double relative_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double d = element_as_double(a, i) - element_as_double(b, i);
    num += d * d;
    den += element_as_double(b, i) * element_as_double(b, i);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

Tensor exact_product(const Tensor& x, const Tensor& w) {
  const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
  Tensor y = Tensor::empty(DType::kF64, {m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < k; ++t) acc += element_as_double(x, i * k + t) * element_as_double(w, j * k + t);
      y.data<double>()[i * n + j] = acc;
    }
  }
  return y;
}

struct Row {
  std::string scheme, family, kernel, error;
  double rel_err_fp64 = 0, rel_err_reference = 0, median_ms = 0;
};

}  // namespace

int cmd_demo(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 0);
  if (!args) {
    std::fprintf(stderr, "qlinear demo: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear demo [--m M --n N --k K] [--json]\n\n%s", options_help(kSpecs).c_str());
    return 0;
  }
  auto m = args->get_int("--m", 16, 1);
  auto n = args->get_int("--n", 256, 1);
  auto k = args->get_int("--k", 512, 1);
  for (const auto* r : {&m, &n, &k}) {
    if (!*r) {
      std::fprintf(stderr, "qlinear demo: %s\n", r->message().c_str());
      return 2;
    }
  }
  const Platform platform = Platform::host_cpu();
  const Tensor weight = random_normal(DType::kF32, {*n, *k}, 1, 0.05);
  const Tensor x = random_normal(DType::kBF16, {*m, *k}, 2, 1.0);
  const Tensor exact = exact_product(x, weight);
  MakeLayerOptions options;
  options.input_min = -5.0f;
  options.input_max = 5.0f;

  std::vector<Row> rows;
  bool all_ok = true;
  for (const Scheme& scheme : all_schemes()) {
    Row row{std::string(scheme.name), std::string(family_name(scheme.family)), "-", ""};
    auto fail = [&](const std::string& msg) {
      row.error = msg;
      all_ok = false;
    };
    auto layer = quantize_layer("demo." + std::string(scheme.name), scheme, weight, options);
    if (!layer) {
      fail(layer.message());
      rows.push_back(row);
      continue;
    }
    auto kernel = select_kernel(layer->config, platform);
    if (!kernel) {
      fail(kernel.message());
      rows.push_back(row);
      continue;
    }
    row.kernel = std::string((*kernel)->name());
    LinearLayer reference_layer = *layer;  // same quantized tensors for the reference
    if (Status s = (*kernel)->process_weights_after_loading(*layer); !s) {
      fail(s.message());
      rows.push_back(row);
      continue;
    }
    const LinearKernel* reference = find_kernel("reference_" + row.family);
    Status rs = reference->process_weights_after_loading(reference_layer);
    auto want = rs ? reference->apply(reference_layer, Activation::dense(x)) : Result<Tensor>(rs);
    std::vector<double> times;
    Result<Tensor> got = Status::error("not run");
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      got = (*kernel)->apply(*layer, Activation::dense(x));
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!got || !want) {
      fail(!got ? got.message() : want.message());
      rows.push_back(row);
      continue;
    }
    std::sort(times.begin(), times.end());
    row.median_ms = times[times.size() / 2];
    row.rel_err_fp64 = relative_error(*got, exact);
    row.rel_err_reference = relative_error(*got, *want);
    rows.push_back(row);
  }

  if (args->flag("--json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      out.push_back({{"scheme", r.scheme}, {"family", r.family}, {"kernel", r.kernel}, {"m", *m}, {"n", *n},
                     {"k", *k}, {"rel_err_fp64", r.rel_err_fp64}, {"rel_err_reference", r.rel_err_reference},
                     {"median_ms", r.median_ms}, {"error", r.error}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return all_ok ? 0 : 1;
  }
  std::printf("qlinear demo on %s: y = x W^T, M=%lld N=%lld K=%lld, bf16 activations and output\n",
              platform.describe().c_str(), static_cast<long long>(*m), static_cast<long long>(*n),
              static_cast<long long>(*k));
  std::printf("error vs FP64 = ||y - x W^T|| / ||x W^T|| on the unquantized x and W (quantization error);\n"
              "vs reference = the same against the reference kernel on the same quantized inputs\n\n");
  std::printf("%-22s %-17s %-28s %14s %14s %10s\n", "scheme", "family", "kernel", "error vs FP64",
              "vs reference", "median ms");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-22s %-17s %-28s FAILED: %s\n", r.scheme.c_str(), r.family.c_str(), r.kernel.c_str(),
                  r.error.c_str());
      continue;
    }
    std::printf("%-22s %-17s %-28s %14.3e %14.3e %10.3f\n", r.scheme.c_str(), r.family.c_str(), r.kernel.c_str(),
                r.rel_err_fp64, r.rel_err_reference, r.median_ms);
  }
  return all_ok ? 0 : 1;
}

}  // namespace qlinear::cli
