// qlinear quantize IN OUT --scheme S: a BF16/FP16/FP32 safetensors model -> a compressed-tensors (or, for
// MXFP6 and the MXFP4 schemes with quantized input, Quark) checkpoint that qlinear and vLLM load. Linear weights are quantized with qlinear's reference
// quantizers; every other tensor is copied as it is.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qlinear/checkpoint_writer.hpp"
#include "qlinear/kernel.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/regex_limits.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--scheme", "S", "target scheme (qlinear kernels --list-schemes)"},
    {"--ignore", "REGEX", "linear weights to keep dense (default: lm_head|embed|norm)"},
    {"--input-range", "MIN,MAX", "activation range for static input scales (required by static schemes)"},
    {"--help", "", "this help"},
};

// One line, redrawn in place, when stderr is a terminal.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(2) != 0) {}
  void step(const std::string& what) {
    ++done_;
    if (!tty_) return;
    const int width = 30, filled = static_cast<int>(width * done_ / std::max<size_t>(total_, 1));
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %-60.60s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done_, total_, what.c_str());
    if (done_ == total_) std::fprintf(stderr, "\n");
  }

 private:
  size_t total_, done_ = 0;
  bool tty_;
};

Result<std::pair<float, float>> parse_range(const std::string& text) {
  const size_t comma = text.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    size_t used = 0;
    const float lo = std::stof(text.substr(0, comma), &used);
    const float hi = std::stof(text.substr(comma + 1));
    if (!(lo < 0 && hi > 0)) throw std::invalid_argument("range");
    return std::make_pair(lo, hi);
  } catch (const std::exception&) {
    return Status::error("--input-range " + text + ": expected MIN,MAX with MIN < 0 < MAX, e.g. -6.5,7.25");
  }
}

bool is_float_tensor(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

}  // namespace

int cmd_quantize(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 2);
  if (!args) {
    std::fprintf(stderr, "qlinear quantize: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear quantize IN OUT --scheme S [--ignore REGEX] [--input-range MIN,MAX]\n"
                "IN: a safetensors model (directory with config.json, or one .safetensors file); OUT: a new directory.\n\n%s",
                options_help(kSpecs).c_str());
    return 0;
  }
  if (args->positional().size() != 2) {
    std::fprintf(stderr, "qlinear quantize: expected IN and OUT (see qlinear quantize --help)\n");
    return 2;
  }
  const auto scheme_name = args->get("--scheme");
  const Scheme* scheme = scheme_name ? find_scheme(*scheme_name) : nullptr;
  if (scheme == nullptr) {
    std::fprintf(stderr, "qlinear quantize: --scheme %s; schemes: %s\n",
                 scheme_name ? ("'" + *scheme_name + "' is unknown").c_str() : "is required", scheme_names().c_str());
    return 2;
  }
  MakeLayerOptions mo;
  const bool static_input = scheme->activation_key && scheme->activation_key->scale.is_static;
  if (auto range = args->get("--input-range")) {
    auto r = parse_range(*range);
    if (!r) {
      std::fprintf(stderr, "qlinear quantize: %s\n", r.message().c_str());
      return 2;
    }
    mo.input_min = r->first;
    mo.input_max = r->second;
  } else if (static_input) {
    std::fprintf(stderr,
                 "qlinear quantize: %s has static input scales: give the activations' range with "
                 "--input-range MIN,MAX (qlinear does not read calibration data)\n",
                 std::string(scheme->name).c_str());
    return 2;
  }
  auto ignore_re = compile_regex(args->get_or("--ignore", "lm_head|embed|norm"));
  if (!ignore_re) {
    std::fprintf(stderr, "qlinear quantize: --ignore: %s\n", ignore_re.message().c_str());
    return 2;
  }
  const std::regex ignore = std::move(*ignore_re);
  namespace fs = std::filesystem;
  const std::string in = args->positional()[0], out = args->positional()[1];
  if (fs::exists(out) && !fs::is_empty(out)) {
    std::fprintf(stderr, "qlinear quantize: OUT %s exists and is not empty; choose a new directory\n", out.c_str());
    return 2;
  }
  auto ckpt = Checkpoint::open(in);
  if (!ckpt) {
    std::fprintf(stderr, "qlinear quantize: %s\n", ckpt.message().c_str());
    return 1;
  }
  std::string base_config = "{}";
  const fs::path cfg = (fs::is_directory(in) ? fs::path(in) : fs::path(in).parent_path()) / "config.json";
  if (fs::exists(cfg)) {
    std::ifstream f(cfg);
    std::stringstream text;
    text << f.rdbuf();
    base_config = text.str();
  }
  // Linear layers: 2-D float "<module>.weight" tensors not matched by --ignore.
  std::vector<std::string> linear;
  std::vector<std::pair<std::string, Tensor>> dense;
  for (const std::string& name : ckpt->names()) {
    auto e = ckpt->entry(name);
    const bool is_weight = name.size() > 7 && name.ends_with(".weight");
    if (is_weight && e && e->shape.size() == 2 && is_float_tensor(e->dtype) && !std::regex_search(name, ignore)) {
      linear.push_back(name.substr(0, name.size() - 7));
    } else {
      dense.emplace_back(name, ckpt->tensor(name).value());
    }
  }
  if (linear.empty()) {
    std::fprintf(stderr, "qlinear quantize: %s has no float 2-D '*.weight' tensor to quantize\n", in.c_str());
    return 1;
  }
  std::vector<LinearLayer> layers;
  layers.reserve(linear.size());
  std::vector<CheckpointModule> modules;
  Progress progress(linear.size());
  for (const std::string& m : linear) {
    const Tensor w = ckpt->tensor(m + ".weight").value();
    auto layer = quantize_layer(m, *scheme, w.contiguous(), mo);
    if (!layer) {
      std::fprintf(stderr, "\nqlinear quantize: layer %s (%s): %s\n", m.c_str(), w.describe().c_str(),
                   layer.message().c_str());
      return 1;
    }
    layers.push_back(std::move(*layer));
    progress.step(m);
  }
  for (size_t i = 0; i < linear.size(); ++i) modules.push_back({linear[i], &layers[i], Tensor()});
  if (Status s = write_quantized_checkpoint(out, *scheme, modules, dense, base_config); !s) {
    std::fprintf(stderr, "qlinear quantize: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %zu linear layers as %s, %zu tensors copied\n", out.c_str(), linear.size(),
              std::string(scheme->name).c_str(), dense.size());
  return 0;
}

}  // namespace qlinear::cli
