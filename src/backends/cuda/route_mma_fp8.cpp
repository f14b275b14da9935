// Route kMma for FP8 W8A8 per-tensor / per-channel at small M: activations quantized on the GPU (or taken
// pre-quantized), then the FP8 mma.sync GEMM (fp8_mma_gemm.hpp) on the weights the cuBLASLt route keeps,
// launched as a programmatic dependent of the quantizer so that its first weight loads overlap it.
#include "backends/cuda/fp8_mma_gemm.hpp"
#include "backends/cuda/routes.hpp"

namespace qlinear::cuda {

namespace {

Fp8MmaArgs gemm_args(const ApplyCtx& a, const void* codes, const float* x_scale, bool per_row) {
  Fp8MmaArgs g;
  g.w = static_cast<const uint8_t*>(a.st.w.raw());
  g.ld_w = a.st.row_bytes;
  g.w_scale = static_cast<const float*>(a.st.w_scale.raw());  // one f32 per row (layer_state.hpp)
  g.x = static_cast<const uint8_t*>(codes);
  g.ld_x = a.st.k_valid;
  g.x_scale = x_scale;
  g.x_scale_stride = per_row ? 1 : 0;
  g.m = a.m;
  g.n = a.c.n;
  g.k = a.st.k_valid;
  g.bias = a.bias ? a.bias->raw() : nullptr;
  g.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  g.out = a.out.raw();
  g.out_dtype = a.out.dtype();
  g.sm_count = a.st.sm_count;
  return g;
}

}  // namespace

Status apply_mma_fp8(const ApplyCtx& a) {
  const int64_t kl = a.st.k_valid;
  if (a.pre != nullptr) {
    const QuantizedTensor& q = *a.pre;
    Scratch pad;
    QL_ASSIGN_OR_RETURN(const void* codes, padded_codes(q, kl, pad, a.stream));
    return launch_fp8_mma_gemm(gemm_args(a, codes, static_cast<const float*>(q.scale.raw()), q.scale.numel() != 1),
                               a.stream);
  }
  const bool per_row = a.c.activation_key->scale.group.is_per_token();
  QL_ASSIGN_OR_RETURN(const Fp8Activations q, quantize_fp8_activations(a, per_row));
  Fp8MmaArgs g = gemm_args(a, q.codes.get(), q.scales.as<float>(), per_row);
  g.programmatic = true;
  return launch_fp8_mma_gemm(g, a.stream);
}

}  // namespace qlinear::cuda
