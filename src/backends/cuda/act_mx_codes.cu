// The activation pass of the QGMMA decode GEMM (qgmma_decode.hpp, launch_act_mx_codes): the MX quantization
// of act_quant_bf16.cu (the same shared exponent and grid rounding, act_quant_bf16_math.hpp), written as
// E4M3 codes of value x 2^-kQgmmaActShift in the permuted K order of qgmma_slot_of_k, and E8M0 exponents.
//
// Each thread takes 8 consecutive elements (lane i of the 4 lanes of a 32-group takes K 8i .. 8i+7); by
// qgmma_slot_of_k those land as four 2-byte pairs at slots 16 (i / 2) + 4p + 2 (i % 2), p = 0..3, so lanes
// i and i ^ 1 trade two pairs with one shuffle and each stores 8 contiguous bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/qgmma_decode.hpp"

namespace qlinear::cuda {

namespace {

constexpr int kThreads = 256;
using actvec::kVec;

struct Params {
  int64_t m, k, ld_x;
  ActElem elem;
  ActMxRule rule;
  bool vec;
  uint8_t* codes;
  uint8_t* scales;
};

__device__ __forceinline__ uint32_t e4m3_byte(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

template <class T>
__global__ void __launch_bounds__(kThreads) act_mx_codes_kernel(const T* __restrict__ x, const Params p) {
  // The GEMM after this pass may start now (programmatic dependent launch): it loads its first weights and
  // waits for this grid before it reads the codes.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int64_t chunks_per_row = p.k / kVec;
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const bool valid = c < p.m * chunks_per_row;
  const int64_t r = valid ? c / chunks_per_row : 0;
  const int64_t col = valid ? (c % chunks_per_row) * kVec : 0;
  float v[kVec] = {};
  if (valid) actvec::load8(x + r * p.ld_x, col, p.vec, v);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
  a = actvec::lanes_max(a, 4);  // every lane takes part; lanes past the end carry zeros
  const ActGrid grid = act_grid(p.elem);
  const int e = act_mx_exponent(a, p.elem, p.rule);
  uint32_t pair[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float lo = act_mx_code_value(v[2 * q], e, grid) * 0x1p-6f;  // exact: the grid values fit E4M3
    const float hi = act_mx_code_value(v[2 * q + 1], e, grid) * 0x1p-6f;
    pair[q] = e4m3_byte(lo) | (e4m3_byte(hi) << 8);
  }
  static_assert(kQgmmaActShift == 6, "the codes above are scaled by 2^-6");
  const int i = threadIdx.x % 4;  // this thread's K eighth of the group
  const bool upper = (i & 1) != 0;
  // Lane 2j sends its pairs 2, 3 (bytes 8..15 of the 16-byte half belong to its partner), lane 2j+1 its 0, 1.
  const uint32_t send = upper ? (pair[0] | (pair[1] << 16)) : (pair[2] | (pair[3] << 16));
  const uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, send, 1);
  if (!valid) return;
  uint2 out;
  if (!upper) {
    out.x = pair[0] | (got << 16);
    out.y = pair[1] | (got & 0xFFFF0000u);
  } else {
    out.x = (got & 0xFFFFu) | (pair[2] << 16);
    out.y = (got >> 16) | (pair[3] << 16);
  }
  const int64_t group_col = col - 8 * i;
  *reinterpret_cast<uint2*>(p.codes + r * p.k + group_col + 16 * (i / 2) + 8 * (i & 1)) = out;
  if (i == 0) p.scales[r * (p.k / 32) + group_col / 32] = static_cast<uint8_t>(e + 127);
}

template <class T>
Status launch_typed(const ActMxCodesArgs& a, Stream stream) {
  Params p{};
  p.m = a.m;
  p.k = a.k;
  p.ld_x = a.ld_x;
  p.elem = a.elem;
  p.rule = a.rule;
  p.vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && (a.ld_x * sizeof(T)) % 16 == 0;
  p.codes = a.codes;
  p.scales = a.scales;
  const int64_t chunks = a.m * (a.k / kVec);
  const unsigned blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  act_mx_codes_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(a.x), p);
  QL_CUDA_CHECK_LAUNCH("act_mx_codes_kernel");
  return Status::ok();
}

}  // namespace

Status launch_act_mx_codes(const ActMxCodesArgs& a, Stream stream) {
  if (a.m == 0 || a.k == 0) return Status::ok();
  if (a.k % 32 != 0) {
    return Status::error("act_mx_codes: K=" + std::to_string(a.k) + " is not a multiple of 32 (the MX block)");
  }
  if (a.elem != ActElem::kE2M1) {
    return Status::error("act_mx_codes: the FP8 tensor-core kernel takes E2M1 activations only (MXFP4, W4A4)");
  }
  if (reinterpret_cast<uintptr_t>(a.codes) % 8 != 0) return Status::error("act_mx_codes: codes must be 8-byte aligned");
  switch (a.x_dtype) {
    case DType::kF32: return launch_typed<float>(a, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(a, stream);
    case DType::kF16: return launch_typed<__half>(a, stream);
    default:
      return Status::error("act_mx_codes: activations must be f32, bf16 or f16, got " + std::string(name(a.x_dtype)));
  }
}

}  // namespace qlinear::cuda
