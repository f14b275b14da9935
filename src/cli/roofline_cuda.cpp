// measure_cuda_roofline (roofline.hpp): the DRAM read rate and the vendor GEMMs' peaks, measured with the
// benchmark's device method (src/bench/timing.hpp).
#include "cli/roofline.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/cuda_util.hpp"
#include "bench/cuda_anchors.hpp"
#include "bench/timing.hpp"
#include "qlinear/cuda.hpp"
#endif

namespace qlinear::cli {

#if !QLINEAR_WITH_CUDA
Result<Roofline> measure_cuda_roofline(const Platform&) {
  return Status::error("the CUDA roofline needs qlinear built with its CUDA backend");
}
#else
Result<Roofline> measure_cuda_roofline(const Platform& platform) {
  Roofline r;
  QL_ASSIGN_OR_RETURN(auto timer, bench::DeviceTimer::create(platform.cuda ? platform.cuda->index : 0));
  constexpr int64_t kReadBytes = int64_t{4} << 30;
  QL_ASSIGN_OR_RETURN(Tensor buf, cuda::empty(DType::kU8, {kReadBytes}));
  QL_ASSIGN_OR_RETURN(Tensor sink, cuda::empty(DType::kF32, {1}));
  QL_ASSIGN_OR_RETURN(bench::Timing t, timer->time(
                                           [&](int) {
                                             return cuda::l2_flush_read(buf.raw(), static_cast<size_t>(kReadBytes),
                                                                        sink.data<float>(), cuda::current_stream());
                                           },
                                           bench::kMinDeviceReps));
  r.dram_gbps = kReadBytes / (t.median_ms * 1e-3) / 1e9;
  // Peaks: the vendor's GEMMs on a square 8192 problem, where they run closest to the units' limit.
  constexpr int64_t kSide = 8192;
  const double ops = 2.0 * kSide * kSide * kSide;
  auto peak = [&](const char* kind, const char* scheme) -> double {
    auto a = bench::CudaAnchor::create(kind, *find_scheme(scheme), kSide, kSide, *timer);
    if (!a) return 0;
    auto at = (*a)->time(kSide, bench::kMinDeviceReps);
    return at ? ops / (at->median_ms * 1e-3) / 1e9 : 0;
  };
  r.bf16_gflops = peak("bf16", "w8a16-fp8");
  r.fp8_gflops = peak("vendor", "w8a8-fp8-tensor");
  r.int8_gops = peak("vendor", "w8a8-int8-dynamic");
  r.fp32_gflops = 0;
  return r;
}
#endif

}  // namespace qlinear::cli
