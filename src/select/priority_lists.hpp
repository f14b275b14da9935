#pragma once
// The priority lists, one per platform, best first, reference last. Defined in priority_<platform>.cpp;
// reordering a backend is a one-line diff there.
#include <span>

#include "qlinear/kernel.hpp"

namespace qlinear::detail {
std::span<const LinearKernel* const> x86_cpu_priority();
std::span<const LinearKernel* const> cuda_priority();
}  // namespace qlinear::detail
