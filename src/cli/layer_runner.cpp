#include "cli/layer_runner.hpp"

#include <algorithm>
#include <cmath>

#include "qlinear/random.hpp"
#if QLINEAR_WITH_CUDA
#include "qlinear/cuda.hpp"
#endif

namespace qlinear::cli {

LinearLayer clone_layer(const LinearLayer& layer) {
  LinearLayer copy = layer;
  for (auto& [name, t] : copy.params) t = t.clone();
  return copy;
}

double relative_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = element_as_double(a, i), y = element_as_double(b, i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  if (std::isnan(num)) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

Result<std::unique_ptr<LayerRunner>> LayerRunner::create(const LinearLayer& layer, const Tensor& bias,
                                                         const Platform& platform, const SelectOptions& select,
                                                         int copies, const ProcessFn& process) {
  auto r = std::make_unique<LayerRunner>();
  r->original_ = layer;
  r->bias_ = bias;
  r->platform_ = platform;
  QL_ASSIGN_OR_RETURN(r->kernel_, select_kernel(layer.config, platform, select));
  for (const auto& [name, t] : layer.params) r->weight_bytes_ += t.nbytes();
  if (platform.kind == PlatformKind::kCuda) {
#if QLINEAR_WITH_CUDA
    QL_ASSIGN_OR_RETURN(r->timer_, bench::DeviceTimer::create(platform.cuda->index));
#else
    return Status::error("a CUDA platform in a build without the CUDA backend");
#endif
  }
  if (copies == kCopiesForMethod) {
    copies = r->timer_ ? r->timer_->device_copies_for(r->weight_bytes_) : bench::cold_copies_for(r->weight_bytes_);
  }
  for (int i = 0; i < copies; ++i) {
    LinearLayer c = clone_layer(layer);
    QL_RETURN_IF_ERROR(process ? process(c, *r->kernel_) : r->kernel_->process_weights_after_loading(c));
    r->copies_.push_back(std::move(c));
  }
  return r;
}

Result<Measurement> LayerRunner::measure(int64_t m, int reps, bool check, uint64_t seed) {
  if (reps < 1) return Status::error("measure: at least one repetition is needed, got " + std::to_string(reps));
  const LinearConfig& c = original_.config;
  const Tensor x_host = bench::random_rows(c.input_dtype, m, c.k, seed, 1.0);
  Tensor x = x_host, bias = bias_, out;
  const bool on_gpu = platform_.kind == PlatformKind::kCuda;
#if QLINEAR_WITH_CUDA
  if (on_gpu) {
    QL_ASSIGN_OR_RETURN(x, cuda::to_device(x_host, platform_.cuda->index));
    if (bias_.defined()) {
      QL_ASSIGN_OR_RETURN(bias, cuda::to_device(bias_, platform_.cuda->index));
    }
    QL_ASSIGN_OR_RETURN(out, cuda::empty(c.out_dtype, {m, c.n}, platform_.cuda->index));
  }
#endif
  if (!on_gpu) out = Tensor::empty(c.out_dtype, {m, c.n});
  const Activation act = Activation::dense(x);
  const Tensor* b = bias.defined() ? &bias : nullptr;
  const bench::TimedCall call = [&](int rep) { return kernel_->apply(copies_[rep % copies_.size()], act, b, out); };
  bench::Timing t;
  if (timer_) {
    QL_ASSIGN_OR_RETURN(t, timer_->time(call, reps, static_cast<int>(copies_.size())));
  } else {
    QL_ASSIGN_OR_RETURN(t, bench::time_host(call, reps));
  }
  Measurement ms;
  ms.m = m;
  ms.median_ms = t.median_ms;
  ms.min_ms = t.min_ms;
  ms.host_us = t.host_us;
  ms.reps = t.reps;
  ms.note = t.note;
  ms.tflops = 2.0 * m * c.n * c.k / (ms.median_ms * 1e-3) / 1e12;
  ms.weight_gbps = weight_bytes_ / (ms.median_ms * 1e-3) / 1e9;
  if (check) {
    Tensor got = out;
#if QLINEAR_WITH_CUDA
    if (on_gpu) {
      QL_ASSIGN_OR_RETURN(got, cuda::to_host(out));
    }
#endif
    const LinearKernel* ref = find_kernel("reference_" + std::string(family_name(c.family)));
    LinearLayer ref_layer = original_;
    ref_layer.processed_by.clear();
    ref_layer.kernel_state.reset();
    QL_RETURN_IF_ERROR(ref->process_weights_after_loading(ref_layer));
    QL_ASSIGN_OR_RETURN(Tensor want, ref->apply(ref_layer, Activation::dense(x_host), bias_.defined() ? &bias_ : nullptr));
    ms.rel_err = relative_error(got, want);
  }
  return ms;
}

}  // namespace qlinear::cli
