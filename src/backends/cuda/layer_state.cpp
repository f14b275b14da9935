// The CUDA layer state's plan, its processed-form declaration (cuda_state_schema) and the upload that ends
// the plan -> stage -> upload pipeline (layer_state.hpp); staging from the checkpoint is layer_stage.cpp.
#include "backends/cuda/layer_state.hpp"

#include "backends/cuda/cuda_util.hpp"
#include "core/processed_io.hpp"

namespace qlinear::cuda {

LayoutPlan plan_layout(const LinearConfig& c) {
  const QuantKey& wk = c.weight_key;
  LayoutPlan p;
  p.n = c.n;
  if (wk.dtype == DType::kF8E4M3 || wk.dtype == DType::kI8) {
    // Rows padded with zero codes to a multiple of 32: 16-byte loads, and a K cuBLASLt accepts.
    p.format = WeightFormat::kE4M3;  // (the streaming kernels' format; INT8 only takes the cuBLASLt route)
    p.k_valid = round_up(c.k, 32);
    p.row_bytes = p.k_valid;
  } else {
    p.format = wk.dtype == DType::kF6E2M3   ? WeightFormat::kE2M3
               : wk.dtype == DType::kF6E3M2 ? WeightFormat::kE3M2
                                            : WeightFormat::kE2M1;
    p.k_valid = c.k;  // MX: K is a multiple of 32 (check_config)
    p.row_bytes = storage_bytes(wk.dtype, c.k);
  }
  if (wk.scale.dtype == DType::kE8M0) {
    p.scale_kind = WeightScale::kMx32;
    p.ws_ld = c.k / 32;
  } else if (wk.scale.group == kBlock128x128) {
    // Rows of K-block scales padded to a multiple of 4 (16 bytes): cuBLASLt's BLK128x128 mode reads them so
    // (found on a real checkpoint with K = 384, 3 blocks a row: unpadded rows gave wrong outputs).
    p.scale_kind = WeightScale::kBlock128;
    p.ws_ld = round_up((c.k + 127) / 128, 4);
    p.grid = scale_row_grid(c);
  } else {
    p.scale_kind = WeightScale::kRow;
  }
  // Asymmetric activations x = s (q - z): the INT8 epilogue subtracts z * sum_k w[n, k].
  p.colsum = wk.dtype == DType::kI8 && c.activation_key && !c.activation_key->symmetric;
  return p;
}

bool is_w8a8_fp8(Family f) { return f == Family::kFp8ScaledMM || f == Family::kFp8BlockScaled; }

Verdict bf16_route_verdict(const LinearConfig& c) {
  if (c.family == Family::kFp8WeightOnly && c.weight_key.scale.group == kBlock128x128) {
    return Verdict::no("128x128 weight blocks cannot be factored out of a BF16 GEMM (the streaming kernels take them)");
  }
  if (!c.activation_key && c.input_dtype != DType::kBF16) {
    return Verdict::no("activations are " + std::string(qlinear::name(c.input_dtype)) +
                       "; the BF16 GEMM route takes BF16 activations exactly only (pass BF16 input, or force a "
                       "*_stream kernel)");
  }
  if (c.k % 8 != 0) return Verdict::no("K=" + std::to_string(c.k) + " is not a multiple of 8 (BF16 rows of 16 bytes)");
  return Verdict::yes();
}

namespace {

// Processed layout version 2 (CudaLinearKernel::processed_layout_version; 1 had one 128x128 grid over fused
// shards): meta I64 [format, scale_kind, row_bytes, k_valid, ws_ld] (checked against the plan), flags I64
// [scalar_weight_scale, bf16_exact, static_zero_point], scalars F32 [static_input_scale]; w U8 [N, row_bytes];
// w_scale (the plan's dtype and shape: kBlock128 every shard's own grid, ScaleRowGrid); w_scale_scalar F32 [1]
// (row scales); w_colsum I64 [N] (INT8 with asymmetric activations).
// Changing any of it means bumping the version: entries written before must miss, not misread.
const processed_io::StateSchema<LayerState>& cuda_state_schema() {
  using S = LayerState;
  static const processed_io::StateSchema<LayerState> schema{
      .i64_groups =
          {
              {"meta",
               {
                   {"format", [](const S& s) { return static_cast<int64_t>(s.format); }},
                   {"scale_kind", [](const S& s) { return static_cast<int64_t>(s.scale_kind); }},
                   {"row_bytes", [](const S& s) { return s.row_bytes; }},
                   {"k_valid", [](const S& s) { return s.k_valid; }},
                   {"ws_ld", [](const S& s) { return s.ws_ld; }},
               }},
              {"flags",
               {
                   {"scalar_weight_scale", [](const S& s) -> int64_t { return s.scalar_weight_scale ? 1 : 0; },
                    [](S& s, int64_t v) { s.scalar_weight_scale = v != 0; }},
                   {"bf16_exact", [](const S& s) -> int64_t { return s.bf16_exact ? 1 : 0; },
                    [](S& s, int64_t v) { s.bf16_exact = v != 0; }},
                   {"static_zero_point", [](const S& s) -> int64_t { return s.static_zero_point; },
                    [](S& s, int64_t v) { s.static_zero_point = static_cast<int32_t>(v); }},
               }},
          },
      .f32_groups = {{"scalars",
                      {{"static_input_scale", [](const S& s) { return s.static_input_scale; },
                        [](S& s, float v) { s.static_input_scale = v; }}}}},
      .tensors =
          {
              {"w", &S::w, [](const S&) { return DType::kU8; }, [](const S& s) { return s.w_shape(); }},
              {"w_scale", &S::w_scale, [](const S& s) { return s.scale_dtype(); },
               [](const S& s) { return s.scale_shape(); }},
              {"w_scale_scalar", &S::w_scale_scalar, [](const S&) { return DType::kF32; },
               [](const S&) { return Shape{1}; }, [](const S& s) { return s.scale_kind == WeightScale::kRow; }},
              {"w_colsum", &S::w_colsum, [](const S&) { return DType::kI64; }, [](const S& s) { return Shape{s.n}; },
               [](const S& s) { return s.colsum; }},
          },
  };
  return schema;
}

// Whether kAuto may switch a layer to the BF16 route above stream_max_m: not W8A8 FP8 (cuBLASLt FP8 is
// faster), weights that widen exactly, and a config the route takes.
bool takes_bf16_route(const LinearConfig& c, bool bf16_exact) {
  return !is_w8a8_fp8(c.family) && bf16_exact && bf16_route_verdict(c).ok;
}

}  // namespace

Status stage_from_processed(const ProcessedWeights& w, LayerState& st) {
  return processed_io::import_state(cuda_state_schema(), w, st);
}

Result<ProcessedWeights> export_state(const LayerState& st) {
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(st.device));
  return processed_io::export_state(cuda_state_schema(), st, [](const Tensor& t) { return to_host(t); });
}

Result<std::shared_ptr<LayerState>> build_layer_state(const LinearConfig& c,
                                                      const std::function<Status(LayerState&)>& stage) {
  auto st = std::make_shared<LayerState>();
  static_cast<LayoutPlan&>(*st) = plan_layout(c);
  QL_RETURN_IF_ERROR(stage(*st));
  st->bf16_route = takes_bf16_route(c, st->bf16_exact);
  QL_CUDA_CHECK(cudaGetDevice(&st->device));
  QL_CUDA_CHECK(cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device));
  // Every tensor the schema lists for this layer, staged in host memory, goes to the device as the plan's
  // dtype and shape (the bytes are the layout; a checkpoint tensor may carry its own packed dtype).
  for (const auto& t : cuda_state_schema().tensors) {
    if (!t.in(*st)) continue;
    Tensor& member = (*st).*t.member;
    const DType dtype = t.dtype(*st);
    const Shape shape = t.shape(*st);
    int64_t count = 1;
    for (const int64_t d : shape) count *= d;
    const int64_t bytes = storage_bytes(dtype, count);
    if (!member.defined() || member.device().kind != DeviceKind::kCpu || !member.is_contiguous() ||
        member.nbytes() != bytes) {
      return Status::error("staged tensor '" + std::string(t.name) + "' is " +
                           (member.defined() ? member.describe() : std::string("missing")) + "; the plan needs " +
                           std::to_string(bytes) + " contiguous host bytes (" + std::string(qlinear::name(dtype)) +
                           shape_to_string(shape) + ")");
    }
    QL_ASSIGN_OR_RETURN(member, upload(member.raw(), static_cast<size_t>(bytes), dtype, shape, st->device));
  }
  if (st->scale_kind == WeightScale::kBlock128 && !st->grid.uniform) {
    Tensor rows = Tensor::empty(DType::kI32, {st->n});
    for (int64_t r = 0; r < st->n; ++r) rows.data<int32_t>()[r] = static_cast<int32_t>(st->grid.scale_row(r));
    QL_ASSIGN_OR_RETURN(st->ws_row, upload(rows.raw(), static_cast<size_t>(rows.nbytes()), DType::kI32, {st->n},
                                           st->device));
    // The host table must outlive the copy: synchronized below, before `rows` goes out of scope.
    QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  }
  // Finish the uploads before the staged host tensors go away and before apply can run on another stream.
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  return st;
}

}  // namespace qlinear::cuda
