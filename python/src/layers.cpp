// Layers from Python: load, quantize, process once, apply to borrowed arrays with the GIL released.
#include <string>
#include <vector>

#include "bindings.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/make_layer.hpp"
#if QLINEAR_WITH_CUDA
#include "qlinear/cuda.hpp"
#endif

namespace qlinear::python {

namespace {
MxScaleRule parse_mx_rule(const std::string& text) {
  if (text == "ceil_over_max") return MxScaleRule::kCeilOverMax;
  if (text == "floor_log2") return MxScaleRule::kFloorLog2;
  if (text == "ocp") return MxScaleRule::kOcp;
  if (text == "quark_even") return MxScaleRule::kQuarkEven;
  throw Error("quantize_layer: unknown mx_rule '" + text + "'; expected ceil_over_max, floor_log2, ocp or quark_even");
}
}  // namespace

KernelRef process(Layer& self, const std::optional<std::string>& kernel_name, const std::optional<Platform>& platform,
                  const std::vector<std::string>& disabled, const std::string& force, bool read_env) {
  if (self.kernel != nullptr) {
    throw Error(self.where() + " was already processed by " + std::string(self.kernel->name()) +
                "; process() runs once per layer");
  }
  const Platform p = platform_or_host(platform);
  const LinearKernel* k = nullptr;
  if (kernel_name) {
    k = kernel_by_name(*kernel_name).k;
    const Verdict v = k->is_supported(p);
    if (!v) {
      throw Error(self.where() + ": kernel " + *kernel_name + " does not run on " + p.describe() + ": " + v.reason);
    }
  } else {
    k = unwrap(select_kernel(self.layer.config, p, select_options(disabled, force, read_env)));
  }
  {
    nb::gil_scoped_release release;
    check(k->process_weights_after_loading(self.layer));
  }
  // A CUDA platform's list ends with the reference kernels, which are host code on host tensors: a kernel
  // that runs on a CPU without any ISA extension is such host code.
  const bool on_cuda = p.kind == PlatformKind::kCuda && !k->is_supported(Platform::synthetic_cpu({}));
  self.device = on_cuda ? Device{DeviceKind::kCuda, p.cuda ? p.cuda->index : 0} : Device{DeviceKind::kCpu, 0};
  if (on_cuda && self.bias.defined()) {
#if QLINEAR_WITH_CUDA
    self.device_bias = unwrap(cuda::to_device(self.bias, self.device.index));
#endif
  }
  self.kernel = k;
  self.platform = p;
  return {k};
}

// y = x W^T (+ bias) into `out`. x and out are borrowed (NumPy, PyTorch, ... through DLPack).
void apply_into(const Layer& self, const InArray& x, const OutArray& out, const std::optional<InArray>& bias,
                bool use_layer_bias, std::optional<uintptr_t> stream, const std::optional<InArray>& row_amax) {
  if (self.kernel == nullptr) {
    throw Error(self.where() + " is not processed: call process() (it selects a kernel) before applying it");
  }
  Tensor xt = borrow(x, "apply: x");
  Tensor ot = borrow(out, "apply: out");
  const Device want = self.device;
  const bool on_cuda = want.kind == DeviceKind::kCuda;
  if (xt.device() != want || ot.device() != want) {
    throw Error("apply to " + self.where() + ": its kernel " + std::string(self.kernel->name()) + " runs on " +
                want.to_string() + ", got x on " + xt.device().to_string() + " and out on " +
                ot.device().to_string());
  }
  // An optional operand borrowed on the layer's device.
  auto borrow_on_device = [&](const std::optional<InArray>& a, const char* what) {
    if (!a) return Tensor();
    Tensor t = borrow(*a, (std::string("apply: ") + what).c_str());
    if (t.device() != want) {
      throw Error("apply to " + self.where() + ": " + what + " on " + t.device().to_string() + ", expected " +
                  want.to_string());
    }
    return t;
  };
  Tensor bt = borrow_on_device(bias, "bias");
  if (!bias && use_layer_bias) bt = on_cuda ? self.device_bias : self.bias;
  const Tensor amax = borrow_on_device(row_amax, "row_amax");
  const Tensor* b = bt.defined() ? &bt : nullptr;
  nb::gil_scoped_release release;
  auto run = [&] {
    if (!amax.defined()) return check(self.kernel->apply(self.layer, Activation::dense(xt), b, ot));
    QuantizedTensor q = unwrap(self.kernel->quantize_input(self.layer, xt, amax));
    check(self.kernel->apply(self.layer, Activation::quantized(std::move(q), xt.dtype()), b, ot));
  };
#if QLINEAR_WITH_CUDA
  if (on_cuda && stream) {
    cuda::StreamGuard guard(reinterpret_cast<cuda::Stream>(*stream));
    run();
    return;
  }
#else
  (void)stream;
#endif
  run();
}

std::vector<Layer> load(const std::string& path, int tp_rank, int tp_size, const std::string& layers, bool fuse,
                        const std::string& input_dtype, const std::string& out_dtype, std::string& quant_method,
                        std::vector<std::string>& unquantized) {
  LoadOptions o;
  o.tp_rank = tp_rank;
  o.tp_size = tp_size;
  o.layer_regex = layers;
  o.fuse = fuse;
  o.input_dtype = parse_dtype(input_dtype, "load_checkpoint: input_dtype");
  o.out_dtype = parse_dtype(out_dtype, "load_checkpoint: out_dtype");
  Result<LoadedModel> loaded = [&] {
    nb::gil_scoped_release release;
    return load_checkpoint(path, o);
  }();
  LoadedModel m = unwrap(std::move(loaded));
  quant_method = std::string(quant_method_name(m.config.quant_method));
  unquantized = m.unquantized;
  std::vector<Layer> out;
  for (LoadedLayer& l : m.layers) {
    Layer py;
    py.layer = std::move(l.layer);
    py.bias = l.bias;
    py.scheme = l.scheme;
    py.parallelism = l.parallelism == Parallelism::kColumn ? "column" : "row";
    py.shards = l.shards;
    py.full_n = l.full_n;
    py.full_k = l.full_k;
    py.checkpoint_bytes = l.checkpoint_bytes;
    out.push_back(std::move(py));
  }
  return out;
}


Layer quantize_dense(const std::string& name, const std::string& scheme, const InArray& weight,
                     const std::optional<InArray>& bias, float input_min, float input_max,
                     bool dynamic_input_global_scale, const std::string& mx_rule, const std::vector<int64_t>& logical_widths,
                     const std::string& input_dtype, const std::string& out_dtype) {
  const Scheme& s = scheme_by_name(scheme);
  MakeLayerOptions o;
  o.input_min = input_min;
  o.input_max = input_max;
  o.dynamic_input_global_scale = dynamic_input_global_scale;
  o.mx_rule = parse_mx_rule(mx_rule);
  o.logical_widths = logical_widths;
  o.input_dtype = parse_dtype(input_dtype, "quantize_layer: input_dtype");
  o.out_dtype = parse_dtype(out_dtype, "quantize_layer: out_dtype");
  const Tensor w = borrow(weight, "quantize_layer: weight");
  if (w.device().kind != DeviceKind::kCpu) {
    throw Error("quantize_layer: weight is on " + w.device().to_string() + "; pass a host (CPU) array");
  }
  // The layer must not keep views of the caller's array: it owns what it holds (hence the clone).
  Result<LinearLayer> made = [&] {
    nb::gil_scoped_release release;
    return quantize_layer(name, s, w.clone(), o);
  }();
  Layer py;
  py.layer = unwrap(std::move(made));
  if (bias) {
    const Tensor b = borrow(*bias, "quantize_layer: bias");
    if (b.device().kind != DeviceKind::kCpu || b.rank() != 1 || b.size(0) != py.layer.config.n) {
      throw Error("quantize_layer: bias must be a host array of shape [" + std::to_string(py.layer.config.n) +
                  "], got " + b.describe() + " on " + b.device().to_string());
    }
    py.bias = b.clone();
  }
  py.scheme = &s;
  py.full_n = py.layer.config.n;
  py.full_k = py.layer.config.k;
  return py;
}

}  // namespace qlinear::python
