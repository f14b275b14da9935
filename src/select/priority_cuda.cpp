// CUDA: the kernels tried for a layer on a CUDA device, best first; each GPU kernel declines compute
// capabilities it was not built for in its is_supported.
#include "backends/reference/reference_kernels.hpp"
#include "select/priority_lists.hpp"

namespace qlinear::detail {

namespace {
const LinearKernel* const kCudaPriority[] = {
    // Reference: host code on host tensors, last for every family.
    &reference::kFp8ScaledMM,
    &reference::kInt8ScaledMM,
    &reference::kFp8BlockScaled,
    &reference::kFp8WeightOnly,
    &reference::kMxfp8,
    &reference::kMxfp6,
    &reference::kMxfp4,
    &reference::kNvfp4,
};
}  // namespace

std::span<const LinearKernel* const> cuda_priority() { return kCudaPriority; }

}  // namespace qlinear::detail
