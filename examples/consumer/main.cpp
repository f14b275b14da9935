// qlinear_consumer: the smallest useful program on an installed qlinear (examples/consumer/CMakeLists.txt).
//
//   qlinear_consumer CHECKPOINT_DIR    load a compressed-tensors / Quark checkpoint
//   qlinear_consumer --scheme S        quantize a random 512 x 1024 weight with scheme S instead
//
// For every layer: explain the kernel selection on this CPU, process the layer with the chosen kernel, apply
// it to a random activation, and check the result against the reference kernel applied to the same layer
// (exact dequantization, FP64 accumulation). Exit status 0 only when every layer is within the bound.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "qlinear/loader.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

namespace {

using namespace qlinear;

// The reference kernel of a family: the last of its family in the platform's priority list.
const LinearKernel* reference_kernel(const Platform& platform, Family family) {
  const LinearKernel* last = nullptr;
  for (const LinearKernel* k : priority_list(platform)) {
    if (k->family() == family) last = k;
  }
  return last;
}

// ||a - b|| / ||b|| over two f32 tensors of one shape.
double relative_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double d = a.data<float>()[i] - b.data<float>()[i];
    num += d * d;
    den += static_cast<double>(b.data<float>()[i]) * b.data<float>()[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Selects, processes and applies one layer; false (with a message) when anything fails.
bool run_layer(const LinearLayer& loaded, const Tensor& bias, const Platform& platform) {
  const Selection selection = explain_selection(loaded.config, platform);
  std::printf("%s  %s\n%s", loaded.name.c_str(), loaded.config.to_string().c_str(), selection.explain().c_str());
  auto chosen = select_kernel(loaded.config, platform);
  if (!chosen) {
    std::fprintf(stderr, "error: %s\n", chosen.message().c_str());
    return false;
  }
  const LinearKernel* reference = reference_kernel(platform, loaded.config.family);

  // Kernels rewrite the layer in their own layout, so each gets its own copy.
  LinearLayer fast = loaded, ref = loaded;
  for (auto [kernel, layer] : {std::pair{*chosen, &fast}, std::pair{reference, &ref}}) {
    if (Status s = kernel->process_weights_after_loading(*layer); !s) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return false;
    }
  }
  const Tensor x = random_normal(DType::kF32, {7, loaded.config.k}, /*seed=*/7);
  const Tensor* b = bias.defined() ? &bias : nullptr;
  auto y = (*chosen)->apply(fast, Activation::dense(x), b);
  auto y_ref = reference->apply(ref, Activation::dense(x), b);
  if (!y || !y_ref) {
    std::fprintf(stderr, "error: %s\n", (!y ? y : y_ref).message().c_str());
    return false;
  }
  // Same quantized inputs on both sides: only f32 accumulation order separates a fast kernel from the
  // reference (~1e-6 at these K); 1e-3 still catches any layout or scale mistake (errors of order 1).
  const double err = relative_error(*y, *y_ref);
  const bool ok = err < 1e-3;
  std::printf("  applied %s to x%s: y%s, relative error vs %s %.2e %s\n\n", std::string((*chosen)->name()).c_str(),
              shape_to_string(x.shape()).c_str(), shape_to_string(y->shape()).c_str(),
              std::string(reference->name()).c_str(), err, ok ? "ok" : "TOO LARGE");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const Platform platform = Platform::host_cpu();
  std::printf("platform: %s\n\n", platform.describe().c_str());
  bool ok = true;
  if (args.size() == 2 && args[0] == "--scheme") {
    const Scheme* scheme = find_scheme(args[1]);
    if (scheme == nullptr) {
      std::fprintf(stderr, "error: unknown scheme '%s'; known schemes: %s\n", args[1].c_str(), scheme_names().c_str());
      return 2;
    }
    MakeLayerOptions options;
    options.input_dtype = options.out_dtype = DType::kF32;
    const Tensor w = random_normal(DType::kF32, {512, 1024}, /*seed=*/1, /*stddev=*/0.02);
    auto layer = quantize_layer("example.proj", *scheme, w, options);
    if (!layer) {
      std::fprintf(stderr, "error: %s\n", layer.message().c_str());
      return 1;
    }
    ok = run_layer(*layer, Tensor(), platform);
  } else if (args.size() == 1 && args[0][0] != '-') {
    LoadOptions options;
    options.input_dtype = options.out_dtype = DType::kF32;
    auto model = load_checkpoint(args[0], options);
    if (!model) {
      std::fprintf(stderr, "error: %s\n", model.message().c_str());
      return 1;
    }
    std::printf("%s: %zu quantized layers (%s)\n\n", args[0].c_str(), model->layers.size(),
                std::string(quant_method_name(model->config.quant_method)).c_str());
    for (const LoadedLayer& l : model->layers) ok = run_layer(l.layer, l.bias, platform) && ok;
  } else {
    std::fprintf(stderr, "usage: qlinear_consumer CHECKPOINT_DIR | --scheme SCHEME\n");
    return 2;
  }
  std::printf("%s\n", ok ? "consumer: all layers ok" : "consumer: FAILED");
  return ok ? 0 : 1;
}
