// The e3m2 instantiations of the weight-streaming kernel (weight_stream.cuh).
#include "backends/cuda/weight_stream.cuh"

namespace qlinear::cuda::stream_detail {
template Status launch_format<WeightFormat::kE3M2>(const WeightStreamArgs&, int, int64_t, int64_t, int64_t, Stream);
}  // namespace qlinear::cuda::stream_detail
