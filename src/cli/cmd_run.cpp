// qlinear run CKPT: load every selected layer, process it with the kernel chosen here, run it on random
// activations for each M, check it against the reference, report times and rates. With --weight-cache DIR,
// layers are processed through the processed-weight cache (weight_cache.hpp), and the report says per layer
// whether the cache was hit, why not, and how long hashing, loading, processing and storing took.
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/layer_runner.hpp"
#include "cli/checkpoint_args.hpp"
#include "cli/progress.hpp"
#include "cli/tp_check.hpp"
#include "qlinear/weight_cache.hpp"

namespace qlinear::cli {

namespace {
const std::vector<OptionSpec> kSpecs = [] {
  std::vector<OptionSpec> specs = {
      {"--m", "LIST", "token counts, comma-separated (default 1,16,256)"},
      {"--reps", "N", "timed repetitions per measurement (default 10)"},
      {"--no-check", "", "skip the comparison with the reference kernel"},
      {"--tp", "N", "split every layer across GPUs 0..N-1 (NCCL) and check it against one GPU"},
      {"--tp-reduce", "f32|output", "with --tp: row-parallel partial sums in f32 (default) or in the output dtype "
                                     "(half the bytes, one output rounding per rank more)"},
      {"--json", "", "machine-readable output (one record per layer and M)"},
      {"--weight-cache", "DIR", "load processed weights from DIR when valid, else process and store them there"},
      {"--help", "", "this help"},
  };
  for (OptionSpec& s : checkpoint_option_specs()) specs.push_back(s);
  return specs;
}();
// Per layer: hit or miss (with the reason), and where the time went; then the totals.
void print_cache_report(const std::string& dir, const std::vector<std::pair<std::string, WeightCacheOutcome>>& rows) {
  int hits = 0;
  WeightCacheOutcome total;
  std::printf("\nweight cache %s\n%-44s %-5s %9s %9s %11s %9s  %s\n", dir.c_str(), "layer", "cache", "hash ms",
              "load ms", "process ms", "store ms", "note");
  for (const auto& [name, o] : rows) {
    hits += o.hit ? 1 : 0;
    total.key_ms += o.key_ms;
    total.load_ms += o.load_ms;
    total.process_ms += o.process_ms;
    total.store_ms += o.store_ms;
    const std::string note = o.hit ? std::string()
                             : !o.store_error.empty() ? o.miss_reason + "; not stored: " + o.store_error
                                                      : o.miss_reason + (o.stored ? "; stored" : "");
    std::printf("%-44s %-5s %9.1f %9.1f %11.1f %9.1f  %s\n", name.c_str(), o.hit ? "hit" : "miss", o.key_ms,
                o.load_ms, o.process_ms, o.store_ms, note.c_str());
  }
  std::printf("%d of %zu layers hit; total %.1f ms (hash %.1f, load %.1f, process %.1f, store %.1f)\n", hits,
              rows.size(), total.key_ms + total.load_ms + total.process_ms + total.store_ms, total.key_ms,
              total.load_ms, total.process_ms, total.store_ms);
}

}  // namespace

int cmd_run(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 1);
  if (!args) {
    std::fprintf(stderr, "qlinear run: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear run CKPT [--m 1,16,256] [--layers REGEX] "
                "[--tp-rank R --tp-size W | --tp N [--tp-reduce f32|output]] [--weight-cache DIR] [--json]\n\n%s",
                options_help(kSpecs).c_str());
    return 0;
  }
  auto ms = args->get_int_list("--m", {1, 16, 256}, 1, kMaxDimension);
  auto reps = args->get_int("--reps", 10, 1, kMaxReps);
  for (const Status& s : {ms.status(), reps.status()}) {
    if (!s) {
      std::fprintf(stderr, "qlinear run: %s\n", s.message().c_str());
      return 2;
    }
  }
  auto tp = args->get_int("--tp", 1, 1, 64);
  if (!tp) {
    std::fprintf(stderr, "qlinear run: %s\n", tp.message().c_str());
    return 2;
  }
  CheckpointInput input;
  if (int code = load_checkpoint_input(*args, "run", input); code != 0) return code;
  const std::optional<std::string> reduce = args->get("--tp-reduce");
  if (reduce && !args->flag("--tp")) {
    std::fprintf(stderr, "qlinear run: --tp-reduce applies to --tp N (the split across this machine's GPUs)\n");
    return 2;
  }
  if (reduce && *reduce != "f32" && *reduce != "output") {
    std::fprintf(stderr, "qlinear run: --tp-reduce %s: expected f32 or output\n", reduce->c_str());
    return 2;
  }
  if (args->flag("--tp")) {
    if (input.options.tp_size != 1) {
      std::fprintf(stderr, "qlinear run: --tp runs every rank itself; it does not combine with --tp-rank/--tp-size\n");
      return 2;
    }
    tp::ParallelOptions po;
    if (reduce && *reduce == "output") po.row_reduction = tp::RowReduction::kOutputDtype;
    return run_tensor_parallel({static_cast<int>(*tp), std::move(input.model), input.options, *ms,
                                args->flag("--json"), po});
  }
  const LoadOptions& lo = input.options;
  const Platform* platform = &input.platform;
  const LoadedModel* model = &input.model;
  const bool json = args->flag("--json"), check = !args->flag("--no-check");
  nlohmann::json records = nlohmann::json::array();
  if (!json) {
    std::printf("%s: %zu quantized layers, rank %d of %d, on %s\n\n", model->path.c_str(), model->layers.size(),
                lo.tp_rank, lo.tp_size, platform->describe().c_str());
    std::printf("%-44s %-20s %-28s %6s %11s %10s %9s %9s\n", "layer", "scheme", "kernel", "M", "vs ref", "median ms",
                "TFLOP/s", "GB/s");
  }
  int failures = 0;
  uint64_t seed = 1;
  const std::optional<std::string> cache_dir = args->get("--weight-cache");
  std::optional<WeightCache> cache;
  if (cache_dir) cache.emplace(*cache_dir);
  std::vector<std::pair<std::string, WeightCacheOutcome>> outcomes;  // per layer, with --weight-cache
  auto layer_bytes = [](const LoadedLayer& l) {
    uint64_t b = 0;
    for (const auto& [name, t] : l.layer.params) b += t.defined() ? static_cast<uint64_t>(t.nbytes()) : 0;
    return b;
  };
  uint64_t total_bytes = 0;
  for (const LoadedLayer& l : model->layers) total_bytes += layer_bytes(l);
  Progress progress("layers", model->layers.size(), total_bytes, json);
  for (const LoadedLayer& l : model->layers) {
    progress.clear();  // the table goes to stdout; the progress line to stderr, redrawn below it
    // Tensors may be views of the mapped files: a file replaced or truncated since loading is reported here
    // rather than read (SIGBUS) while processing (safetensors.hpp, LIMITATION).
    if (Status s = model->checkpoint.verify_unchanged(); !s) {
      std::fprintf(stderr, "qlinear run: %s\n", s.message().c_str());
      return 1;
    }
    WeightCacheOutcome outcome;
    LayerRunner::ProcessFn process;
    if (cache) {
      process = [&](LinearLayer& layer, const LinearKernel& kernel) -> Status {
        QL_ASSIGN_OR_RETURN(outcome, cache->process(layer, kernel, *platform, l.scheme->name));
        return Status::ok();
      };
    }
    auto runner = LayerRunner::create(l.layer, l.bias, *platform, {}, 1, process);
    if (cache && runner) outcomes.emplace_back(l.layer.name, outcome);
    if (!runner) {
      std::fprintf(stderr, "qlinear run: %s: %s\n", l.layer.name.c_str(), runner.message().c_str());
      ++failures;
      progress.step(l.layer.name, layer_bytes(l));
      continue;
    }
    for (int64_t m : *ms) {
      auto r = (*runner)->measure(m, static_cast<int>(*reps), check, seed++);
      if (!r) {
        std::fprintf(stderr, "qlinear run: %s M=%lld: %s\n", l.layer.name.c_str(), static_cast<long long>(m),
                     r.message().c_str());
        ++failures;
        continue;
      }
      // Kernel output vs the reference on the same quantized inputs: FP32 accumulation and one output rounding.
      const bool ok = !check || r->rel_err <= 1e-2;
      failures += ok ? 0 : 1;
      if (json) {
        records.push_back({{"layer", l.layer.name}, {"scheme", l.scheme->name}, {"kernel", (*runner)->kernel().name()},
                           {"m", m}, {"n", l.layer.config.n}, {"k", l.layer.config.k}, {"median_ms", r->median_ms},
                           {"tflops", r->tflops}, {"weight_gbps", r->weight_gbps},
                           {"rel_err_reference", check ? nlohmann::json(r->rel_err) : nlohmann::json(nullptr)},
                           {"ok", ok}});
        if (cache) {
          records.back()["weight_cache"] = {{"hit", outcome.hit}, {"miss_reason", outcome.miss_reason},
                                            {"stored", outcome.stored}, {"store_error", outcome.store_error},
                                            {"hash_ms", outcome.key_ms}, {"load_ms", outcome.load_ms},
                                            {"process_ms", outcome.process_ms}, {"store_ms", outcome.store_ms}};
        }
      } else {
        char err[32] = "-";
        if (check) std::snprintf(err, sizeof err, "%.2e%s", r->rel_err, ok ? "" : " !");
        std::printf("%-44s %-20.*s %-28.*s %6lld %11s %10.3f %9.3f %9.1f\n", l.layer.name.c_str(),
                    static_cast<int>(l.scheme->name.size()), l.scheme->name.data(),
                    static_cast<int>((*runner)->kernel().name().size()), (*runner)->kernel().name().data(),
                    static_cast<long long>(m), err, r->median_ms, r->tflops, r->weight_gbps);
      }
    }
    std::fflush(stdout);
    progress.step(l.layer.name, layer_bytes(l));
  }
  progress.clear();
  if (cache && !json) print_cache_report(*cache_dir, outcomes);
  if (json) std::printf("%s\n", records.dump(2).c_str());
  if (failures > 0 && !json) std::printf("\n%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace qlinear::cli
