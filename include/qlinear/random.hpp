#pragma once
// Seeded random tensors for the demo, benchmarks and tests (deterministic for a seed on every machine).
#include <cstdint>

#include "qlinear/tensor.hpp"

namespace qlinear {

// Normal(0, stddev) values rounded to `dtype` (F32, BF16, F16 or F64).
Tensor random_normal(DType dtype, Shape shape, uint64_t seed, double stddev = 1.0);

}  // namespace qlinear
