// x86-64 CPU: the kernels tried for a layer on the host CPU, best first.
#include "backends/reference/reference_kernels.hpp"
#if QLINEAR_WITH_X86
#include "backends/x86/x86_kernels.hpp"
#endif
#include "select/priority_lists.hpp"

namespace qlinear::detail {

namespace {
const LinearKernel* const kX86CpuPriority[] = {
#if QLINEAR_WITH_X86
    // INT8 W8A8
    &x86::kAmxInt8,
    &x86::kAvx512VnniInt8,
    &x86::kAvx2Int8,
    // FP8 / MXFP8 / MXFP4 weight-only on AMX-BF16 tiles (M >= 2; M = 1, the AVX-512 kernels' code)
    &x86::kAmxBf16Fp8W8A16,
    &x86::kAmxBf16Mxfp8W8A16,
    &x86::kAmxBf16Mxfp4W4A16,
    // FP8 weight-only (W8A16)
    &x86::kAvx512Bf16Fp8W8A16,
    // MXFP8 weight-only (W8A16)
    &x86::kAvx512Bf16Mxfp8W8A16,
    // MXFP4 weight-only (W4A16)
    &x86::kAvx512Bf16Mxfp4W4A16,
    // FP8 W8A8, MXFP8 / MXFP6 / MXFP4 (MX or FP8 activations, or BF16 after the kernels above) and NVFP4 on
    // AMX-BF16 tiles (M ranges: m_routes; below them, the AVX2 code)
    &x86::kAmxBf16Fp8ScaledMM,
    &x86::kAmxBf16Mxfp8,
    &x86::kAmxBf16Mxfp6,
    &x86::kAmxBf16Mxfp4,
    &x86::kAmxBf16Nvfp4,
    // The same on AVX-512 BF16 + VBMI without AMX (Zen 4 / 5): vdpbf16ps register tiles from M = 2, the same
    // weight stream at M = 1; FP8 128x128 blocks with AMX too (no AMX variant: x86_kernels.hpp says why)
    &x86::kAvx512Bf16Fp8ScaledMM,
    &x86::kAvx512Bf16Fp8BlockScaled,
    &x86::kAvx512Bf16Mxfp8,
    &x86::kAvx512Bf16Mxfp6,
    &x86::kAvx512Bf16Mxfp4,
    &x86::kAvx512Bf16Nvfp4,
    // AVX2 + FMA: every FP8 / MX / NVFP4 family (weight-only paths first, then W8A8, then NVFP4)
    &x86::kAvx2Mxfp8,
    &x86::kAvx2Fp8WeightOnly,
    &x86::kAvx2Mxfp4,
    &x86::kAvx2Mxfp6,
    &x86::kAvx2Fp8ScaledMM,
    &x86::kAvx2Fp8BlockScaled,
    &x86::kAvx2Nvfp4,
#endif
    // Reference: runs anywhere, last for every family.
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

std::span<const LinearKernel* const> x86_cpu_priority() { return kX86CpuPriority; }

}  // namespace qlinear::detail
