// The public device operations of qlinear/cuda.hpp that are kernels (row |x| max, bias-and-round epilogue):
// argument checks, then the backend's launchers.
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/weight_stream.hpp"

namespace qlinear::cuda {

Status row_abs_max(const Tensor& x, Tensor& amax) {
  if (x.rank() != 2 || x.device().kind != DeviceKind::kCuda || x.strides()[1] != 1) {
    return Status::error("row_abs_max: x must be a [M, K] device tensor with contiguous rows, got " + x.describe());
  }
  QL_RETURN_IF_ERROR(expect_on_device(amax, x.device().index, "row_abs_max output"));
  if (amax.dtype() != DType::kF32 || amax.numel() != x.size(0) || !amax.is_contiguous()) {
    return Status::error("row_abs_max: the output must be contiguous f32 [" + std::to_string(x.size(0)) + "], got " +
                         amax.describe());
  }
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(x.device().index));
  return launch_row_amax(x.raw(), x.dtype(), x.size(0), x.size(1), x.strides()[0], amax.data<float>(),
                         current_stream());
}

Status add_bias_and_round(const Tensor& partial, const Tensor* bias, Tensor& out) {
  if (partial.rank() != 2 || partial.dtype() != DType::kF32 || !partial.is_contiguous() ||
      partial.device().kind != DeviceKind::kCuda) {
    return Status::error("add_bias_and_round: the partial sum must be a contiguous f32 [M, N] device tensor, got " +
                         partial.describe());
  }
  const int device = partial.device().index;
  QL_RETURN_IF_ERROR(expect_on_device(out, device, "add_bias_and_round output"));
  if (out.shape() != partial.shape() || !out.is_contiguous()) {
    return Status::error("add_bias_and_round: the output must be contiguous " + partial.describe() + " in shape, got " +
                         out.describe());
  }
  if (bias != nullptr) {
    QL_RETURN_IF_ERROR(expect_on_device(*bias, device, "add_bias_and_round bias"));
    if (bias->numel() != partial.size(1) || !bias->is_contiguous()) {
      return Status::error("add_bias_and_round: the bias must be contiguous [" + std::to_string(partial.size(1)) +
                           "], got " + bias->describe());
    }
  }
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(device));
  return launch_bias_epilogue(partial.data<float>(), bias ? bias->raw() : nullptr, bias ? bias->dtype() : DType::kF32,
                              out.raw(), out.dtype(), partial.size(0), partial.size(1), current_stream());
}

}  // namespace qlinear::cuda
