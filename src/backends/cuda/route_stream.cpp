// Route kStream: the weight-streaming CUDA-core kernel (weight_stream.hpp) for every M. Activations are
// widened to f32, or quantized to codes held as f32 with their scales, then streamed against the weights.
#include "backends/cuda/routes.hpp"
#include "backends/cuda/weight_stream.hpp"

namespace qlinear::cuda {

Status apply_stream(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const int64_t ld = stream_ld_x(c.k);
  QL_ASSIGN_OR_RETURN(Scratch xf, Scratch::make(sizeof(float) * a.m * ld, a.stream));
  WeightStreamArgs s;
  s.format = a.st.format;
  s.scale_kind = a.st.scale_kind;
  s.w = static_cast<const uint8_t*>(a.st.w.raw());
  s.w_row_bytes = a.st.row_bytes;
  s.w_scale = a.st.w_scale.raw();
  s.ws_ld = a.st.ws_ld;
  s.ws_row = a.st.ws_row.defined() ? a.st.ws_row.data<int32_t>() : nullptr;
  s.k_valid = a.st.k_valid;
  s.x = xf.as<float>();
  s.ld_x = ld;
  s.bias = a.bias ? a.bias->raw() : nullptr;
  s.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  s.out = a.out.raw();
  s.out_dtype = a.out.dtype();
  s.m = a.m;
  s.n = c.n;
  s.sm_count = a.st.sm_count;

  Scratch scales, amax;
  if (!c.activation_key) {
    QL_RETURN_IF_ERROR(launch_widen_to_f32(a.x.raw(), a.x.dtype(), a.m, c.k, a.x.strides()[0], xf.as<float>(), ld,
                                           a.stream));
  } else {
    ActQuantArgs q = quant_args(a, *c.activation_key);
    q.codes = xf.get();
    q.codes_as_float = true;
    q.ld_codes = ld;
    int64_t count = 1;
    switch (q.mode) {
      case ActQuantMode::kStaticTensor:
      case ActQuantMode::kDynamicTensor: q.scale = {nullptr, 0, 0, false}; break;
      case ActQuantMode::kDynamicToken: count = a.m; q.scale = {nullptr, 1, 0, false}; break;
      case ActQuantMode::kDynamicGroup128: {
        const int64_t g = (c.k + 127) / 128;
        count = a.m * g;
        q.scale = {nullptr, g, 1, false};
        break;
      }
      case ActQuantMode::kMx32: {
        const int64_t g = c.k / 32;
        count = a.m * g;
        q.scale = {nullptr, g, 1, true};
        break;
      }
    }
    QL_ASSIGN_OR_RETURN(scales, Scratch::make(sizeof(float) * count, a.stream));
    q.scale.scales = scales.get();
    if (q.mode == ActQuantMode::kDynamicTensor) {
      QL_ASSIGN_OR_RETURN(amax, Scratch::make(sizeof(uint32_t), a.stream));
      q.amax_scratch = amax.as<uint32_t>();
    }
    QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));
    s.x_scale = scales.as<float>();
    s.xs_m = q.scale.m_stride;
    s.xs_g = q.scale.g_stride;
  }
  return launch_weight_stream(s, a.stream);
}

}  // namespace qlinear::cuda
