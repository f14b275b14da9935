// CUDA: the kernels tried for a layer on a CUDA device, best first; each GPU kernel declines compute
// capabilities it was not built for in its is_supported.
#include "backends/reference/reference_kernels.hpp"
#include "select/priority_lists.hpp"
#if QLINEAR_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/mma_decode_kernels.hpp"
#endif

namespace qlinear::detail {

namespace {
const LinearKernel* const kCudaPriority[] = {
#if QLINEAR_WITH_CUDA
    // sm_90a (each declines other compute capabilities): hybrid routes first, pure cuBLASLt after.
    &cuda::kSm90Fp8ScaledMM,
    &cuda::kCublasLtFp8ScaledMM,
    &cuda::kSm90Fp8ScaledMMWgmma,
    &cuda::kSm90Fp8ScaledMMMma,
    &cuda::kSm90Fp8ScaledMMStream,
    &cuda::kSm90Fp8BlockScaled,
    &cuda::kCublasLtFp8BlockScaled,
    &cuda::kSm90Fp8BlockScaledStream,
    &cuda::kSm90Int8ScaledMM,
    &cuda::kSm90Int8ScaledMMWgmma,
    // Weight-only: the tensor-core decode kernels (built for M <= 64, correct for every M) ahead of the
    // streaming / BF16-GEMM hybrids, which take the layers they decline (non-BF16 activations, W8A8 MX).
    &cuda::kSm90MmaDecodeFp8WeightOnly,
    &cuda::kSm90Fp8WeightOnly,
    &cuda::kSm90Fp8WeightOnlyBf16,
    &cuda::kSm90Fp8WeightOnlyStream,
    &cuda::kSm90MmaDecodeMxfp8,
    &cuda::kSm90Mxfp8,
    &cuda::kSm90Mxfp8Bf16,
    &cuda::kSm90Mxfp8Stream,
    &cuda::kSm90MmaDecodeMxfp6,
    &cuda::kSm90Mxfp6,
    &cuda::kSm90Mxfp6Bf16,
    &cuda::kSm90Mxfp6Stream,
    &cuda::kSm90MmaDecodeMxfp4,
    &cuda::kSm90Mxfp4,
    &cuda::kSm90Mxfp4Bf16,
    &cuda::kSm90Mxfp4Stream,
    &cuda::kSm90MmaDecodeNvfp4,
#endif
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
