#pragma once
// Helpers the CUDA test files share: the sm_90 requirement, fresh seeds, float tensors in other dtypes, the
// benchmarks' comma-separated knobs from the environment.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qlinear/formats.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/tensor.hpp"

// Skips the test, with the reason, unless device 0 is an sm_90 GPU.
#define QL_REQUIRE_SM90()                                                                        \
  do {                                                                                           \
    auto platform_ = ::qlinear::Platform::cuda_device(0);                                        \
    if (!platform_) GTEST_SKIP() << "no CUDA device: " << platform_.message();                   \
    if (platform_->cuda->compute_capability != 90) {                                             \
      GTEST_SKIP() << "needs an sm_90 GPU, found " << platform_->describe();                     \
    }                                                                                            \
  } while (0)

namespace qlinear::cuda_test {

// The comma-separated items of environment variable `name`, or of `dflt` where it is unset or empty.
inline std::vector<std::string> env_strings(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  std::stringstream in(v != nullptr && *v != 0 ? v : dflt);
  std::vector<std::string> out;
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}
inline std::vector<int64_t> env_ints(const char* name, const std::string& dflt) {
  std::vector<int64_t> out;
  for (const std::string& item : env_strings(name, dflt)) out.push_back(std::stoll(item));
  return out;
}

// A different seed for every call of every run (printed by the checks, so a failure can be replayed).
inline uint64_t fresh_seed() {
  static const uint64_t base = std::random_device{}();
  static uint64_t n = 0;
  return base + 1000 * ++n;
}

// An f32 host tensor converted (RNE) to BF16 or F16; F32 copies it.
inline Tensor to_dtype(const Tensor& f32, DType d) {
  Tensor t = Tensor::empty(d, f32.shape());
  const float* p = f32.data<float>();
  for (int64_t i = 0; i < f32.numel(); ++i) {
    switch (d) {
      case DType::kBF16: t.data<uint16_t>()[i] = float_to_bf16(p[i]); break;
      case DType::kF16: t.data<uint16_t>()[i] = float_to_f16(p[i]); break;
      default: t.data<float>()[i] = p[i]; break;
    }
  }
  return t;
}

}  // namespace qlinear::cuda_test
