// The FP8 block route of MX layers with quantized MX activations (mx_fp8_block.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>

#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/fp_codec.cuh"
#include "backends/cuda/mma_sync_ptx.cuh"
#include "backends/cuda/mx_fp8_block.hpp"
#include "backends/cuda/mx_fp8_block_math.hpp"
#include "backends/cuda/weight_stream.hpp"

namespace qlinear::cuda {

namespace {

constexpr int kThreads = 256;
using actvec::kVec;
using actvec::load8;

struct ActParams {
  int64_t m, m_run, k, ld_x;
  ActElem elem;
  ActMxRule rule;
  bool vec;
  MxFp8Window window;  // mx_fp8_window(elem)
  int weight_exp_min, weight_exp_max;
  uint8_t* codes;    // [m_run, k]
  float* scales;     // [k / 128, m_run]
  uint32_t* flags;   // [1 + m]: the listed-row count, then one flag per row
  uint32_t* list;    // [m]
};

// A thread takes 8 consecutive elements of a row: 4 lanes make an MX group, 16 lanes a 128 block (K is a
// multiple of 128, so neither straddles rows). Rows m .. m_run - 1 (cuBLASLt's multiple of 16) are zeros.
template <class T>
__global__ void __launch_bounds__(kThreads) mx_fp8_act_kernel(const T* __restrict__ x, const ActParams p) {
  const int64_t chunks = p.k / kVec;
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const bool valid = c < p.m_run * chunks;
  const int64_t r = valid ? c / chunks : 0;
  const int64_t col = valid ? (c % chunks) * kVec : 0;
  float v[kVec] = {};
  if (valid && r < p.m) load8(x + r * p.ld_x, col, p.vec, v);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
  a = actvec::lanes_max(a, 4);  // every lane takes part; lanes past the end carry zeros
  const int e = act_mx_exponent(a, p.elem, p.rule);
  int lo = a > 0.0f ? e : INT_MAX, hi = a > 0.0f ? e : INT_MIN;
#pragma unroll
  for (int o = 4; o <= 8; o *= 2) {
    lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, o));
  }
  int f = 0;
  const bool fits = mx_fp8_activation_block(p.window, lo, hi, p.weight_exp_min, p.weight_exp_max, f);
  if (!valid) return;
  // c x 2^(e - F): exact in E4M3 where the block fits; an all-zero group's codes are zeros whatever e is. A
  // block that does not fit writes zeros (its row is recomputed).
  const ActGrid g = act_grid(p.elem);
  const float shift = fits && a > 0.0f ? act_pow2f(e - f) : 0.0f;
  float y[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) y[i] = act_mx_code_value(v[i], e, g) * shift;
  *reinterpret_cast<uint2*>(p.codes + r * p.k + col) = codec::encode_e4m3x8(y);
  if (threadIdx.x % 16 == 0) {
    p.scales[(col / 128) * p.m_run + r] = fits ? act_pow2f(f) : 1.0f;
    if (!fits && r < p.m && atomicExch(&p.flags[1 + r], 1u) == 0u) p.list[atomicAdd(&p.flags[0], 1u)] = static_cast<uint32_t>(r);
  }
}

struct RepairParams {
  int64_t n, k, ld_x;
  ActElem elem;
  ActMxRule rule;
  bool vec;
  const uint8_t* w;        // E4M3 [n, k]
  const int32_t* blk_exp;  // [ceil(n / 128), k / 128]
  const uint32_t* flags;
  const uint32_t* list;
  const void* bias;
  DType bias_dtype;
  void* out;
  DType out_dtype;
};

// A warp per (up to kRepairRows listed rows, output column): the rows' MX values (as the pass makes them)
// times the exact weights (E4M3 x 2^E, read once for the rows), summed by FP32 FMA, then the bias and one
// rounding. Exits at once with no row listed. A listed row costs CUDA-core work over the whole weight: cheap
// for the rare rows beyond the window, slow where most rows are.
constexpr int kRepairRows = 4;

template <class T>
__global__ void __launch_bounds__(kThreads) mx_fp8_repair_kernel(const T* __restrict__ x, const RepairParams p) {
  const uint32_t count = p.flags[0];
  if (count == 0) return;
  const int lane = threadIdx.x % 32;
  const int64_t groups = (int64_t{count} + kRepairRows - 1) / kRepairRows;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32), kb = p.k / 128;
  const ActGrid g = act_grid(p.elem);
  for (int64_t t = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; t < groups * p.n; t += warps) {
    const int64_t first = (t / p.n) * kRepairRows, n = t % p.n;
    const int rows = static_cast<int>(std::min<int64_t>(kRepairRows, int64_t{count} - first));
    int64_t r[kRepairRows];
#pragma unroll
    for (int j = 0; j < kRepairRows; ++j) r[j] = p.list[first + (j < rows ? j : 0)];
    const uint8_t* wr = p.w + n * p.k;
    const int32_t* er = p.blk_exp + (n / 128) * kb;
    float acc[kRepairRows] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += 32 * kVec) {
      const int64_t col = k0 + lane * kVec;
      float w[kVec] = {};
      if (col < p.k) {
        const uint2 wb = *reinterpret_cast<const uint2*>(wr + col);
        const float ws = act_pow2f(er[col / 128]);
        codec::decode_e4m3x4(wb.x, w);
        codec::decode_e4m3x4(wb.y, w + 4);
#pragma unroll
        for (int i = 0; i < kVec; ++i) w[i] *= ws;
      }
#pragma unroll
      for (int j = 0; j < kRepairRows; ++j) {
        if (j >= rows) break;  // warp-uniform
        float v[kVec] = {};
        if (col < p.k) load8(x + r[j] * p.ld_x, col, p.vec, v);
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
        a = actvec::lanes_max(a, 4);
        const int e = act_mx_exponent(a, p.elem, p.rule);
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[j] = fmaf(act_mx_value(v[i], e, g), w[i], acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kRepairRows; ++j) {
      if (j >= rows) break;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[j] += __shfl_xor_sync(0xFFFFFFFFu, acc[j], o);
      if (lane == 0) {
        const double b = p.bias != nullptr ? mma_detail::load_bias(p.bias, p.bias_dtype, n) : 0.0;
        mma_detail::store_out(p.out, p.out_dtype, r[j] * p.n + n, static_cast<double>(acc[j]) + b);
      }
    }
  }
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <class T>
Status launch_passes(const MxFp8BlockArgs& args, const ActParams& ap, RepairParams rp, int sm_count, bool repair,
                     Stream stream) {
  const T* x = static_cast<const T*>(args.gemm.x);
  if (!repair) {
    const int64_t threads = ap.m_run * (ap.k / kVec);
    mx_fp8_act_kernel<T><<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x, ap);
    QL_CUDA_CHECK_LAUNCH("mx_fp8_act_kernel");
    return Status::ok();
  }
  // Two blocks per SM: enough warps for the rare listed rows, and a quick launch and exit without any.
  mx_fp8_repair_kernel<T><<<static_cast<unsigned>(sm_count * 2), kThreads, 0, stream>>>(x, rp);
  QL_CUDA_CHECK_LAUNCH("mx_fp8_repair_kernel");
  return Status::ok();
}

Status launch_typed(const MxFp8BlockArgs& args, const ActParams& ap, const RepairParams& rp, int sm_count,
                    bool repair, Stream stream) {
  switch (args.x_dtype) {
    case DType::kF32: return launch_passes<float>(args, ap, rp, sm_count, repair, stream);
    case DType::kBF16: return launch_passes<__nv_bfloat16>(args, ap, rp, sm_count, repair, stream);
    case DType::kF16: return launch_passes<__half>(args, ap, rp, sm_count, repair, stream);
    default:
      return Status::error("mx_fp8_block: activations must be f32, bf16 or f16, got " + std::string(name(args.x_dtype)));
  }
}

}  // namespace

Status launch_mx_fp8_block_gemm(const MxFp8BlockArgs& args, Stream stream) {
  const MmaDecodeArgs& a = args.gemm;
  const int64_t m = a.m, n = a.layout.n, k = a.layout.k;
  if (m == 0 || n == 0) return Status::ok();
  if (k % 128 != 0) return Status::error("mx_fp8_block: K=" + std::to_string(k) + " is not a multiple of 128");
  // cuBLASLt's block-scaled mode finds no algorithm unless M is a multiple of 16 (route_cublaslt_fp8.cpp).
  const int64_t m_run = (m + 15) / 16 * 16, kb = k / 128;
  const size_t w_bytes = args.w_fp8 != nullptr ? 0 : aligned(static_cast<size_t>(n * k));
  const size_t codes_bytes = aligned(static_cast<size_t>(m_run * k));
  const size_t scales_bytes = aligned(sizeof(float) * static_cast<size_t>(kb * m_run));
  const size_t flags_bytes = aligned(sizeof(uint32_t) * static_cast<size_t>(1 + m));
  const size_t list_bytes = sizeof(uint32_t) * static_cast<size_t>(m);
  QL_ASSIGN_OR_RETURN(Scratch buf, Scratch::make(w_bytes + codes_bytes + scales_bytes + flags_bytes + list_bytes, stream));
  uint8_t* base = buf.as<uint8_t>();
  uint8_t* w8 = args.w_fp8 != nullptr ? const_cast<uint8_t*>(args.w_fp8) : base;
  uint8_t* codes = base + w_bytes;
  float* scales = reinterpret_cast<float*>(codes + codes_bytes);
  uint32_t* flags = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(scales) + scales_bytes);
  uint32_t* list = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(flags) + flags_bytes);
  QL_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(uint32_t) * static_cast<size_t>(1 + m), stream));

  const size_t x_es = static_cast<size_t>(element_size(args.x_dtype));
  const bool vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && (static_cast<size_t>(a.ld_x) * x_es) % 16 == 0;
  ActParams ap{m, m_run, k, a.ld_x, args.act_elem, args.act_rule, vec, mx_fp8_window(args.act_elem),
               args.weight_exp_min, args.weight_exp_max, codes, scales, flags, list};
  RepairParams rp{n, k, a.ld_x, args.act_elem, args.act_rule, vec, w8, args.blk_exp, flags, list,
                  a.bias, a.bias_dtype, a.out, a.out_dtype};
  const int probe = mma_decode_forced().mx_fp8_probe;
  if (!(probe & kProbeNoPass)) QL_RETURN_IF_ERROR(launch_typed(args, ap, rp, a.sm_count, false, stream));
  if (!(probe & kProbeNoWiden) && args.w_fp8 == nullptr) {
    QL_RETURN_IF_ERROR(mma_detail::widen_fp8(a, args.blk_exp, w8, stream));
  }
  if (probe & kProbeNoGemm) {
    return (probe & kProbeNoRepair) ? Status::ok() : launch_typed(args, ap, rp, a.sm_count, true, stream);
  }

  LtGemm g;
  g.ab_dtype = DType::kF8E4M3;
  g.w = w8;
  g.ld_w = k;
  g.x = codes;
  g.ld_x = k;
  g.m = m_run;
  g.n = n;
  g.k = k;
  g.scale_mode = LtScaleMode::kBlock;
  g.w_scale = args.blk_scale;
  g.x_scale = scales;
  // The bias in cuBLASLt's epilogue where it takes its dtype, else an F32 result and ours; rows past m
  // (the multiple of 16) go to scratch and are dropped.
  const bool lt_bias = a.bias == nullptr || a.bias_dtype == bias_dtype_for(g.ab_dtype, a.out_dtype);
  g.bias = lt_bias ? a.bias : nullptr;
  g.out_dtype = lt_bias ? a.out_dtype : DType::kF32;
  Scratch result;
  if (lt_bias && m_run == m) {
    g.out = a.out;
    QL_RETURN_IF_ERROR(lt_gemm(g, stream));
  } else {
    const size_t es = static_cast<size_t>(element_size(g.out_dtype));
    QL_ASSIGN_OR_RETURN(result, Scratch::make(static_cast<size_t>(m_run * n) * es, stream));
    g.out = result.get();
    QL_RETURN_IF_ERROR(lt_gemm(g, stream));
    if (lt_bias) {
      QL_CUDA_CHECK(cudaMemcpyAsync(a.out, result.get(), static_cast<size_t>(m * n) * es, cudaMemcpyDeviceToDevice, stream));
    } else {
      QL_RETURN_IF_ERROR(launch_bias_epilogue(result.as<float>(), a.bias, a.bias_dtype, a.out, a.out_dtype, m, n, stream));
    }
  }
  if (probe & kProbeNoRepair) return Status::ok();
  return launch_typed(args, ap, rp, a.sm_count, true, stream);
}

}  // namespace qlinear::cuda
