// Host side of the weight-streaming kernel: tile and split choice, split-K workspace and finalize.
#include "backends/cuda/weight_stream.cuh"

namespace qlinear::cuda {

namespace stream_detail {
extern template Status launch_format<WeightFormat::kE4M3>(const WeightStreamArgs&, int, int64_t, int64_t, int64_t, Stream);
extern template Status launch_format<WeightFormat::kE2M3>(const WeightStreamArgs&, int, int64_t, int64_t, int64_t, Stream);
extern template Status launch_format<WeightFormat::kE3M2>(const WeightStreamArgs&, int, int64_t, int64_t, int64_t, Stream);
extern template Status launch_format<WeightFormat::kE2M1>(const WeightStreamArgs&, int, int64_t, int64_t, int64_t, Stream);

namespace {
__global__ void finalize_kernel(const float* ws, const void* bias, DType bias_dtype, void* out, DType out_dtype,
                                int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    float y = ws[i];
    if (bias != nullptr) y += load_bias(bias, bias_dtype, i % n);
    store_out(out, out_dtype, i, y);
  }
}
}  // namespace
}  // namespace stream_detail

Status launch_weight_stream(const WeightStreamArgs& a, Stream stream) {
  using namespace stream_detail;
  if (a.m == 0 || a.n == 0) return Status::ok();
  if (a.ld_x % kStreamStepElems != 0 || a.ld_x < a.k_valid) {
    return Status::error("weight_stream: activation rows of " + std::to_string(a.ld_x) +
                         " floats are not a whole number of 1024-element steps covering K");
  }
  const int mt = a.m <= 1 ? 1 : a.m <= 2 ? 2 : a.m <= 4 ? 4 : 8;
  int rows = 0;
  switch (a.format) {
    case WeightFormat::kE4M3: rows = rows_per_block<WeightFormat::kE4M3>(); break;
    case WeightFormat::kE2M3: rows = rows_per_block<WeightFormat::kE2M3>(); break;
    case WeightFormat::kE3M2: rows = rows_per_block<WeightFormat::kE3M2>(); break;
    case WeightFormat::kE2M1: rows = rows_per_block<WeightFormat::kE2M1>(); break;
  }
  const int64_t bx = (a.n + rows - 1) / rows, by = (a.m + mt - 1) / mt;
  const int64_t steps = a.ld_x / kStreamStepElems;
  if (bx > 0x7FFFFFFF || by > 65535) return Status::error("weight_stream: grid too large");
  switch (a.format) {
    case WeightFormat::kE4M3: return launch_format<WeightFormat::kE4M3>(a, mt, bx, by, steps, stream);
    case WeightFormat::kE2M3: return launch_format<WeightFormat::kE2M3>(a, mt, bx, by, steps, stream);
    case WeightFormat::kE3M2: return launch_format<WeightFormat::kE3M2>(a, mt, bx, by, steps, stream);
    case WeightFormat::kE2M1: return launch_format<WeightFormat::kE2M1>(a, mt, bx, by, steps, stream);
  }
  return Status::error("weight_stream: unknown weight format");
}

namespace stream_detail {
Status finish_split(const WeightStreamArgs& a, const float* workspace, Stream stream) {
  return launch_bias_epilogue(workspace, a.bias, a.bias_dtype, a.out, a.out_dtype, a.m, a.n, stream);
}
}  // namespace stream_detail

Status launch_bias_epilogue(const float* acc, const void* bias, DType bias_dtype, void* out, DType out_dtype,
                            int64_t m, int64_t n, Stream stream) {
  if (m * n == 0) return Status::ok();
  const int64_t blocks = std::min<int64_t>((m * n + 255) / 256, 132 * 8);
  stream_detail::finalize_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(acc, bias, bias_dtype, out,
                                                                                    out_dtype, m, n);
  QL_CUDA_CHECK_LAUNCH("finalize_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
