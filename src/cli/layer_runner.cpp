#include "cli/layer_runner.hpp"

#include <algorithm>
#include <chrono>
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

int cold_copies_for(int64_t bytes) {
  constexpr int64_t kColdBytes = int64_t{256} << 20;  // 8x a 32 MiB L3 (anchors/CPU.md method)
  return static_cast<int>(std::clamp<int64_t>((kColdBytes + bytes - 1) / std::max<int64_t>(bytes, 1), 1, 64));
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
  const Tensor x_host = random_normal(c.input_dtype, {m, c.k}, seed, 1.0);
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
  auto sync = [&]() -> Status {
#if QLINEAR_WITH_CUDA
    if (on_gpu) return cuda::synchronize();
#endif
    return Status::ok();
  };
  const Activation act = Activation::dense(x);
  const Tensor* b = bias.defined() ? &bias : nullptr;
  QL_RETURN_IF_ERROR(kernel_->apply(copies_[0], act, b, out));  // warm-up (and first-call allocations)
  QL_RETURN_IF_ERROR(sync());
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const LinearLayer& layer = copies_[(i + 1) % copies_.size()];
    const auto t0 = std::chrono::steady_clock::now();
    QL_RETURN_IF_ERROR(kernel_->apply(layer, act, b, out));
    QL_RETURN_IF_ERROR(sync());
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  Measurement ms;
  ms.m = m;
  ms.median_ms = times[times.size() / 2];
  ms.min_ms = times.front();
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
