#pragma once
// Shared pieces of the weight-cache and pre-quantized-activation tests: the host's kernels per scheme, layers
// made by the x86 harness, outputs compared byte for byte, scratch directories.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "qlinear/registry.hpp"
#include "x86/x86_test_util.hpp"

namespace qlinear::cache_test {

// The host CPU's kernels that support and can implement `config`, in priority order (reference included).
inline std::vector<const LinearKernel*> host_kernels_for(const LinearConfig& config, const Platform& host) {
  std::vector<const LinearKernel*> out;
  for (const LinearKernel* k : priority_list(host)) {
    if (k->family() == config.family && k->is_supported(host) && k->can_implement(config)) out.push_back(k);
  }
  return out;
}

// One layer per scheme at a shape with padding in N (40 = 2.5 panels of 16) and two 128-blocks of K.
inline LinearLayer scheme_layer(const Scheme& s, uint64_t seed, std::vector<int64_t> shards = {}) {
  x86_test::Case c{5, 40, 256};
  c.shards = std::move(shards);
  LinearLayer layer = x86_test::make_layer(s, c, seed);
  layer.name = "model.layers.0.test_" + std::string(s.name);
  return layer;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

// A fresh directory under the test temp dir, removed at destruction.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::path(::testing::TempDir()) / ("qlinear_cache_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string str() const { return path.string(); }
};

}  // namespace qlinear::cache_test
