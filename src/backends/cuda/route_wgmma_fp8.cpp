// Route kWgmma for FP8 W8A8 per-tensor / per-channel: activations quantized on the GPU (or taken
// pre-quantized), then the own persistent wgmma GEMM (wgmma_fp8_gemm.hpp) with the scales, the bias and
// the output rounding in its epilogue.
#include "backends/cuda/routes.hpp"
#include "backends/cuda/wgmma_fp8_gemm.hpp"

namespace qlinear::cuda {

namespace {

// The activation quantization inside the GEMM (its producer warpgroup's idle warps) instead of a kernel
// before it.
constexpr bool kFusedQuantization = true;

WgmmaFp8Args gemm_args(const ApplyCtx& a, const void* codes, const float* x_scale, bool per_row) {
  WgmmaFp8Args g;
  g.x = codes;
  g.ld_x = a.st.k_valid;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.m = a.m;
  g.n = a.c.n;
  g.k = a.st.k_valid;
  g.x_scale = x_scale;
  g.x_scale_per_row = per_row;
  g.w_scale_per_col = !a.st.scalar_weight_scale;
  g.w_scale = static_cast<const float*>(g.w_scale_per_col ? a.st.w_scale.raw() : a.st.w_scale_scalar.raw());
  g.bias = a.bias ? a.bias->raw() : nullptr;
  g.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  g.out = a.out.raw();
  g.out_dtype = a.out.dtype();
  g.ld_out = a.c.n;
  return g;
}

// BF16 activations with static per-tensor or per-token scales, rows the bulk copies can read: the GEMM
// quantizes them itself (wgmma_quant.cuh).
bool fusable(const ApplyCtx& a, ActQuantMode mode) {
  return kFusedQuantization && a.x.dtype() == DType::kBF16 && a.x.strides()[1] == 1 && a.c.k % 8 == 0 &&
         a.x.strides()[0] % 8 == 0 && reinterpret_cast<uintptr_t>(a.x.raw()) % 16 == 0 &&
         (mode == ActQuantMode::kStaticTensor || mode == ActQuantMode::kDynamicToken);
}

}  // namespace

Status apply_wgmma_fp8(const ApplyCtx& a) {
  const int64_t kl = a.st.k_valid;
  if (a.pre != nullptr) {
    const QuantizedTensor& q = *a.pre;
    Scratch pad;
    QL_ASSIGN_OR_RETURN(const void* codes, padded_codes(q, kl, pad, a.stream));
    const bool per_row = q.scale.numel() != 1;
    return launch_wgmma_fp8_gemm(gemm_args(a, codes, static_cast<const float*>(q.scale.raw()), per_row), a.stream);
  }
  const QuantKey& key = *a.c.activation_key;
  const bool per_row = key.scale.group.is_per_token();
  if (fusable(a, act_mode(key))) {
    QL_ASSIGN_OR_RETURN(Scratch codes, Scratch::make(static_cast<size_t>(a.m * kl), a.stream));
    QL_ASSIGN_OR_RETURN(Scratch scales, Scratch::make(sizeof(float) * static_cast<size_t>(per_row ? a.m : 1), a.stream));
    const int64_t blocks = (a.m + 127) / 128;
    QL_ASSIGN_OR_RETURN(Scratch ready, Scratch::make(sizeof(int) * static_cast<size_t>(blocks), a.stream));
    QL_CUDA_CHECK(cudaMemsetAsync(ready.get(), 0, sizeof(int) * static_cast<size_t>(blocks), a.stream));
    WgmmaFp8Args g = gemm_args(a, codes.get(), scales.as<float>(), per_row);
    g.k = a.c.k;  // the codes past K are never written: the tensor map reads zeros there
    g.q_mode = per_row ? WgmmaFp8Args::FusedQuant::kToken : WgmmaFp8Args::FusedQuant::kStatic;
    g.q_src = a.x.raw();
    g.q_ld_src = a.x.strides()[0];
    g.q_static_scale = a.st.static_input_scale;
    g.ready = ready.as<int>();
    return launch_wgmma_fp8_gemm(g, a.stream);
  }
  QL_ASSIGN_OR_RETURN(const Fp8Activations q, quantize_fp8_activations(a, per_row));
  WgmmaFp8Args g = gemm_args(a, q.codes.get(), q.scales.as<float>(), per_row);
  g.pdl = true;  // the GEMM's blocks set up while the quantization finishes
  return launch_wgmma_fp8_gemm(g, a.stream);
}

}  // namespace qlinear::cuda
