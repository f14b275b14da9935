// qlinear quantize IN OUT --scheme S: a BF16/FP16/FP32 safetensors model -> a compressed-tensors (or, for
// MXFP6 and the MXFP4 schemes with quantized input, Quark) model directory that qlinear and vLLM load,
// streamed by quantize_checkpoint (quantize_checkpoint.hpp): linear weights quantized with qlinear's reference
// quantizers in parallel row chunks, every other tensor copied as it is, shards of at most --max-shard-size,
// progress on a terminal.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "qlinear/kernel.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/quantize_checkpoint.hpp"
#include "qlinear/name_pattern.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--scheme", "S", "target scheme (qlinear kernels --list-schemes)"},
    {"--ignore", "REGEX", "linear weights to keep dense (default: lm_head|embed|norm)"},
    {"--input-range", "MIN,MAX", "activation range for static input scales (required by static schemes)"},
    {"--max-shard-size", "SIZE", "largest output file (default 5GB; also MB, GiB, ...)"},
    {"--json", "", "print a JSON summary (and no progress line)"},
    {"--help", "", "this help"},
};

// "5GB", "500MB", "2GiB", "123456" (bytes): save_pretrained's max_shard_size spellings.
Result<uint64_t> parse_size(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {{"GiB", 1024.0 * 1024 * 1024}, {"MiB", 1024.0 * 1024},
                                                          {"KiB", 1024.0}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
                                                          {"B", 1.0}};
  double scale = 1.0;
  std::string number = text;
  for (const auto& [unit, factor] : kUnits) {
    if (text.size() > std::strlen(unit) && text.ends_with(unit)) {
      number = text.substr(0, text.size() - std::strlen(unit));
      scale = factor;
      break;
    }
  }
  try {
    size_t used = 0;
    const double v = std::stod(number, &used);
    if (used != number.size() || !(v * scale >= 1e6) || !(v * scale <= 1e15)) throw std::invalid_argument("range");
    return static_cast<uint64_t>(v * scale);
  } catch (const std::exception&) {
    return Status::error("--max-shard-size " + text + ": expected a size from 1MB to 1000TB such as 5GB, 500MB or 2GiB");
  }
}

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

}  // namespace

int cmd_quantize(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 2);
  if (!args) {
    std::fprintf(stderr, "qlinear quantize: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear quantize IN OUT --scheme S [--ignore REGEX] [--input-range MIN,MAX] [--max-shard-size SIZE] [--json]\n"
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
  // Static input scales, and NVFP4's input global scale (a checkpoint stores it as input_global_scale), are
  // made from the activations' range; none is assumed.
  const bool static_input = scheme->activation_key &&
                            (scheme->activation_key->scale.is_static || scheme->activation_key->scale2.has_value());
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
                 "qlinear quantize: %s stores static activation scales (input_scale, or NVFP4's "
                 "input_global_scale): give the activations' range with --input-range MIN,MAX (qlinear does not "
                 "read calibration data; the Python package's qlinear.torch.calibrate observes it)\n",
                 std::string(scheme->name).c_str());
    return 2;
  }
  QuantizeCheckpointOptions qo;
  qo.layer = mo;
  qo.ignore_regex = args->get_or("--ignore", "lm_head|embed|norm");
  if (auto ignore = NamePattern::compile(qo.ignore_regex, NamePattern::Anchor::kSearch); !ignore) {
    std::fprintf(stderr, "qlinear quantize: --ignore: %s\n", ignore.message().c_str());
    return 2;
  }
  if (auto size = args->get("--max-shard-size")) {
    auto bytes = parse_size(*size);
    if (!bytes) {
      std::fprintf(stderr, "qlinear quantize: %s\n", bytes.message().c_str());
      return 2;
    }
    qo.max_shard_bytes = *bytes;
  }
  const bool json = args->flag("--json");
  const std::string in = args->positional()[0], out = args->positional()[1];
  if (std::filesystem::exists(out) && !std::filesystem::is_empty(out)) {
    std::fprintf(stderr, "qlinear quantize: OUT %s exists and is not empty; choose a new directory\n", out.c_str());
    return 2;
  }
  auto ckpt = Checkpoint::open(in);
  if (!ckpt) {
    std::fprintf(stderr, "qlinear quantize: %s\n", ckpt.message().c_str());
    return 1;
  }
  auto total = checkpoint_tensor_bytes(in);
  Progress progress("tensors", ckpt->names().size(), total ? *total : 0, json);
  qo.on_tensor = [&](const std::string& name, uint64_t bytes) { progress.step(name, bytes); };
  const auto start = std::chrono::steady_clock::now();
  auto summary = quantize_checkpoint(in, out, *scheme, qo);
  progress.clear();
  if (!summary) {
    std::fprintf(stderr, "qlinear quantize: %s\n", summary.message().c_str());
    return 1;
  }
  if (summary->quantized == 0) {
    std::fprintf(stderr, "qlinear quantize: %s has no float 2-D '*.weight' tensor to quantize\n", in.c_str());
    std::filesystem::remove_all(out);
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (json) {
    nlohmann::json j = {{"out", out}, {"scheme", scheme->name}, {"quantized", summary->quantized},
                        {"copied", summary->copied}, {"shards", summary->shards},
                        {"input_bytes", summary->input_bytes}, {"output_bytes", summary->output_bytes},
                        {"carried_files", summary->carried_files}, {"seconds", seconds},
                        {"input_gbps", summary->input_bytes / 1e9 / seconds}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s: %zu linear layers as %s, %zu tensors copied, %zu shard(s), %.2f GB from %.2f GB in %.1f s "
                "(%.2f GB/s)\n",
                out.c_str(), summary->quantized, std::string(scheme->name).c_str(), summary->copied, summary->shards,
                summary->output_bytes / 1e9, summary->input_bytes / 1e9, seconds, summary->input_bytes / 1e9 / seconds);
  }
  return 0;
}

}  // namespace qlinear::cli
