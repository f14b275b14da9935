// qlinear demo: for every scheme, quantize a small layer with qlinear's own quantizers, write it as a
// compressed-tensors (or Quark) checkpoint to a temporary directory, load it back through the real loader,
// and run it with the kernel chosen here; one table of the error against FP64 on the unquantized inputs,
// the agreement with the reference kernel on the same quantized inputs, and the time.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/layer_runner.hpp"
#include "qlinear/checkpoint_writer.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--m", "M", "tokens (default 16)"},
    {"--n", "N", "output features (default 256)"},
    {"--k", "K", "input features (default 512)"},
    {"--keep", "DIR", "write the checkpoints under DIR and keep them (default: a temporary directory, removed)"},
    {"--json", "", "machine-readable output"},
    {"--help", "", "this help"},
};

Tensor exact_product(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
  Tensor y = Tensor::empty(DType::kF64, {m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = element_as_double(bias, j);
      for (int64_t t = 0; t < k; ++t) acc += element_as_double(x, i * k + t) * element_as_double(w, j * k + t);
      y.data<double>()[i * n + j] = acc;
    }
  }
  return y;
}

struct Row {
  std::string scheme, family, kernel, error;
  double err_fp64 = 0, err_reference = 0, median_ms = 0;
};

// Quantize -> write -> load -> select -> process -> apply, for one scheme.
Status run_scheme(const Scheme& scheme, const std::string& dir, const Tensor& weight, const Tensor& bias,
                  const Tensor& x, const Tensor& exact, Row& row) {
  MakeLayerOptions options;
  options.input_min = -5.0f;
  options.input_max = 5.0f;
  const std::string module = "model.layers.0.mlp.down_proj";
  QL_ASSIGN_OR_RETURN(LinearLayer layer, quantize_layer(module, scheme, weight, options));
  QL_RETURN_IF_ERROR(write_quantized_checkpoint(dir, scheme, {{module, &layer, bias}}, {}));
  QL_ASSIGN_OR_RETURN(LoadedModel model, load_checkpoint(dir));
  if (model.layers.size() != 1 || model.layers[0].scheme != &scheme) {
    return Status::error(dir + ": the checkpoint did not load back as one " + std::string(scheme.name) + " layer");
  }
  const LoadedLayer& loaded = model.layers[0];
  QL_ASSIGN_OR_RETURN(auto runner, LayerRunner::create(loaded.layer, loaded.bias, Platform::host_cpu(), {}, 1));
  row.kernel = std::string(runner->kernel().name());
  // The runner checks against the reference on the same quantized inputs; the FP64 comparison uses the
  // unquantized weight and activation.
  QL_ASSIGN_OR_RETURN(Measurement ms, runner->measure(x.size(0), 5, true, 2));
  row.err_reference = ms.rel_err;
  row.median_ms = ms.median_ms;
  LinearLayer processed = clone_layer(loaded.layer);
  QL_RETURN_IF_ERROR(runner->kernel().process_weights_after_loading(processed));
  QL_ASSIGN_OR_RETURN(Tensor y, runner->kernel().apply(processed, Activation::dense(x), &loaded.bias));
  row.err_fp64 = relative_error(y, exact);
  return Status::ok();
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 0);
  if (!args) {
    std::fprintf(stderr, "qlinear demo: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear demo [--m M --n N --k K] [--keep DIR] [--json]\n\n%s", options_help(kSpecs).c_str());
    return 0;
  }
  auto m = args->get_int("--m", 16, 1, kMaxDimension);
  auto n = args->get_int("--n", 256, 1, kMaxDimension);
  auto k = args->get_int("--k", 512, 32, kMaxDimension);
  for (const auto* r : {&m, &n, &k}) {
    if (!*r) {
      std::fprintf(stderr, "qlinear demo: %s\n", r->message().c_str());
      return 2;
    }
  }
  if (*k % 128 != 0) {
    std::fprintf(stderr, "qlinear demo: --k %lld must be a multiple of 128 so that every scheme applies\n",
                 static_cast<long long>(*k));
    return 2;
  }
  namespace fs = std::filesystem;
  const bool keep = args->get("--keep").has_value();
  const fs::path root = keep ? fs::path(*args->get("--keep"))
                             : fs::temp_directory_path() / ("qlinear-demo-" + std::to_string(::getpid()));
  const Platform platform = Platform::host_cpu();
  // W with the spread of a real projection; x with a few outliers, as activations have.
  const Tensor weight = random_normal(DType::kF32, {*n, *k}, 1, 0.05);
  const Tensor bias = random_normal(DType::kF32, {*n}, 3, 0.1);
  const Tensor x = random_normal(DType::kBF16, {*m, *k}, 2, 1.0);
  const Tensor exact = exact_product(x, weight, bias);

  std::vector<Row> rows;
  bool all_ok = true;
  for (const Scheme& scheme : all_schemes()) {
    Row row{std::string(scheme.name), std::string(family_name(scheme.family)), "-", ""};
    if (Status s = run_scheme(scheme, (root / scheme.name).string(), weight, bias, x, exact, row); !s) {
      row.error = s.message();
      all_ok = false;
    } else if (!(row.err_reference <= 1e-2)) {
      row.error = "output differs from the reference kernel (" + std::to_string(row.err_reference) + ")";
      all_ok = false;
    }
    rows.push_back(row);
  }
  if (!keep) fs::remove_all(root);

  if (args->flag("--json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      out.push_back({{"scheme", r.scheme}, {"family", r.family}, {"kernel", r.kernel}, {"m", *m}, {"n", *n},
                     {"k", *k}, {"rel_err_fp64", r.err_fp64}, {"rel_err_reference", r.err_reference},
                     {"median_ms", r.median_ms}, {"error", r.error}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return all_ok ? 0 : 1;
  }
  std::printf("qlinear demo on %s\n", platform.describe().c_str());
  std::printf("Each scheme: quantize a %lldx%lld layer, write a checkpoint%s, load it back, run y = x W^T + b "
              "at M=%lld.\n", static_cast<long long>(*n), static_cast<long long>(*k),
              keep ? (" under " + root.string()).c_str() : "", static_cast<long long>(*m));
  std::printf("error vs FP64: against x W^T + b on the unquantized x and W (what quantization costs);\n"
              "vs reference: against the reference kernel on the same quantized inputs (what the kernel costs).\n\n");
  std::printf("%-22s %-17s %-28s %14s %13s %10s\n", "scheme", "family", "kernel", "error vs FP64", "vs reference",
              "median ms");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-22s %-17s %-28s FAILED: %s\n", r.scheme.c_str(), r.family.c_str(), r.kernel.c_str(),
                  r.error.c_str());
      continue;
    }
    std::printf("%-22s %-17s %-28s %14.3e %13.2e %10.3f\n", r.scheme.c_str(), r.family.c_str(), r.kernel.c_str(),
                r.err_fp64, r.err_reference, r.median_ms);
  }
  return all_ok ? 0 : 1;
}

}  // namespace qlinear::cli
