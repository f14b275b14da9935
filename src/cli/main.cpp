// qlinear: quantized linear layers of LLM checkpoints on x86 CPUs and NVIDIA Hopper GPUs.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"demo", qlinear::cli::cmd_demo, "build a small layer in every scheme, run it, check it against FP64"},
    {"inspect", qlinear::cli::cmd_inspect, "show a checkpoint's layers: schemes, shapes, shards, kernels and why"},
    {"run", qlinear::cli::cmd_run, "load a checkpoint, run each layer with its kernel, check it, time it"},
    {"bench", qlinear::cli::cmd_bench, "time a scheme's kernel with cold weights against an anchor and the roofline"},
    {"quantize", qlinear::cli::cmd_quantize, "quantize a BF16/FP16/FP32 safetensors model into a scheme"},
    {"kernels", qlinear::cli::cmd_kernels, "list kernels and schemes; explain which kernel a layer gets and why"},
    {"tune", qlinear::cli::cmd_tune, "time cuBLASLt algorithms (--decode: decode GEMM routes), write the tuned table"},
    {"cache", qlinear::cli::cmd_cache, "list, verify or clear a processed-weight cache (run --weight-cache DIR)"},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "qlinear — quantized linear layers (FP8, INT8, MXFP8/6/4, NVFP4) on x86 CPUs and Hopper GPUs\n\n"
               "Usage: qlinear <command> [options]   (qlinear <command> --help for its options)\n\nCommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\nEnvironment:\n"
               "  QLINEAR_DISABLED_KERNELS=a,b  skip these kernels in selection\n"
               "  QLINEAR_FORCE_KERNEL=name     use this kernel or fail with its reason\n"
               "  QLINEAR_LOG=dispatch,cache    log kernel selections / weight-cache misses to stderr\n"
               "  QLINEAR_CPU_ISA=avx2|scalar   hide higher x86 ISA levels (testing)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("qlinear 0.1.0\n");
    return 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      try {
        return c.run(argc, argv);
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "qlinear %s: out of memory\n", c.name);
      } catch (const std::length_error& e) {  // a size beyond int64 (Tensor::empty, storage_bytes)
        std::fprintf(stderr, "qlinear %s: too large: %s\n", c.name, e.what());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "qlinear %s: internal error: %s\n", c.name, e.what());
      }
      return 1;
    }
  }
  std::fprintf(stderr, "qlinear: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
