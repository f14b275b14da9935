#pragma once
// The PTX wrappers and output helpers the mma.sync GEMMs share (mma_decode.cuh, mma_decode_regs.cuh,
// fp8_mma_gemm.cu): cp.async copies, programmatic-launch waits, ldmatrix, and the bias load and one-rounding
// store of their epilogues. Device code only (nvcc).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "qlinear/formats.hpp"

namespace qlinear::cuda::mma_detail {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Weights and scales are read once, yet plain cp.async.cg is used, not the L2::cache_hint form with an
// evict-first createpolicy: nvcc 13.0 emits LDGSTS [R+UR0], desc[UR1] for that form in this kernel (an odd
// uniform register as the 64-bit descriptor), which the H200 rejects as an illegal instruction.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Programmatic dependent launch (sm_90): wait until the grid this one was launched after has completed and
// its writes are visible (returns at once when there is none).
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ double load_bias(const void* bias, DType d, int64_t n) {
  switch (d) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[n]);
    default: return static_cast<const float*>(bias)[n];
  }
}

// Launch attributes the small-M GEMMs share (host side of their cudaLaunchKernelEx calls).
// An L2 access-policy window marking the weights [base, base + bytes) streaming (evict first), clipped to
// the device's largest window: read once, they replace each other rather than lines other kernels left in
// the L2 (mma_decode.cuh says what that saves).
inline cudaLaunchAttribute streaming_window_attr(const void* base, int64_t bytes, int window) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeAccessPolicyWindow;
  attr.val.accessPolicyWindow.base_ptr = const_cast<void*>(base);
  attr.val.accessPolicyWindow.num_bytes = static_cast<size_t>(bytes < window ? bytes : window);
  attr.val.accessPolicyWindow.hitRatio = 1.0f;
  attr.val.accessPolicyWindow.hitProp = cudaAccessPropertyStreaming;
  attr.val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  return attr;
}
// A programmatic dependent launch: the kernel may start while the one before it on the stream finishes
// (it waits with griddepcontrol.wait before reading that kernel's output).
inline cudaLaunchAttribute programmatic_launch_attr() {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

// One rounding of the f64 value to the output dtype (cvt.rn.{bf16,f16,f32}.f64).
__device__ __forceinline__ void store_out(void* out, DType d, int64_t i, double v) {
  switch (d) {
    case DType::kBF16: static_cast<__nv_bfloat16*>(out)[i] = __double2bfloat16(v); break;
    case DType::kF16: static_cast<__half*>(out)[i] = __double2half(v); break;
    default: static_cast<float*>(out)[i] = __double2float_rn(v); break;
  }
}

}  // namespace qlinear::cuda::mma_detail
