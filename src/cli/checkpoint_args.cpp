#include "cli/checkpoint_args.hpp"

#include <cstdio>

#include "cli/platform_option.hpp"

namespace qlinear::cli {

std::vector<OptionSpec> checkpoint_option_specs() {
  return {
      {"--layers", "REGEX", "only layers whose name matches"},
      {"--tp-rank", "R", "tensor-parallel rank to load (default 0)"},
      {"--tp-size", "W", "tensor-parallel size (default 1)"},
      {"--platform", "P", "cpu (default), cuda, cuda:N; inspect also takes sm80, sm90, avx512, avx2"},
  };
}

int load_checkpoint_input(const Args& args, const char* command, CheckpointInput& out) {
  auto fail = [command](int code, const std::string& why) {
    std::fprintf(stderr, "qlinear %s: %s\n", command, why.c_str());
    return code;
  };
  if (args.positional().empty()) return fail(2, "missing CKPT (a checkpoint directory or .safetensors file)");
  auto rank = args.get_int("--tp-rank", 0, 0, kMaxTensorParallel - 1);
  auto size = args.get_int("--tp-size", 1, 1, kMaxTensorParallel);
  if (!rank) return fail(2, rank.message());
  if (!size) return fail(2, size.message());
  if (*rank >= *size) {
    return fail(2, "--tp-rank " + std::to_string(*rank) + " must be below --tp-size " + std::to_string(*size));
  }
  auto platform = parse_platform(args.get_or("--platform", "cpu"));
  if (!platform) return fail(2, platform.message());
  out.platform = *platform;
  out.options.tp_rank = static_cast<int>(*rank);
  out.options.tp_size = static_cast<int>(*size);
  out.options.layer_regex = args.get_or("--layers", "");
  auto model = load_checkpoint(args.positional()[0], out.options);
  if (!model) return fail(1, model.message());
  // The layers' tensors may be views of the mapped files (run processes them, inspect reads them): a file
  // replaced or truncated while loading is an error, not a SIGBUS later (safetensors.hpp, LIMITATION).
  if (Status s = model->checkpoint.verify_unchanged(); !s) return fail(1, s.message());
  out.model = std::move(*model);
  return 0;
}

}  // namespace qlinear::cli
