// tune_cublaslt without the CUDA backend: says why it cannot run.
#include "bench/lt_tune.hpp"

#if !QLINEAR_WITH_CUDA
namespace qlinear::bench {

Result<std::vector<LtTuneResult>> tune_cublaslt(const LtTuneOptions&, DeviceTimer&,
                                                const std::function<void(const LtTuneResult&)>&) {
  return Status::error("qlinear tune needs qlinear built with its CUDA backend");
}

}  // namespace qlinear::bench
#endif
