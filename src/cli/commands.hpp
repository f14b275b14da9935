#pragma once
// The qlinear subcommands. Each returns the process exit code: 0 success, 1 failure (an error message was
// printed), 2 bad usage.
namespace qlinear::cli {
int cmd_demo(int argc, char** argv);
int cmd_kernels(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_cache(int argc, char** argv);
int cmd_tune(int argc, char** argv);
}  // namespace qlinear::cli
