#pragma once
// What every command that reads a checkpoint shares: the CKPT argument, --layers, --tp-rank/--tp-size and
// --platform, parsed and checked one way, and the checkpoint loaded with them.
#include <vector>

#include "cli/args.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/platform.hpp"

namespace qlinear::cli {

// The option specs to append to a command's own.
std::vector<OptionSpec> checkpoint_option_specs();

struct CheckpointInput {
  LoadOptions options;
  Platform platform;
  LoadedModel model;
};

// Parses the shared options and loads CKPT. On failure prints "qlinear <command>: <why>" and returns the
// exit code (2: bad usage, 1: the checkpoint could not be loaded); 0 on success.
int load_checkpoint_input(const Args& args, const char* command, CheckpointInput& out);

}  // namespace qlinear::cli
