#include "backends/reference/reference_kernels.hpp"

#include <algorithm>
#include <cstring>

#include "core/threads.hpp"
#include "qlinear/quantize.hpp"

#if QLINEAR_WITH_CUDA
#include "qlinear/cuda.hpp"
#endif

namespace qlinear::reference {

const ReferenceLinearKernel kFp8ScaledMM(Family::kFp8ScaledMM, "reference_fp8_scaled_mm");
const ReferenceLinearKernel kInt8ScaledMM(Family::kInt8ScaledMM, "reference_int8_scaled_mm");
const ReferenceLinearKernel kFp8BlockScaled(Family::kFp8BlockScaled, "reference_fp8_block_scaled");
const ReferenceLinearKernel kFp8WeightOnly(Family::kFp8WeightOnly, "reference_fp8_weight_only");
const ReferenceLinearKernel kMxfp8(Family::kMxfp8, "reference_mxfp8");
const ReferenceLinearKernel kMxfp6(Family::kMxfp6, "reference_mxfp6");
const ReferenceLinearKernel kMxfp4(Family::kMxfp4, "reference_mxfp4");
const ReferenceLinearKernel kNvfp4(Family::kNvfp4, "reference_nvfp4");

Verdict ReferenceLinearKernel::can_implement(const LinearConfig& config) const {
  if (config.family != family_) return Verdict::no("layer family is " + std::string(family_name(config.family)));
  return Verdict::yes();  // every well-formed config of its family (check_config ran first)
}

Status ReferenceLinearKernel::process_impl(LinearLayer&) const {
  return Status::ok();  // the reference reads the checkpoint layout as is
}

Status ReferenceLinearKernel::import_impl(LinearLayer&, const ProcessedWeights& weights) const {
  if (!weights.tensors.empty()) {
    return Status::error("the reference keeps no processed tensors, got " + std::to_string(weights.tensors.size()) +
                         " (first '" + weights.tensors.front().first + "')");
  }
  return Status::ok();
}

namespace {

// Scalar value `i` of a per-tensor scale stored as [], [1] or [num_shards].
float scalar_at(const Tensor& t, int64_t i) { return t.data<float>()[t.numel() == 1 ? 0 : i]; }

float max_of(const Tensor& t) {
  const float* p = t.data<float>();
  return *std::max_element(p, p + t.numel());
}

}  // namespace

Result<Tensor> dequantized_weight(const LinearLayer& layer) {
  const LinearConfig& c = layer.config;
  QL_ASSIGN_OR_RETURN(Tensor weight, layer.get("weight"));
  QL_ASSIGN_OR_RETURN(Tensor scale, layer.get("weight_scale"));
  Tensor global = layer.has("weight_global_scale") ? layer.params.at("weight_global_scale") : Tensor();
  QuantizedTensor q;
  q.key = c.weight_key;
  q.rows = c.n;
  q.cols = c.k;
  // Fused layers may carry one scalar per shard, or per-shard block grids (ScaleRowGrid): dequantize shard by
  // shard with its own scalar or grid.
  const bool per_shard_scale = c.weight_key.scale.group.is_per_tensor() && scale.numel() > 1;
  const bool per_shard_global = global.defined() && global.numel() > 1;
  const ScaleRowGrid grid = scale_row_grid(c);
  if (!per_shard_scale && !per_shard_global && grid.uniform) {
    q.data = weight;
    // Per-tensor scales arrive as [] or [1]; the quantizer's layout for them is [1].
    const bool scalar = c.weight_key.scale.group.is_per_tensor();
    q.scale = scalar ? Tensor::scalar_f32(scale.data<float>()[0]).reshape({1}).value() : scale;
    if (global.defined()) q.scale2 = Tensor::scalar_f32(global.data<float>()[0]).reshape({1}).value();
    return dequantize(q, DType::kF64);
  }
  Tensor out = Tensor::empty(DType::kF64, {c.n, c.k});
  int64_t row = 0;
  for (int64_t s = 0; s < c.num_shards(); ++s) {
    const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[s];
    if (width == 0) continue;
    QuantizedTensor shard = q;
    shard.rows = width;
    QL_ASSIGN_OR_RETURN(shard.data, weight.narrow(0, row, width));
    if (per_shard_scale) {
      shard.scale = Tensor::scalar_f32(scalar_at(scale, s)).reshape({1}).value();
    } else {
      const int64_t first = grid.scale_row_begin[static_cast<size_t>(s)];
      QL_ASSIGN_OR_RETURN(shard.scale, scale.narrow(0, first, (width + grid.block - 1) / grid.block));
      shard.scale = shard.scale.contiguous();
    }
    if (global.defined()) shard.scale2 = Tensor::scalar_f32(scalar_at(global, s)).reshape({1}).value();
    QL_ASSIGN_OR_RETURN(Tensor part, dequantize(shard, DType::kF64));
    std::memcpy(out.data<double>() + row * c.k, part.data<double>(), sizeof(double) * width * c.k);
    row += width;
  }
  return out;
}

Result<Tensor> effective_activation(const LinearLayer& layer, const Activation& x) {
  const LinearConfig& c = layer.config;
  if (x.is_quantized()) return dequantize(x.quantized_tensor(), DType::kF64);
  const Tensor dense = x.dense_tensor().contiguous();
  if (!c.activation_key) {
    Tensor out = Tensor::empty(DType::kF64, dense.shape());
    double* o = out.data<double>();
    for (int64_t i = 0; i < dense.numel(); ++i) o[i] = element_as_double(dense, i);
    return out;
  }
  QuantizeOptions options;
  const QuantKey& key = *c.activation_key;
  if (key.scale.is_static) {
    // Fused layers: one static input scale for all shards, the largest (vLLM's input_scale.max()).
    options.static_scale = Tensor::scalar_f32(max_of(layer.params.at("input_scale"))).reshape({1}).value();
    if (!key.symmetric) options.static_zero_point = layer.params.at("input_zero_point");
  }
  // A dynamic global scale (kNvfp4DynamicGlobal) is computed by the quantizer from this call's activation.
  if (key.scale2 && key.scale2->is_static) options.nvfp4_global_scale = max_of(layer.params.at("input_global_scale"));
  QL_ASSIGN_OR_RETURN(QuantizedTensor q, quantize(dense, key, options));
  return dequantize(q, DType::kF64);
}

#if QLINEAR_WITH_CUDA
namespace {

bool on_gpu(const Tensor& t) { return t.defined() && t.device().kind == DeviceKind::kCuda; }

Result<Tensor> host_copy(const Tensor& t) { return on_gpu(t) ? cuda::to_host(t.contiguous()) : Result<Tensor>(t); }

}  // namespace
#endif

Status ReferenceLinearKernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias,
                                         Tensor& out) const {
#if QLINEAR_WITH_CUDA
  // Device operands (a layer on a CUDA platform whose family has no GPU kernel): the same computation on
  // host copies, the result copied into the device output. Correct and slow, as the definition may be.
  const bool device_x = x.is_quantized() ? on_gpu(x.quantized_tensor().data) : on_gpu(x.dense_tensor());
  if (device_x || on_gpu(out) || (bias != nullptr && on_gpu(*bias))) {
    Activation hx = x;
    if (x.is_quantized()) {
      QuantizedTensor q = x.quantized_tensor();
      QL_ASSIGN_OR_RETURN(q.data, host_copy(q.data));
      QL_ASSIGN_OR_RETURN(q.scale, host_copy(q.scale));
      if (q.scale2.defined()) {
        QL_ASSIGN_OR_RETURN(q.scale2, host_copy(q.scale2));
      }
      if (q.zero_point.defined()) {
        QL_ASSIGN_OR_RETURN(q.zero_point, host_copy(q.zero_point));
      }
      hx = Activation::quantized(std::move(q), x.orig_dtype());
    } else {
      QL_ASSIGN_OR_RETURN(Tensor d, host_copy(x.dense_tensor()));
      hx = Activation::dense(std::move(d));
    }
    Tensor hb;
    if (bias != nullptr) {
      QL_ASSIGN_OR_RETURN(hb, host_copy(*bias));
    }
    Tensor hout = Tensor::empty(out.dtype(), out.shape());
    QL_RETURN_IF_ERROR(apply_impl(layer, hx, bias != nullptr ? &hb : nullptr, hout));
    if (!on_gpu(out)) {
      std::memcpy(out.raw(), hout.raw(), static_cast<size_t>(hout.nbytes()));
      return Status::ok();
    }
    if (!out.is_contiguous()) return Status::error("reference on a CUDA device: the output must be contiguous");
    return cuda::copy_to_device(hout, out);
  }
#endif
  QL_ASSIGN_OR_RETURN(Tensor w, dequantized_weight(layer));
  QL_ASSIGN_OR_RETURN(Tensor a, effective_activation(layer, x));
  const int64_t m_rows = a.size(0), n_cols = layer.config.n, k = layer.config.k;
  const double* wp = w.data<double>();
  const double* ap = a.data<double>();
  const DType out_dtype = out.dtype();
  // An item per 64 outputs of a row; the double dot product costs ~1 ns per multiply-add.
  const int64_t blocks = (n_cols + 63) / 64;
  threads::parallel_for(m_rows * blocks, threads::threads_for(0, m_rows * n_cols * k, 1.0), [&](int64_t item) {
    const int64_t m = item / blocks, n_begin = item % blocks * 64;
    for (int64_t n = n_begin; n < std::min(n_cols, n_begin + 64); ++n) {
      const double* wr = wp + n * k;
      const double* ar = ap + m * k;
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += ar[i] * wr[i];
      if (bias != nullptr) acc += element_as_double(*bias, n);
      const int64_t o = m * n_cols + n;
      switch (out_dtype) {
        case DType::kF32: out.data<float>()[o] = static_cast<float>(acc); break;
        case DType::kBF16: out.data<uint16_t>()[o] = static_cast<uint16_t>(encode(DType::kBF16, acc, Overflow::kNonSaturating)); break;
        default: out.data<uint16_t>()[o] = static_cast<uint16_t>(encode(DType::kF16, acc, Overflow::kNonSaturating)); break;
      }
    }
  });
  return Status::ok();
}

}  // namespace qlinear::reference
