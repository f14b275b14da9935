// tune_mma_decode without the CUDA backend: says why it cannot run.
#include "bench/mma_tune.hpp"

#if !QLINEAR_WITH_CUDA
namespace qlinear::bench {

Result<std::vector<MmaTuneResult>> tune_mma_decode(const MmaTuneOptions&, DeviceTimer&,
                                                   const std::function<void(const MmaTuneResult&)>&) {
  return Status::error("qlinear tune --decode needs qlinear built with its CUDA backend");
}

}  // namespace qlinear::bench
#endif
