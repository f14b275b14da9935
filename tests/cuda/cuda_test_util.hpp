#pragma once
// Helpers the CUDA test files share: the sm_90 requirement, fresh seeds, float tensors in other dtypes, the
// benchmarks' comma-separated knobs from the environment, filled and random-code tensors, MX weight scales
// relabelled as e8m0, the quantized-activation element formats as dtypes and keys. No CUDA headers: the
// host-only tests use it too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/act_quant_bf16_math.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/quant_key.hpp"
#include "qlinear/scheme.hpp"
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

// quantize_layer stores MX weight scales as u8 bytes while the layer contract asks for e8m0: the same bytes,
// relabelled where the scheme's weight scales are E8M0.
inline void relabel_mx_weight_scales(const Scheme& scheme, LinearLayer& layer) {
  Tensor& ws = layer.params["weight_scale"];
  if (scheme.weight_key.scale.dtype == DType::kE8M0 && ws.dtype() == DType::kU8) {
    ws = Tensor::from_blob(ws.raw(), DType::kE8M0, ws.shape(), ws.owner());
  }
}

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

// An f32 host tensor of `shape` holding v everywhere.
inline Tensor f32_filled(Shape shape, float v) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return t;
}

// rows x cols pseudo-random one-byte codes of dtype d (xorshift from seed); E4M3's NaN codes replaced by 0x3C
// (1.5).
inline Tensor random_codes(DType d, int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::empty(d, {rows, cols});
  uint64_t st = seed | 1;
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    p[i] = static_cast<uint8_t>(st);
    if (d == DType::kF8E4M3 && (p[i] & 0x7F) == 0x7F) p[i] = 0x3C;
  }
  return t;
}
inline Tensor e4m3_codes(int64_t rows, int64_t cols, uint64_t seed) {
  return random_codes(DType::kF8E4M3, rows, cols, seed);
}

// The dtype of a quantized-activation element format, and its dynamic MX key (E8M0 per 32).
inline DType act_elem_dtype(cuda::ActElem e) {
  switch (e) {
    case cuda::ActElem::kE4M3: return DType::kF8E4M3;
    case cuda::ActElem::kE2M3: return DType::kF6E2M3;
    case cuda::ActElem::kE3M2: return DType::kF6E3M2;
    default: return DType::kF4E2M1;
  }
}
inline QuantKey act_elem_mx_key(cuda::ActElem e) {
  switch (e) {
    case cuda::ActElem::kE4M3: return kMxfp8Dynamic;
    case cuda::ActElem::kE2M3: return kMxfp6E2M3Dynamic;
    case cuda::ActElem::kE3M2: return kMxfp6E3M2Dynamic;
    default: return kMxfp4Dynamic;
  }
}

}  // namespace qlinear::cuda_test
