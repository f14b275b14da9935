#pragma once
// Runs one quantized layer the way the run, bench and demo commands measure it: select a kernel, process
// the weights (several copies when the weights must come cold from memory), time apply with the method of
// the device (src/bench/timing.hpp), and check the output against the reference kernel on the same
// quantized inputs.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "qlinear/registry.hpp"

namespace qlinear::cli {

struct Measurement {
  int64_t m = 0;
  double median_ms = 0;
  double min_ms = 0;
  double host_us = -1;     // CUDA: the host-side cost of one apply call (bench::Timing::host_us)
  int reps = 0;
  std::string note;        // bench::Timing::note: why fewer repetitions than asked
  double tflops = 0;       // 2 M N K / median
  double weight_gbps = 0;  // checkpoint bytes of the weight and its scales / median
  double rel_err = -1;     // ||y - y_ref|| / ||y_ref|| against the reference kernel; -1 when not checked
};

class LayerRunner {
 public:
  // How a copy is processed: process_weights_after_loading unless given (run --weight-cache imports).
  using ProcessFn = std::function<Status(LinearLayer& layer, const LinearKernel& kernel)>;
  // `copies` processed copies are rotated so that each call reads its weights from memory, not cache;
  // kCopiesForMethod: as many as the device's method needs (bench::cold_copies_for on the CPU,
  // DeviceTimer::device_copies_for on CUDA).
  static constexpr int kCopiesForMethod = 0;
  static Result<std::unique_ptr<LayerRunner>> create(const LinearLayer& layer, const Tensor& bias,
                                                     const Platform& platform, const SelectOptions& select,
                                                     int copies, const ProcessFn& process = {});
  const LinearKernel& kernel() const { return *kernel_; }
  int64_t weight_bytes() const { return weight_bytes_; }
  // Times `reps` calls at M tokens (bench::time_host on the CPU, the DeviceTimer on CUDA: at least
  // bench::kMinDeviceReps); checks against the reference when asked.
  Result<Measurement> measure(int64_t m, int reps, bool check, uint64_t seed);

 private:
  LinearLayer original_;  // unprocessed, for the reference
  Tensor bias_;
  Platform platform_;
  const LinearKernel* kernel_ = nullptr;
  std::vector<LinearLayer> copies_;
  std::unique_ptr<bench::DeviceTimer> timer_;  // CUDA only
  int64_t weight_bytes_ = 0;
};

// A deep copy of a layer's tensors (kernels may rewrite what they are given).
LinearLayer clone_layer(const LinearLayer& layer);
// ||a - b|| / ||b|| over all elements of two host tensors.
double relative_error(const Tensor& a, const Tensor& b);

}  // namespace qlinear::cli
