#include "qlinear/random.hpp"

#include <cmath>
#include <random>

namespace qlinear {

Tensor random_normal(DType dtype, Shape shape, uint64_t seed, double stddev) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  // splitmix64 + Box-Muller: std::normal_distribution is implementation-defined, this is not.
  uint64_t state = seed;
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [&next]() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; };
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double v = stddev * std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
    switch (dtype) {
      case DType::kF64: t.data<double>()[i] = v; break;
      case DType::kF32: t.data<float>()[i] = static_cast<float>(v); break;
      default: t.data<uint16_t>()[i] = static_cast<uint16_t>(encode(dtype, v)); break;
    }
  }
  return t;
}

}  // namespace qlinear
