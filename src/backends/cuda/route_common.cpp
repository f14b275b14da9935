// What the routes of apply share (routes.hpp): activation-quantization arguments and the checks and
// padding of pre-quantized activations.
#include "backends/cuda/routes.hpp"

namespace qlinear::cuda {

ActQuantMode act_mode(const QuantKey& key) {
  if (key.scale.dtype == DType::kE8M0) return ActQuantMode::kMx32;
  if (key.scale.group == kGroup1x128) return ActQuantMode::kDynamicGroup128;
  if (key.scale.group.is_per_token()) return ActQuantMode::kDynamicToken;
  return key.scale.is_static ? ActQuantMode::kStaticTensor : ActQuantMode::kDynamicTensor;
}

ActQuantArgs quant_args(const ApplyCtx& a, const QuantKey& key) {
  ActQuantArgs q;
  q.x = a.x.raw();
  q.x_dtype = a.x.dtype();
  q.m = a.m;
  q.k = a.c.k;
  q.ld_x = a.x.strides()[0];
  q.mode = act_mode(key);
  q.static_scale = a.st.static_input_scale;
  return q;
}

Result<Fp8Activations> quantize_fp8_activations(const ApplyCtx& a, bool per_row) {
  ActQuantArgs q = quant_args(a, *a.c.activation_key);
  Fp8Activations out;
  QL_ASSIGN_OR_RETURN(out.codes, Scratch::make(static_cast<size_t>(a.m * a.st.k_valid), a.stream));
  QL_ASSIGN_OR_RETURN(out.scales, Scratch::make(sizeof(float) * static_cast<size_t>(per_row ? a.m : 1), a.stream));
  q.codes = out.codes.get();
  q.ld_codes = a.st.k_valid;
  q.scale = {out.scales.get(), per_row ? 1 : 0, 0, false};
  if (q.mode == ActQuantMode::kDynamicTensor) {
    QL_ASSIGN_OR_RETURN(out.amax, Scratch::make(sizeof(uint32_t), a.stream));
    q.amax_scratch = out.amax.as<uint32_t>();
  }
  QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));
  return out;
}

Result<const void*> padded_codes(const QuantizedTensor& q, int64_t k_valid, Scratch& pad, Stream stream) {
  const Tensor& d = q.data;
  const int64_t ld = d.strides()[0];
  if (ld == k_valid && d.strides()[1] == 1) return static_cast<const void*>(d.raw());
  if (d.strides()[1] != 1) return Status::error("pre-quantized activation codes must have contiguous rows");
  QL_ASSIGN_OR_RETURN(pad, Scratch::make(static_cast<size_t>(q.rows * k_valid), stream));
  QL_CUDA_CHECK(cudaMemsetAsync(pad.get(), 0, static_cast<size_t>(q.rows * k_valid), stream));
  QL_CUDA_CHECK(cudaMemcpy2DAsync(pad.get(), static_cast<size_t>(k_valid), d.raw(), static_cast<size_t>(ld),
                                  static_cast<size_t>(q.cols), static_cast<size_t>(q.rows), cudaMemcpyDeviceToDevice,
                                  stream));
  return static_cast<const void*>(pad.get());
}

Status expect_quantized_on(const QuantizedTensor& q, int device) {
  QL_RETURN_IF_ERROR(expect_on_device(q.data, device, "pre-quantized activation codes"));
  QL_RETURN_IF_ERROR(expect_on_device(q.scale, device, "pre-quantized activation scales"));
  if (q.scale.dtype() != DType::kF32 || (q.scale.numel() != 1 && q.scale.numel() != q.rows)) {
    return Status::error("pre-quantized activation scales must be f32 [1] or [M, 1], got " + q.scale.describe());
  }
  if (!q.key.symmetric) {
    QL_RETURN_IF_ERROR(expect_on_device(q.zero_point, device, "pre-quantized activation zero points"));
    if (q.zero_point.dtype() != DType::kI32 || (q.zero_point.numel() != 1 && q.zero_point.numel() != q.rows)) {
      return Status::error("pre-quantized activation zero points must be i32 [1] or [M, 1], got " +
                           q.zero_point.describe());
    }
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
