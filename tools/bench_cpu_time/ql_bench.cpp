// Times one qlinear layer: median wall and process-CPU ms per apply (BF16 activations and output).
// usage: ql_bench SCHEME KERNEL|auto N K M[,M..] REPS
#include <time.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
using namespace qlinear;
static double now(clockid_t c) { timespec t; clock_gettime(c, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int argc, char** argv) {
  if (argc < 7) return 2;
  const Scheme* s = find_scheme(argv[1]);
  const int64_t n = atoll(argv[3]), k = atoll(argv[4]);
  const int reps = atoi(argv[6]);
  MakeLayerOptions opt; opt.input_dtype = DType::kBF16; opt.out_dtype = DType::kBF16;
  auto layer = quantize_layer("bench", *s, random_normal(DType::kF32, {n, k}, 1, 0.05), opt);
  if (!layer) { fprintf(stderr, "%s\n", layer.message().c_str()); return 1; }
  const LinearKernel* kern = std::string(argv[2]) == "auto" ? *select_kernel(layer->config, Platform::host_cpu()) : find_kernel(argv[2]);
  if (!kern->process_weights_after_loading(*layer)) return 1;
  std::stringstream ms(argv[5]); std::string tok;
  while (std::getline(ms, tok, ',')) {
    const int64_t m = atoll(tok.c_str());
    Tensor x = random_normal(DType::kBF16, {m, k}, 2, 1.0);
    Tensor y = Tensor::empty(DType::kBF16, {m, n});
    for (int i = 0; i < 3; ++i) (void)kern->apply(*layer, Activation::dense(x), nullptr, y);
    std::vector<double> w, c;
    for (int r = 0; r < reps; ++r) {
      const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
      (void)kern->apply(*layer, Activation::dense(x), nullptr, y);
      w.push_back(now(CLOCK_MONOTONIC) - w0); c.push_back(now(CLOCK_PROCESS_CPUTIME_ID) - c0);
    }
    std::sort(w.begin(), w.end()); std::sort(c.begin(), c.end());
    printf("{\"tool\":\"qlinear\",\"scheme\":\"%s\",\"kernel\":\"%s\",\"n\":%ld,\"k\":%ld,\"m\":%ld,\"wall_med\":%.4f,\"wall_min\":%.4f,\"cpu_med\":%.4f,\"cpu_min\":%.4f}\n",
           argv[1], std::string(kern->name()).c_str(), n, k, m, w[reps / 2], w[0], c[reps / 2], c[0]);
  }
}
