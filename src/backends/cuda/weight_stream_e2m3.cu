// The e2m3 instantiations of the weight-streaming kernel (weight_stream.cuh).
#include "backends/cuda/weight_stream.cuh"

namespace qlinear::cuda::stream_detail {
template Status launch_format<WeightFormat::kE2M3>(const WeightStreamArgs&, int, int64_t, int64_t, int64_t, Stream);
}  // namespace qlinear::cuda::stream_detail
