// qlinear inspect CKPT: what each quantized layer is (scheme, shapes, dtypes, fused shards, bytes) and which
// kernel it would get here, and why.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/checkpoint_args.hpp"
#include "qlinear/registry.hpp"

namespace qlinear::cli {

namespace {
const std::vector<OptionSpec> kSpecs = [] {
  std::vector<OptionSpec> specs = {
      {"--explain", "", "list every candidate kernel with its verdict"},
      {"--json", "", "machine-readable output"},
      {"--help", "", "this help"},
  };
  for (OptionSpec& s : checkpoint_option_specs()) specs.push_back(s);
  return specs;
}();
}  // namespace

int cmd_inspect(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 1);
  if (!args) {
    std::fprintf(stderr, "qlinear inspect: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear inspect CKPT [--layers REGEX] [--tp-rank R --tp-size W] [--explain] [--json]\n\n%s",
                options_help(kSpecs).c_str());
    return 0;
  }
  CheckpointInput input;
  if (int code = load_checkpoint_input(*args, "inspect", input); code != 0) return code;
  const LoadOptions& lo = input.options;
  const Platform* platform = &input.platform;
  const LoadedModel* model = &input.model;
  const bool json = args->flag("--json"), explain = args->flag("--explain");
  nlohmann::json layers = nlohmann::json::array();
  if (!json) {
    std::printf("%s: quant_method %s, %zu quantized layers, %zu unquantized linear modules; rank %d of %d; %s\n\n",
                model->path.c_str(), std::string(quant_method_name(model->config.quant_method)).c_str(),
                model->layers.size(), model->unquantized.size(), lo.tp_rank, lo.tp_size,
                platform->describe().c_str());
  }
  int64_t total = 0;
  for (const LoadedLayer& l : model->layers) {
    const LinearConfig& c = l.layer.config;
    const Selection sel = explain_selection(c, *platform);
    const std::string kernel = sel.kernel ? std::string(sel.kernel->name()) : "none";
    total += l.checkpoint_bytes;
    if (json) {
      nlohmann::json tensors = nlohmann::json::object();
      for (const auto& [name, t] : l.layer.params) tensors[name] = t.describe();
      nlohmann::json cands = nlohmann::json::array();
      for (const CandidateVerdict& cv : sel.candidates) {
        cands.push_back({{"kernel", cv.kernel->name()}, {"selected", cv.chosen}, {"reason", cv.reason}});
      }
      layers.push_back({{"layer", l.layer.name}, {"scheme", l.scheme->name}, {"family", family_name(c.family)},
                        {"n", c.n}, {"k", c.k}, {"full_n", l.full_n}, {"full_k", l.full_k},
                        {"parallelism", l.parallelism == Parallelism::kColumn ? "column" : "row"},
                        {"shards", l.shards}, {"logical_widths", c.logical_widths},
                        {"per_shard_block_grids", !scale_row_grid(c).uniform}, {"bytes", l.checkpoint_bytes},
                        {"bias", l.bias.defined()}, {"tensors", tensors}, {"kernel", kernel}, {"candidates", cands}});
      continue;
    }
    std::printf("%s  [%s, %s-parallel]\n", l.layer.name.c_str(), std::string(l.scheme->name).c_str(),
                l.parallelism == Parallelism::kColumn ? "column" : "row");
    std::printf("  N=%lld K=%lld (full %lldx%lld), %.2f MiB%s\n", static_cast<long long>(c.n),
                static_cast<long long>(c.k), static_cast<long long>(l.full_n), static_cast<long long>(l.full_k),
                l.checkpoint_bytes / 1048576.0, l.bias.defined() ? ", bias" : "");
    if (l.shards.size() > 1) {
      std::printf("  fused:");
      for (size_t i = 0; i < l.shards.size(); ++i) {
        std::printf(" %s (%lld)", l.shards[i].c_str(), static_cast<long long>(c.logical_widths[i]));
      }
      std::printf("\n");
      // Shards that end in a partial 128x128 block keep their own block grids.
      if (const ScaleRowGrid g = scale_row_grid(c); !g.uniform) {
        std::printf("  weight_scale: %s\n", g.to_string().c_str());
      }
    }
    for (const auto& [name, t] : l.layer.params) std::printf("  %-20s %s\n", name.c_str(), t.describe().c_str());
    std::printf("  kernel: %s\n", kernel.c_str());
    if (explain || !sel.kernel) std::printf("%s", sel.explain().c_str());
  }
  if (json) {
    std::printf("%s\n", nlohmann::json({{"path", model->path},
                                        {"quant_method", quant_method_name(model->config.quant_method)},
                                        {"layers", layers},
                                        {"unquantized", model->unquantized},
                                        {"bytes", total}})
                            .dump(2)
                            .c_str());
  } else {
    std::printf("\n%.2f MiB of quantized tensors on this rank\n", total / 1048576.0);
  }
  return 0;
}

}  // namespace qlinear::cli
