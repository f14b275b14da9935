// CudaLinearKernel::quantize_input (cuda_kernels.hpp): dynamic per-token symmetric FP8 / INT8 activations
// quantized on the GPU with given row maxima, as a tensor-parallel row layer needs.
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "backends/cuda/routes.hpp"

namespace qlinear::cuda {

Result<QuantizedTensor> CudaLinearKernel::quantize_input(const LinearLayer& layer, const Tensor& x,
                                                         const Tensor& row_amax) const {
  const LinearConfig& c = layer.config;
  const std::optional<QuantKey> takes = input_quant_key(c);
  const bool per_token = takes && !takes->scale.is_static && takes->scale.group.is_per_token() && takes->symmetric &&
                         (takes->dtype == DType::kF8E4M3 || takes->dtype == DType::kI8);
  if (!per_token) {
    return Status::error("layer " + layer.name + ": kernel " + std::string(name()) +
                         " quantizes with given row maxima only for dynamic per-token symmetric FP8/INT8 activations");
  }
  const QuantKey& key = *takes;
  const int64_t m = x.size(0);
  if (x.rank() != 2 || x.size(1) != c.k || x.strides()[1] != 1) {
    return Status::error("layer " + layer.name + ": input must be [M, " + std::to_string(c.k) +
                         "] with contiguous rows, got " + x.describe());
  }
  const int dev = x.device().index;
  QL_RETURN_IF_ERROR(expect_on_device(x, dev, "activation"));
  QL_RETURN_IF_ERROR(expect_on_device(row_amax, dev, "row maxima"));
  if (row_amax.dtype() != DType::kF32 || row_amax.numel() != m) {
    return Status::error("layer " + layer.name + ": row maxima must be f32 [" + std::to_string(m) + "], got " +
                         row_amax.describe());
  }
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(dev));
  const Stream stream = current_stream();
  QuantizedTensor q;
  q.key = key;
  q.rows = m;
  q.cols = c.k;
  QL_ASSIGN_OR_RETURN(q.data, empty_on_stream(key.dtype, {m, c.k}, dev, stream));
  QL_ASSIGN_OR_RETURN(q.scale, empty_on_stream(DType::kF32, {m, 1}, dev, stream));
  if (key.dtype == DType::kI8) {
    Int8QuantArgs a;
    a.x = x.raw();
    a.x_dtype = x.dtype();
    a.m = m;
    a.k = c.k;
    a.ld_x = x.strides()[0];
    a.mode = Int8ActMode::kDynamicTokenSym;
    a.codes = static_cast<int8_t*>(q.data.raw());
    a.ld_codes = c.k;
    a.scales = q.scale.data<float>();
    a.row_amax = row_amax.data<float>();
    QL_RETURN_IF_ERROR(launch_int8_act_quant(a, stream));
  } else {
    ActQuantArgs a;
    a.x = x.raw();
    a.x_dtype = x.dtype();
    a.m = m;
    a.k = c.k;
    a.ld_x = x.strides()[0];
    a.mode = ActQuantMode::kDynamicToken;
    a.codes = q.data.raw();
    a.ld_codes = c.k;
    a.scale = {q.scale.raw(), 1, 0, false};
    a.row_amax = row_amax.data<float>();
    QL_RETURN_IF_ERROR(launch_act_quant(a, stream));
  }
  return q;
}

}  // namespace qlinear::cuda
