// The checks every kernel shares, done once here so a kernel's own code starts from valid inputs:
// process refuses an invalid or already-processed layer; apply refuses a layer processed by another kernel,
// wrong shapes and dtypes, and a pre-quantized activation made with another key.
#include "qlinear/kernel.hpp"

#include "qlinear/activation_quant.hpp"
#include "qlinear/log.hpp"

namespace qlinear {

std::optional<QuantKey> LinearKernel::input_quant_key(const LinearConfig&) const { return std::nullopt; }

std::string MRoute::range() const {
  if (m_max == kNoLimit) return "M " + std::to_string(m_min) + "+";
  if (m_max == m_min) return "M " + std::to_string(m_min);
  return "M " + std::to_string(m_min) + ".." + std::to_string(m_max);
}

std::vector<MRoute> LinearKernel::m_routes(const LinearConfig&) const {
  return {MRoute{1, MRoute::kNoLimit, std::string(name()), ""}};
}

std::string_view LinearKernel::apply_route(const LinearLayer&, const Activation&) const { return name(); }

// Host kernels: the host producer (activation_quant.hpp) with the kernel's own key.
Result<QuantizedTensor> LinearKernel::quantize_input(const LinearLayer& layer, const Tensor& x,
                                                     const Tensor& row_amax) const {
  return quantize_activation_with_row_amax(*this, layer, x, row_amax);
}

Status LinearKernel::process_weights_after_loading(LinearLayer& layer) const {
  const std::string where = "layer " + (layer.name.empty() ? std::string("<unnamed>") : layer.name);
  if (!layer.processed_by.empty()) {
    return Status::error(where + " was already processed by " + layer.processed_by +
                         "; process_weights_after_loading runs once per layer");
  }
  QL_RETURN_IF_ERROR(validate_layer_tensors(layer));
  const Verdict v = can_implement(layer.config);
  if (!v) return Status::error(where + ": kernel " + std::string(name()) + " cannot implement it: " + v.reason);
  QL_RETURN_IF_ERROR(process_impl(layer).with_context(where + " (kernel " + std::string(name()) + ")"));
  layer.processed_by = std::string(name());
  return Status::ok();
}

Result<Tensor> ProcessedWeights::get(const std::string& tensor_name) const {
  std::string present;
  for (const auto& [n, t] : tensors) {
    if (n == tensor_name) return t;
    present += (present.empty() ? "" : ", ") + n;
  }
  return Status::error("processed weights hold no tensor '" + tensor_name + "' (present: " +
                       (present.empty() ? std::string("none") : present) + ")");
}

Result<Tensor> expect_processed_tensor(const ProcessedWeights& weights, const std::string& tensor_name, DType dtype,
                                       const Shape& shape) {
  QL_ASSIGN_OR_RETURN(Tensor t, weights.get(tensor_name));
  if (t.dtype() != dtype || t.shape() != shape || t.device().kind != DeviceKind::kCpu || !t.is_contiguous()) {
    return Status::error("processed tensor '" + tensor_name + "' is " + t.describe() + " on " +
                         t.device().to_string() + "; expected a contiguous host " + std::string(qlinear::name(dtype)) +
                         shape_to_string(shape));
  }
  return t;
}

Result<ProcessedWeights> LinearKernel::export_processed(const LinearLayer& layer) const {
  const std::string where = "export processed weights of layer " + layer.name + " (kernel " + std::string(name()) + ")";
  if (!supports_pre_processed_weights()) return Status::error(where + ": the kernel does not support pre-processed weights");
  if (layer.processed_by != name()) {
    return Status::error(where + ": the layer was " +
                         (layer.processed_by.empty() ? std::string("not processed") : "processed by " + layer.processed_by));
  }
  QL_ASSIGN_OR_RETURN(ProcessedWeights w, export_impl(layer));
  w.layout_version = processed_layout_version();
  return w;
}

Status LinearKernel::import_processed(LinearLayer& layer, const ProcessedWeights& weights) const {
  const std::string where = "layer " + (layer.name.empty() ? std::string("<unnamed>") : layer.name) +
                            ": import processed weights (kernel " + std::string(name()) + ")";
  if (!supports_pre_processed_weights()) return Status::error(where + ": the kernel does not support pre-processed weights");
  if (!layer.processed_by.empty()) {
    return Status::error(where + ": the layer was already processed by " + layer.processed_by);
  }
  if (weights.layout_version != processed_layout_version()) {
    return Status::error(where + ": layout version " + std::to_string(weights.layout_version) +
                         ", the kernel reads version " + std::to_string(processed_layout_version()));
  }
  QL_RETURN_IF_ERROR(validate_layer_tensors(layer));
  const Verdict v = can_implement(layer.config);
  if (!v) return Status::error(where + ": the kernel cannot implement it: " + v.reason);
  // Imports build their state aside and commit it (kernel_state, erased tensors) only when every check passed.
  QL_RETURN_IF_ERROR(import_impl(layer, weights).with_context(where));
  layer.processed_by = std::string(name());
  return Status::ok();
}

Result<ProcessedWeights> LinearKernel::export_impl(const LinearLayer&) const {
  return Status::error("kernel " + std::string(name()) + " does not export processed weights");
}

Status LinearKernel::import_impl(LinearLayer&, const ProcessedWeights&) const {
  return Status::error("kernel " + std::string(name()) + " does not import processed weights");
}

namespace {
bool is_activation_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }
}  // namespace

Status LinearKernel::apply(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const {
  const LinearConfig& c = layer.config;
  const std::string where = "apply " + std::string(name()) + " to layer " + layer.name;
  if (layer.processed_by != name()) {
    return Status::error(where + ": the layer was " +
                         (layer.processed_by.empty() ? std::string("not processed")
                                                     : "processed by " + layer.processed_by) +
                         "; call process_weights_after_loading with this kernel first");
  }
  if (x.is_quantized()) {
    const std::optional<QuantKey> want = input_quant_key(c);
    const QuantKey& got = x.quantized_tensor().key;
    if (!want) {
      return Status::error(where + ": the kernel takes no pre-quantized activations, got one quantized as " +
                           key_name(got));
    }
    if (!(got == *want)) {
      return Status::error(where + ": pre-quantized activation key " + key_name(got) +
                           " does not match the kernel's input_quant_key " + key_name(*want));
    }
  } else {
    const Tensor& t = x.dense_tensor();
    if (!t.defined() || t.rank() != 2) {
      return Status::error(where + ": activation must be 2-D [M, K], got " + t.describe());
    }
    if (!is_activation_dtype(t.dtype())) {
      return Status::error(where + ": activation dtype must be f32, bf16 or f16, got " + t.describe());
    }
    if (t.strides()[1] != 1) return Status::error(where + ": activation rows must be contiguous");
  }
  const int64_t m = x.rows();
  if (x.cols() != c.k) {
    return Status::error(where + ": activation has K=" + std::to_string(x.cols()) + " columns, the layer expects K=" +
                         std::to_string(c.k));
  }
  if (!out.defined() || out.dtype() != c.out_dtype || out.shape() != Shape{m, c.n} || !out.is_contiguous()) {
    return Status::error(where + ": output must be a contiguous " + std::string(qlinear::name(c.out_dtype)) +
                         shape_to_string({m, c.n}) + ", got " + out.describe());
  }
  if (bias != nullptr && bias->defined()) {
    if (!is_activation_dtype(bias->dtype()) || bias->numel() != c.n || bias->rank() != 1) {
      return Status::error(where + ": bias must be f32/bf16/f16 [" + std::to_string(c.n) + "], got " +
                           bias->describe());
    }
  }
  if (m == 0) return Status::ok();  // an empty batch has nothing to compute
  if (log_enabled("dispatch")) {  // the route is only worked out when the log is on
    log_line("dispatch", "apply " + std::string(name()) + " to layer " + layer.name + " at M=" + std::to_string(m) +
                             ": route " + std::string(apply_route(layer, x)));
  }
  return apply_impl(layer, x, bias != nullptr && bias->defined() ? bias : nullptr, out);
}

Result<Tensor> LinearKernel::apply(const LinearLayer& layer, const Activation& x, const Tensor* bias) const {
  const Tensor& data = x.is_quantized() ? x.quantized_tensor().data : x.dense_tensor();
  if (data.defined() && data.device().kind != DeviceKind::kCpu) {
    return Status::error("apply " + std::string(name()) + ": the activation is on " + data.device().to_string() +
                         "; allocate the output there and call apply(layer, x, bias, out)");
  }
  const int64_t m = std::max<int64_t>(x.rows(), 0);
  Tensor out = Tensor::empty(layer.config.out_dtype, {m, layer.config.n});
  QL_RETURN_IF_ERROR(apply(layer, x, bias, out));
  return out;
}

Result<Tensor> LinearKernel::row_major_weight(const LinearLayer& layer) const { return layer.get("weight"); }

}  // namespace qlinear
