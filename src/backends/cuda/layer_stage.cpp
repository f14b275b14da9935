// Staging from the checkpoint (layer_state.hpp): the host checkpoint tensors rewritten into the planned
// device layout as host tensors, plus the flags read from the data (bf16_exact, the static activation
// scale and zero point). build_layer_state uploads what this leaves.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/layer_state.hpp"

namespace qlinear::cuda {

namespace {

Status expect_host(const Tensor& t, const std::string& what) {
  if (t.device().kind != DeviceKind::kCpu) {
    return Status::error("checkpoint tensor '" + what + "' is " + t.describe() + " on " + t.device().to_string() +
                         "; process_weights_after_loading reads host tensors");
  }
  return Status::ok();
}

// Per-row f32 weight scales from a per-tensor ([], [1], [shards]) or per-channel ([N, 1], [N]) tensor.
Tensor row_scales(const LinearConfig& c, const Tensor& scale) {
  const Tensor s = scale.contiguous();
  const float* p = s.data<float>();
  Tensor rows_t = Tensor::zeros(DType::kF32, {c.n});
  float* rows = rows_t.data<float>();
  if (c.weight_key.scale.group.is_per_tensor()) {
    int64_t row = 0;
    for (int64_t shard = 0; shard < c.num_shards(); ++shard) {
      const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[shard];
      const float v = p[s.numel() == 1 ? 0 : shard];
      std::fill(rows + row, rows + row + width, v);
      row += width;
    }
  } else {
    std::copy(p, p + c.n, rows);
  }
  return rows_t;
}

// The weight codes: FP8 / INT8 rows zero-padded to row_bytes (and INT8 column sums when kept); MX codes
// as the checkpoint packs them.
void stage_weight(const LinearConfig& c, const Tensor& weight, LayerState& st) {
  const Tensor wc = weight.contiguous();
  if (st.format != WeightFormat::kE4M3) {
    st.w = wc;
    return;
  }
  st.w = Tensor::zeros(DType::kU8, st.w_shape());
  for (int64_t r = 0; r < c.n; ++r) {
    std::memcpy(st.w.data<uint8_t>() + r * st.row_bytes, static_cast<const uint8_t*>(wc.raw()) + r * c.k,
                static_cast<size_t>(c.k));
  }
  if (st.colsum) {
    st.w_colsum = Tensor::zeros(DType::kI64, {c.n});
    int64_t* colsum = st.w_colsum.data<int64_t>();
    for (int64_t r = 0; r < c.n; ++r) {
      const int8_t* row = static_cast<const int8_t*>(wc.raw()) + r * c.k;
      for (int64_t i = 0; i < c.k; ++i) colsum[r] += row[i];
    }
  }
}

void stage_weight_scale(const LinearConfig& c, const Tensor& scale, LayerState& st) {
  if (st.scale_kind == WeightScale::kMx32) {
    const Tensor s = scale.contiguous();
    int lo = 0, hi = 0;
    bf16_exact_mx_range(st.format, lo, hi);
    const uint8_t* b = static_cast<const uint8_t*>(s.raw());
    const auto [mn, mx] = std::minmax_element(b, b + s.nbytes());
    st.bf16_exact = s.nbytes() == 0 || (*mn >= lo && *mx <= hi);
    st.w_scale = s;
  } else if (st.scale_kind == WeightScale::kBlock128) {
    const int64_t nb = st.grid.rows, kb = (c.k + 127) / 128;  // every shard's own grid (ScaleRowGrid)
    const Tensor sc = scale.contiguous();
    st.w_scale = Tensor::zeros(DType::kF32, st.scale_shape());
    for (int64_t r = 0; r < nb; ++r) {
      std::copy(sc.data<float>() + r * kb, sc.data<float>() + (r + 1) * kb, st.w_scale.data<float>() + r * st.ws_ld);
    }
  } else {
    st.bf16_exact = c.weight_key.dtype == DType::kF8E4M3;  // codes widen exactly; the f32 row scales stay in the epilogue
    st.w_scale = row_scales(c, scale);
    st.scalar_weight_scale = c.weight_key.scale.group.is_per_tensor() && scale.numel() == 1;
    st.w_scale_scalar = Tensor::empty(DType::kF32, {1});
    st.w_scale_scalar.data<float>()[0] = st.w_scale.data<float>()[0];
  }
}

}  // namespace

Status stage_from_checkpoint(const LinearLayer& layer, LayerState& st) {
  const LinearConfig& c = layer.config;
  QL_ASSIGN_OR_RETURN(Tensor weight, layer.get("weight"));
  QL_ASSIGN_OR_RETURN(Tensor scale, layer.get("weight_scale"));
  QL_RETURN_IF_ERROR(expect_host(weight, "weight"));
  QL_RETURN_IF_ERROR(expect_host(scale, "weight_scale"));
  stage_weight(c, weight, st);
  stage_weight_scale(c, scale, st);
  if (c.activation_key && c.activation_key->scale.is_static) {
    QL_ASSIGN_OR_RETURN(Tensor in_scale, layer.get("input_scale"));
    QL_RETURN_IF_ERROR(expect_host(in_scale, "input_scale"));
    const Tensor s = in_scale.contiguous();
    st.static_input_scale = *std::max_element(s.data<float>(), s.data<float>() + s.numel());
    if (!c.activation_key->symmetric) {
      QL_ASSIGN_OR_RETURN(Tensor zp, layer.get("input_zero_point"));
      QL_RETURN_IF_ERROR(expect_host(zp, "input_zero_point"));
      st.static_zero_point = zp.contiguous().data<int32_t>()[0];
    }
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
