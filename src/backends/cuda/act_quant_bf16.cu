// The fused activation pass (act_quant_bf16.hpp). Memory-bound: each thread takes 8 consecutive elements
// of a row (one 16-byte load of BF16/F16 where the rows are aligned) and writes their 8 BF16 values as one
// 16-byte store. A 1x32 MX block is 4 consecutive lanes and a 1x16 NVFP4 block 2, so the block's |x| max
// is a shuffle reduction inside the warp (K is a multiple of the block, so blocks never straddle rows).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/act_quant_bf16.hpp"
#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/mma_epilogue_math.hpp"

namespace qlinear::cuda {

namespace {

constexpr int kThreads = 256;
using actvec::kVec;
using actvec::load8;

struct Params {
  int64_t m, k, ld_x, ld_out;
  ActBf16Mode mode;
  ActElem elem;
  ActMxRule rule;
  float static_scale, global_scale;
  const uint32_t* dynamic_amax;  // kNvfp4 dynamic: the call's |x| max as f32 bits, else null
  bool vec;
  __nv_bfloat16* out;
  MmaFactor* factor;
};

template <class T>
__global__ void __launch_bounds__(kThreads) act_quant_bf16_kernel(const T* __restrict__ x, const Params p) {
  // The GEMM after this pass may start now (programmatic dependent launch, mma_decode.cuh): it streams its
  // first weights and waits for this grid's completion before it reads the values written here.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int64_t chunks_per_row = p.k / kVec;
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const bool valid = c < p.m * chunks_per_row;
  const int64_t r = valid ? c / chunks_per_row : 0;
  const int64_t col = valid ? (c % chunks_per_row) * kVec : 0;
  float v[kVec] = {};
  if (valid) load8(x + r * p.ld_x, col, p.vec, v);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
  // Every lane takes part in the shuffles; lanes past the end carry zeros.
  const int lanes = p.mode == ActBf16Mode::kMx32 ? 4 : (p.mode == ActBf16Mode::kNvfp4 ? 2 : 1);
  a = actvec::lanes_max(a, lanes);
  double g = p.global_scale;
  if (p.mode == ActBf16Mode::kNvfp4 && p.dynamic_amax != nullptr) {
    g = act_nvfp4_dynamic_global(__uint_as_float(*p.dynamic_amax));
  }
  if (c == 0 && p.factor != nullptr) {
    *p.factor = p.mode == ActBf16Mode::kFp8Static ? mma_multiplier(p.static_scale) : mma_nvfp4_activation_factor(g);
  }
  if (!valid) return;
  __align__(16) __nv_bfloat16 o[kVec];
  if (p.mode == ActBf16Mode::kMx32) {
    const ActGrid grid = act_grid(p.elem);
    const int e = act_mx_exponent(a, p.elem, p.rule);
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[i] = __float2bfloat16_rn(act_mx_value(v[i], e, grid));
  } else if (p.mode == ActBf16Mode::kFp8Static) {
    const ActGrid grid = act_grid(ActElem::kE4M3);
    const double s = p.static_scale;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      o[i] = __float2bfloat16_rn(static_cast<float>(act_round_f64(static_cast<double>(v[i]) / s, grid)));
    }
  } else {
    const double sf = act_nvfp4_block_scale(static_cast<double>(a), g);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      o[i] = __float2bfloat16_rn(static_cast<float>(act_nvfp4_element(static_cast<double>(v[i]), g, sf) * sf));
    }
  }
  *reinterpret_cast<uint4*>(p.out + r * p.ld_out + col) = *reinterpret_cast<const uint4*>(o);
}

// |x| max over the whole [m, k] into *amax (non-negative floats order like their bit patterns).
template <class T>
__global__ void __launch_bounds__(kThreads) act_amax_kernel(const T* __restrict__ x, int64_t m, int64_t k,
                                                            int64_t ld_x, bool vec, uint32_t* amax) {
  const int64_t chunks_per_row = k / kVec, total = m * chunks_per_row;
  float a = 0.0f;
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < total; c += int64_t{gridDim.x} * kThreads) {
    float v[kVec];
    load8(x + (c / chunks_per_row) * ld_x, (c % chunks_per_row) * kVec, vec, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
  }
  a = actvec::lanes_max(a, 32);
  if (threadIdx.x % 32 == 0) atomicMax(amax, __float_as_uint(a));
}

template <class T>
Status launch_typed(const ActBf16Args& a, Stream stream) {
  const T* x = static_cast<const T*>(a.x);
  Params p{};
  p.m = a.m;
  p.k = a.k;
  p.ld_x = a.ld_x;
  p.ld_out = a.ld_out;
  p.mode = a.mode;
  p.elem = a.elem;
  p.rule = a.rule;
  p.static_scale = a.static_scale;
  p.global_scale = a.global_scale;
  p.vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && (a.ld_x * sizeof(T)) % 16 == 0;
  p.out = static_cast<__nv_bfloat16*>(a.out);
  p.factor = a.factor;
  const int64_t chunks = a.m * (a.k / kVec);
  if (a.mode == ActBf16Mode::kNvfp4 && a.dynamic_global) {
    if (a.amax_scratch == nullptr) return Status::error("act_quant_bf16: a dynamic NVFP4 global scale needs amax scratch");
    QL_CUDA_CHECK(cudaMemsetAsync(a.amax_scratch, 0, sizeof(uint32_t), stream));
    const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((chunks + kThreads - 1) / kThreads, 1, 132 * 8));
    act_amax_kernel<T><<<blocks, kThreads, 0, stream>>>(x, a.m, a.k, a.ld_x, p.vec, a.amax_scratch);
    QL_CUDA_CHECK_LAUNCH("act_amax_kernel");
    p.dynamic_amax = a.amax_scratch;
  }
  const unsigned blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  act_quant_bf16_kernel<T><<<blocks, kThreads, 0, stream>>>(x, p);
  QL_CUDA_CHECK_LAUNCH("act_quant_bf16_kernel");
  return Status::ok();
}

}  // namespace

Status launch_act_quant_bf16(const ActBf16Args& a, Stream stream) {
  if (a.m == 0 || a.k == 0) return Status::ok();
  const int64_t block = a.mode == ActBf16Mode::kMx32 ? 32 : (a.mode == ActBf16Mode::kNvfp4 ? 16 : kVec);
  if (a.k % block != 0) {
    return Status::error("act_quant_bf16: K=" + std::to_string(a.k) + " is not a multiple of " +
                         std::to_string(block) + " (the quantization block / 8-element chunks)");
  }
  if (a.ld_out < a.k || a.ld_out % kVec != 0 || reinterpret_cast<uintptr_t>(a.out) % 16 != 0) {
    return Status::error("act_quant_bf16: the BF16 output needs 16-byte aligned rows of at least K elements");
  }
  if (a.mode != ActBf16Mode::kMx32 && a.factor == nullptr) {
    return Status::error("act_quant_bf16: FP8 and NVFP4 activations need a device factor to write");
  }
  switch (a.x_dtype) {
    case DType::kF32: return launch_typed<float>(a, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(a, stream);
    case DType::kF16: return launch_typed<__half>(a, stream);
    default:
      return Status::error("act_quant_bf16: activations must be f32, bf16 or f16, got " + std::string(name(a.x_dtype)));
  }
}

}  // namespace qlinear::cuda
