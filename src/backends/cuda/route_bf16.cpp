// Route kDequantBf16 (MX and FP8 weight-only): weight row blocks widened exactly to BF16 (dequant_bf16.hpp),
// MXFP8 activations quantized then widened likewise, cuBLASLt BF16 GEMM with FP32 accumulation.
#include <algorithm>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/routes.hpp"

namespace qlinear::cuda {

// kDequantBf16: per block of weight rows, the codes widened to BF16 (MX scales folded in exactly), then a
// cuBLASLt BF16 GEMM writing that column block of the output. Row scales (FP8 weight-only) and bias dtypes
// cuBLASLt's epilogue does not take go through an FP32 block and our epilogue.
Status apply_dequant_bf16(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const LayerState& st = a.st;
  const int64_t m = a.m, k_ld = round_up(st.k_valid, 8);
  const bool mx = st.scale_kind == WeightScale::kMx32;

  // Activations as BF16: given (A16), or MXFP8 codes widened with their scales.
  const void* xb = a.x.raw();
  int64_t ld_x = a.x.strides()[0];
  Scratch x_codes, x_scales, x_bf16;
  if (c.activation_key) {
    ActQuantArgs q = quant_args(a, *c.activation_key);
    const int64_t groups = c.k / 32;
    QL_ASSIGN_OR_RETURN(x_codes, Scratch::make(static_cast<size_t>(m * c.k), a.stream));
    QL_ASSIGN_OR_RETURN(x_scales, Scratch::make(static_cast<size_t>(m * groups), a.stream));
    QL_ASSIGN_OR_RETURN(x_bf16, Scratch::make(static_cast<size_t>(m * c.k * 2), a.stream));
    q.codes = x_codes.get();
    q.ld_codes = c.k;
    q.scale = {x_scales.get(), groups, 1, false};
    QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));
    DequantArgs d;
    d.format = WeightFormat::kE4M3;
    d.scale_kind = DequantScale::kMx32;
    d.codes = x_codes.as<uint8_t>();
    d.row_bytes = c.k;
    d.scales = x_scales.as<uint8_t>();
    d.ld_scales = groups;
    d.rows = m;
    d.k = c.k;
    d.out = x_bf16.get();
    d.ld_out = c.k;
    QL_RETURN_IF_ERROR(launch_dequant_bf16(d, a.stream));
    xb = x_bf16.get();
    ld_x = c.k;
  }

  // Row blocks of at most 32 MiB of BF16 weights (and a multiple of 128 rows).
  const int64_t block = std::min<int64_t>(c.n, std::max<int64_t>(128, (int64_t{32} << 20) / (2 * k_ld) / 128 * 128));
  QL_ASSIGN_OR_RETURN(Scratch wb, Scratch::make(static_cast<size_t>(block * k_ld * 2), a.stream));
  const bool lt_bias = a.bias == nullptr || a.bias->dtype() == a.out.dtype();
  const bool direct = mx && lt_bias;
  Scratch acc;
  if (!direct) {
    QL_ASSIGN_OR_RETURN(acc, Scratch::make(static_cast<size_t>(m * block * 4), a.stream));
  }
  const size_t out_es = static_cast<size_t>(element_size(a.out.dtype()));
  const size_t bias_es = a.bias ? static_cast<size_t>(element_size(a.bias->dtype())) : 0;
  for (int64_t n0 = 0; n0 < c.n; n0 += block) {
    const int64_t nc = std::min(block, c.n - n0);
    DequantArgs d;
    d.format = st.format;
    d.scale_kind = mx ? DequantScale::kMx32 : DequantScale::kNone;
    d.codes = static_cast<const uint8_t*>(st.w.raw()) + n0 * st.row_bytes;
    d.row_bytes = st.row_bytes;
    d.scales = mx ? static_cast<const uint8_t*>(st.w_scale.raw()) + n0 * st.ws_ld : nullptr;
    d.ld_scales = st.ws_ld;
    d.rows = nc;
    d.k = st.k_valid;
    d.out = wb.get();
    d.ld_out = k_ld;
    QL_RETURN_IF_ERROR(launch_dequant_bf16(d, a.stream));
    LtGemm g;
    g.ab_dtype = DType::kBF16;
    g.w = wb.get();
    g.ld_w = k_ld;
    g.x = xb;
    g.ld_x = ld_x;
    g.m = m;
    g.n = nc;
    g.k = c.k;
    if (direct) {
      g.out = static_cast<uint8_t*>(a.out.raw()) + n0 * out_es;
      g.out_dtype = a.out.dtype();
      g.ld_out = c.n;
      g.bias = a.bias ? static_cast<const uint8_t*>(a.bias->raw()) + n0 * bias_es : nullptr;
      QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
      continue;
    }
    g.out = acc.get();
    g.out_dtype = DType::kF32;
    QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
    EpilogueScales scales;
    if (!mx) scales.col_f32 = static_cast<const float*>(st.w_scale.raw()) + n0;
    QL_RETURN_IF_ERROR(launch_scale_bias_epilogue(
        acc.as<float>(), m, nc, scales, a.bias ? static_cast<const uint8_t*>(a.bias->raw()) + n0 * bias_es : nullptr,
        a.bias ? a.bias->dtype() : DType::kF32, static_cast<uint8_t*>(a.out.raw()) + n0 * out_es, a.out.dtype(), c.n,
        a.stream));
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
