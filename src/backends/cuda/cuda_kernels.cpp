// The CUDA backend's kernel objects: checks (is_supported, can_implement), weight processing into device
// buffers, and the two routes of apply (cuda_kernels.hpp).
#include "backends/cuda/cuda_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "backends/cuda/weight_stream.hpp"
#include "core/processed_io.hpp"

namespace qlinear::cuda {

// stream_max_m = 0: on the H200 the cuBLASLt route (quantization kernel + GEMM) beat the streaming kernel at
// every M, M = 1 included (8B qkv 15.3 us vs 17.5 us, 70B down 73.4 us vs 88.5 us); the stream route stays
// for N % 16 != 0, which cuBLASLt does not take.
const CudaLinearKernel kSm90Fp8ScaledMM(
    Family::kFp8ScaledMM, "sm90_fp8_scaled_mm",
    "sm_90a FP8 W8A8: cuBLASLt FP8 (SCALAR / OUTER_VEC) after GPU activation quantization; "
    "weight-streaming CUDA-core kernel when N % 16 != 0",
    Route::kAuto, 0);
const CudaLinearKernel kCublasLtFp8ScaledMM(
    Family::kFp8ScaledMM, "cublaslt_fp8_scaled_mm",
    "sm_90a FP8 W8A8 through cuBLASLt: per-tensor (SCALAR_32F) or per-token x per-channel (OUTER_VEC_32F)",
    Route::kCublasLt);
const CudaLinearKernel kSm90Fp8BlockScaled(
    Family::kFp8BlockScaled, "sm90_fp8_block_scaled",
    "sm_90a FP8 1x128 x 128x128 blocks: weight-streaming GEMV at M = 1, cuBLASLt block mode (M padded to 16) above",
    Route::kAuto);
const CudaLinearKernel kCublasLtFp8BlockScaled(
    Family::kFp8BlockScaled, "cublaslt_fp8_block_scaled",
    "sm_90a FP8 1x128 x 128x128 blocks through cuBLASLt (VEC128_32F x BLK128x128_32F; M padded to 16)",
    Route::kCublasLt);
// stream_max_m of the BF16-GEMM hybrids, measured on the H200 (docs/PERF.md, CudaBench): the streaming
// kernel wins while it is memory-bound and loses once CUDA-core bound. 8B qkv: MXFP8 stream 49.0 us vs BF16
// route 47.0 us at M = 8, 87.1 vs 47.7 at M = 16; 70B down: 308.8 vs 393.3 at M = 8, 596.4 vs 398.7 at
// M = 16 (MXFP6/4 alike) -> MX streams up to M = 8. FP8 weight-only: 70B down 408.4 vs 436.9 at M = 16,
// 1555 vs 466 at M = 64; 8B qkv 61.3 vs 53.1 at M = 16 -> streams up to M = 16.
const CudaLinearKernel kSm90Fp8WeightOnly(
    Family::kFp8WeightOnly, "sm90_fp8_weight_only",
    "sm_90a FP8 W8A16: weight-streaming kernel for M <= 16; above, E4M3 codes widened to BF16 + cuBLASLt BF16 "
    "GEMM, per-row scales in the epilogue (128x128 blocks: streaming only)",
    Route::kAuto, 16);
const CudaLinearKernel kSm90Mxfp8(
    Family::kMxfp8, "sm90_mxfp8",
    "sm_90a MXFP8 W8A16 / W8A8: weight-streaming kernel for M <= 8; above, weights (and MXFP8 activations) "
    "widened exactly to BF16 + cuBLASLt BF16 GEMM",
    Route::kAuto, 8);
const CudaLinearKernel kSm90Mxfp6(
    Family::kMxfp6, "sm90_mxfp6",
    "sm_90a MXFP6 E2M3/E3M2: weight-streaming kernel for M <= 8; above, weights widened exactly to BF16 + "
    "cuBLASLt BF16 GEMM",
    Route::kAuto, 8);
const CudaLinearKernel kSm90Mxfp4(
    Family::kMxfp4, "sm90_mxfp4",
    "sm_90a MXFP4: weight-streaming kernel for M <= 8; above, weights widened exactly to BF16 + cuBLASLt BF16 GEMM",
    Route::kAuto, 8);
const CudaLinearKernel kSm90Fp8WeightOnlyStream(
    Family::kFp8WeightOnly, "sm90_fp8_weight_only_stream",
    "sm_90a FP8 W8A16: weight-streaming CUDA-core GEMM, FP32 accumulation (any M; built for decode)",
    Route::kStream);
const CudaLinearKernel kSm90Mxfp8Stream(
    Family::kMxfp8, "sm90_mxfp8_stream",
    "sm_90a MXFP8 W8A16 / W8A8: weight-streaming CUDA-core GEMM, E8M0 scales per 32 (any M; built for decode)",
    Route::kStream);
const CudaLinearKernel kSm90Mxfp6Stream(
    Family::kMxfp6, "sm90_mxfp6_stream",
    "sm_90a MXFP6 E2M3/E3M2 W6A16 / W6A8: weight-streaming CUDA-core GEMM (any M; built for decode)",
    Route::kStream);
const CudaLinearKernel kSm90Mxfp4Stream(
    Family::kMxfp4, "sm90_mxfp4_stream",
    "sm_90a MXFP4 W4A16 / W4A8: weight-streaming CUDA-core GEMM (any M; built for decode)", Route::kStream);

const CudaLinearKernel kSm90Int8ScaledMM(
    Family::kInt8ScaledMM, "sm90_int8_scaled_mm",
    "sm_90a INT8 W8A8: GPU activation quantization (static/dynamic, sym/asym) + cuBLASLt INT8 GEMM (exact INT32) "
    "+ FP64 epilogue (zero points, scales, bias)",
    Route::kCublasLt);

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The device layout a layer's config implies: process_impl builds it, import_impl checks what it reads
// against it.
struct LayoutPlan {
  int64_t n = 0;          // weight rows
  WeightFormat format = WeightFormat::kE4M3;
  WeightScale scale_kind = WeightScale::kRow;
  int64_t row_bytes = 0;  // bytes of one weight row on the device
  int64_t k_valid = 0;    // K as the GEMMs see it
  int64_t ws_ld = 0;      // scale row length (kMx32: K / 32; kBlock128: K blocks padded to 4)
  Shape w_shape() const { return {n, row_bytes}; }
  Shape scale_shape() const {
    if (scale_kind == WeightScale::kMx32) return {n, ws_ld};
    if (scale_kind == WeightScale::kBlock128) return {(n + 127) / 128, ws_ld};
    return {n};
  }
  DType scale_dtype() const { return scale_kind == WeightScale::kMx32 ? DType::kU8 : DType::kF32; }
};

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
  } else {
    p.scale_kind = WeightScale::kRow;
  }
  return p;
}

// What process_weights_after_loading leaves in layer.kernel_state: the layout, then the device buffers in it.
struct LayerState : LayoutPlan {
  int device = 0;
  int sm_count = 132;
  Tensor w;                 // u8 w_shape() on the device
  Tensor w_scale;           // scale_dtype() scale_shape()
  bool scalar_weight_scale = false;  // one scale for the whole weight: cuBLASLt SCALAR_32F
  Tensor w_scale_scalar;             // f32 [1]
  float static_input_scale = 1.0f;   // static per-tensor activations: the max over shards (as vLLM)
  int32_t static_zero_point = 0;     // INT8 static asymmetric activations
  bool bf16_exact = false;           // kDequantBf16 reproduces every weight value exactly (dequant_bf16.hpp)
  bool bf16_route = false;           // ... and the config suits it: kAuto may switch to it above stream_max_m
  Tensor w_colsum;                   // INT8 with asymmetric activations: i64 [N], sum over K of the codes
};

bool asymmetric_int8(const LinearConfig& c) {
  return c.weight_key.dtype == DType::kI8 && c.activation_key && !c.activation_key->symmetric;
}

// What the kDequantBf16 route needs of a layer's config (the data check, bf16_exact, comes at process).
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

bool is_w8a8_fp8(Family f) { return f == Family::kFp8ScaledMM || f == Family::kFp8BlockScaled; }

// Whether kAuto may switch a layer to the BF16 route above stream_max_m: not W8A8 FP8 (cuBLASLt FP8 is
// faster), weights that widen exactly, and a config the route takes.
bool takes_bf16_route(const LinearConfig& c, bool bf16_exact) {
  return !is_w8a8_fp8(c.family) && bf16_exact && bf16_route_verdict(c).ok;
}

Status expect_host(const Tensor& t, const std::string& what) {
  if (t.device().kind != DeviceKind::kCpu) {
    return Status::error("checkpoint tensor '" + what + "' is " + t.describe() + " on " + t.device().to_string() +
                         "; process_weights_after_loading reads host tensors");
  }
  return Status::ok();
}

// The activation quantization a layer's key asks for.
ActQuantMode act_mode(const QuantKey& key) {
  if (key.scale.dtype == DType::kE8M0) return ActQuantMode::kMx32;
  if (key.scale.group == kGroup1x128) return ActQuantMode::kDynamicGroup128;
  if (key.scale.group.is_per_token()) return ActQuantMode::kDynamicToken;
  return key.scale.is_static ? ActQuantMode::kStaticTensor : ActQuantMode::kDynamicTensor;
}

// Per-row f32 weight scales from a per-tensor ([], [1], [shards]) or per-channel ([N, 1], [N]) tensor.
std::vector<float> row_scales(const LinearConfig& c, const Tensor& scale) {
  const Tensor s = scale.contiguous();
  const float* p = s.data<float>();
  std::vector<float> rows(static_cast<size_t>(c.n));
  if (c.weight_key.scale.group.is_per_tensor()) {
    int64_t row = 0;
    for (int64_t shard = 0; shard < c.num_shards(); ++shard) {
      const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[shard];
      const float v = p[s.numel() == 1 ? 0 : shard];
      std::fill(rows.begin() + row, rows.begin() + row + width, v);
      row += width;
    }
  } else {
    std::copy(p, p + c.n, rows.begin());
  }
  return rows;
}

}  // namespace

Verdict CudaLinearKernel::is_supported(const Platform& platform) const {
  if (platform.kind != PlatformKind::kCuda || !platform.cuda) return Verdict::no("not a CUDA platform");
  if (platform.cuda->compute_capability != 90) {
    return Verdict::no("compute capability " + std::to_string(platform.cuda->compute_capability) +
                       ": built for sm_90a (Hopper) only");
  }
  return Verdict::yes();
}

Verdict CudaLinearKernel::can_implement(const LinearConfig& c) const {
  if (c.family != family_) return Verdict::no("layer family is " + std::string(family_name(c.family)));
  if (c.activation_key && c.activation_key->scale.dtype == DType::kE8M0 && c.activation_key->dtype != DType::kF8E4M3) {
    return Verdict::no("MX activations quantized to " + std::string(qlinear::name(c.activation_key->dtype)) +
                       " are not implemented on the GPU (MXFP8 or unquantized activations are)");
  }
  if (c.activation_key && c.weight_key.scale.dtype == DType::kE8M0 && c.activation_key->scale.dtype != DType::kE8M0) {
    return Verdict::no("input " + key_name(*c.activation_key) + " on MX weights is not implemented on the GPU " +
                       "(MXFP8 or unquantized activations are)");
  }
  if (family_ == Family::kInt8ScaledMM) {
    if (c.n % 4 != 0) return Verdict::no("N=" + std::to_string(c.n) + " is not a multiple of 4 (cuBLASLt INT8 output)");
    return Verdict::yes();
  }
  if (route_ == Route::kDequantBf16) return bf16_route_verdict(c);
  if (route_ == Route::kCublasLt && c.n % 16 != 0) {
    return Verdict::no("N=" + std::to_string(c.n) + " is not a multiple of 16 (cuBLASLt FP8 output alignment)");
  }
  return Verdict::yes();
}

std::optional<QuantKey> CudaLinearKernel::input_quant_key(const LinearConfig& c) const {
  if (!c.activation_key) return std::nullopt;
  if (family_ == Family::kInt8ScaledMM) return c.activation_key;
  if (family_ == Family::kFp8ScaledMM && route_ != Route::kStream && c.n % 16 == 0) return c.activation_key;
  return std::nullopt;
}

Result<QuantizedTensor> CudaLinearKernel::quantize_input(const LinearLayer& layer, const Tensor& x,
                                                         const Tensor& row_amax) const {
  const LinearConfig& c = layer.config;
  const std::optional<QuantKey> takes = input_quant_key(c);
  const bool per_token = takes && !takes->scale.is_static && takes->scale.group.is_per_token() && takes->symmetric &&
                         (takes->dtype == DType::kF8E4M3 || takes->dtype == DType::kI8);
  if (!per_token) {
    return Status::error("layer " + layer.name + ": kernel " + std::string(name()) +
                         " quantizes with given row maxima only for dynamic per-token symmetric FP8/INT8 activations");
  }
  const QuantKey& key = *takes;
  const int64_t m = x.size(0);
  if (x.rank() != 2 || x.size(1) != c.k || x.strides()[1] != 1) {
    return Status::error("layer " + layer.name + ": input must be [M, " + std::to_string(c.k) +
                         "] with contiguous rows, got " + x.describe());
  }
  const int dev = x.device().index;
  QL_RETURN_IF_ERROR(expect_on_device(x, dev, "activation"));
  QL_RETURN_IF_ERROR(expect_on_device(row_amax, dev, "row maxima"));
  if (row_amax.dtype() != DType::kF32 || row_amax.numel() != m) {
    return Status::error("layer " + layer.name + ": row maxima must be f32 [" + std::to_string(m) + "], got " +
                         row_amax.describe());
  }
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(dev));
  const Stream stream = current_stream();
  QuantizedTensor q;
  q.key = key;
  q.rows = m;
  q.cols = c.k;
  QL_ASSIGN_OR_RETURN(q.data, empty_on_stream(key.dtype, {m, c.k}, dev, stream));
  QL_ASSIGN_OR_RETURN(q.scale, empty_on_stream(DType::kF32, {m, 1}, dev, stream));
  if (key.dtype == DType::kI8) {
    Int8QuantArgs a;
    a.x = x.raw();
    a.x_dtype = x.dtype();
    a.m = m;
    a.k = c.k;
    a.ld_x = x.strides()[0];
    a.mode = Int8ActMode::kDynamicTokenSym;
    a.codes = static_cast<int8_t*>(q.data.raw());
    a.ld_codes = c.k;
    a.scales = q.scale.data<float>();
    a.row_amax = row_amax.data<float>();
    QL_RETURN_IF_ERROR(launch_int8_act_quant(a, stream));
  } else {
    ActQuantArgs a;
    a.x = x.raw();
    a.x_dtype = x.dtype();
    a.m = m;
    a.k = c.k;
    a.ld_x = x.strides()[0];
    a.mode = ActQuantMode::kDynamicToken;
    a.codes = q.data.raw();
    a.ld_codes = c.k;
    a.scale = {q.scale.raw(), 1, 0, false};
    a.row_amax = row_amax.data<float>();
    QL_RETURN_IF_ERROR(launch_act_quant(a, stream));
  }
  return q;
}

Status CudaLinearKernel::process_impl(LinearLayer& layer) const {
  const LinearConfig& c = layer.config;
  QL_ASSIGN_OR_RETURN(Tensor weight, layer.get("weight"));
  QL_ASSIGN_OR_RETURN(Tensor scale, layer.get("weight_scale"));
  QL_RETURN_IF_ERROR(expect_host(weight, "weight"));
  QL_RETURN_IF_ERROR(expect_host(scale, "weight_scale"));
  auto st = std::make_shared<LayerState>();
  QL_CUDA_CHECK(cudaGetDevice(&st->device));
  QL_CUDA_CHECK(cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device));

  const QuantKey& wk = c.weight_key;
  static_cast<LayoutPlan&>(*st) = plan_layout(c);
  const LayoutPlan& plan = *st;
  const Tensor wc = weight.contiguous();
  if (plan.format == WeightFormat::kE4M3) {
    std::vector<uint8_t> padded(static_cast<size_t>(c.n * st->row_bytes), 0);
    for (int64_t r = 0; r < c.n; ++r) {
      std::memcpy(padded.data() + r * st->row_bytes, static_cast<const uint8_t*>(wc.raw()) + r * c.k,
                  static_cast<size_t>(c.k));
    }
    QL_ASSIGN_OR_RETURN(st->w, upload(padded.data(), padded.size(), DType::kU8, plan.w_shape(), st->device));
    if (asymmetric_int8(c)) {
      // Asymmetric activations x = s (q - z): the epilogue subtracts z * sum_k w[n, k].
      std::vector<int64_t> colsum(static_cast<size_t>(c.n), 0);
      for (int64_t r = 0; r < c.n; ++r) {
        const int8_t* row = static_cast<const int8_t*>(wc.raw()) + r * c.k;
        for (int64_t i = 0; i < c.k; ++i) colsum[r] += row[i];
      }
      QL_ASSIGN_OR_RETURN(st->w_colsum, upload(colsum.data(), colsum.size() * sizeof(int64_t), DType::kI64, {c.n},
                                               st->device));
    }
  } else {
    QL_ASSIGN_OR_RETURN(st->w, upload(wc.raw(), static_cast<size_t>(wc.nbytes()), DType::kU8, plan.w_shape(),
                                      st->device));
  }

  if (plan.scale_kind == WeightScale::kMx32) {
    const Tensor s = scale.contiguous();
    int lo = 0, hi = 0;
    bf16_exact_mx_range(st->format, lo, hi);
    const uint8_t* b = static_cast<const uint8_t*>(s.raw());
    const auto [mn, mx] = std::minmax_element(b, b + s.nbytes());
    st->bf16_exact = s.nbytes() == 0 || (*mn >= lo && *mx <= hi);
    QL_ASSIGN_OR_RETURN(st->w_scale, upload(s.raw(), static_cast<size_t>(s.nbytes()), DType::kU8, plan.scale_shape(),
                                            st->device));
  } else if (plan.scale_kind == WeightScale::kBlock128) {
    const int64_t nb = (c.n + 127) / 128, kb = (c.k + 127) / 128;
    const Tensor sc = scale.contiguous();
    std::vector<float> padded(static_cast<size_t>(nb * st->ws_ld), 0.0f);
    for (int64_t r = 0; r < nb; ++r) {
      std::copy(sc.data<float>() + r * kb, sc.data<float>() + (r + 1) * kb, padded.begin() + r * st->ws_ld);
    }
    QL_ASSIGN_OR_RETURN(st->w_scale, upload(padded.data(), padded.size() * sizeof(float), DType::kF32,
                                            plan.scale_shape(), st->device));
  } else {
    st->bf16_exact = wk.dtype == DType::kF8E4M3;  // codes widen exactly; the f32 row scales stay in the epilogue
    const std::vector<float> rows = row_scales(c, scale);
    QL_ASSIGN_OR_RETURN(st->w_scale, upload(rows.data(), rows.size() * sizeof(float), DType::kF32, plan.scale_shape(),
                                            st->device));
    st->scalar_weight_scale = wk.scale.group.is_per_tensor() && scale.numel() == 1;
    QL_ASSIGN_OR_RETURN(st->w_scale_scalar, upload(rows.data(), sizeof(float), DType::kF32, {1}, st->device));
  }

  if (c.activation_key && c.activation_key->scale.is_static) {
    QL_ASSIGN_OR_RETURN(Tensor in_scale, layer.get("input_scale"));
    QL_RETURN_IF_ERROR(expect_host(in_scale, "input_scale"));
    const Tensor s = in_scale.contiguous();
    st->static_input_scale = *std::max_element(s.data<float>(), s.data<float>() + s.numel());
    if (!c.activation_key->symmetric) {
      QL_ASSIGN_OR_RETURN(Tensor zp, layer.get("input_zero_point"));
      QL_RETURN_IF_ERROR(expect_host(zp, "input_zero_point"));
      st->static_zero_point = zp.contiguous().data<int32_t>()[0];
    }
  }
  st->bf16_route = takes_bf16_route(c, st->bf16_exact);
  // Finish the uploads before the host staging buffers go away and before apply can run on another stream.
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  layer.kernel_state = std::move(st);
  return Status::ok();
}

// Processed layout version 1: meta I64 [format, scale_kind, row_bytes, k_valid, ws_ld] (checked against the
// config), flags I64 [scalar_weight_scale, bf16_exact, static_zero_point]; scalars F32
// [static_input_scale]; w U8 [N, row_bytes]; w_scale (plan's dtype and shape); w_scale_scalar F32 [1] (row
// scales); w_colsum I64 [N] (INT8 with asymmetric activations). Device buffers are copied to the host on
// export and uploaded to the current device on import.
namespace {

constexpr const char* kCudaMetaNames[] = {"format", "scale_kind", "row_bytes", "k_valid", "ws_ld"};

std::vector<int64_t> plan_meta(const LayoutPlan& p) {
  return {static_cast<int64_t>(p.format), static_cast<int64_t>(p.scale_kind), p.row_bytes, p.k_valid, p.ws_ld};
}

Status export_device_tensor(ProcessedWeights& w, const char* name, const Tensor& t) {
  QL_ASSIGN_OR_RETURN(Tensor host, to_host(t));
  w.tensors.emplace_back(name, std::move(host));
  return Status::ok();
}

Result<Tensor> import_device_tensor(const ProcessedWeights& w, const char* name, DType dtype, const Shape& shape,
                                    int device) {
  QL_ASSIGN_OR_RETURN(Tensor host, expect_processed_tensor(w, name, dtype, shape));
  return upload(host.raw(), static_cast<size_t>(host.nbytes()), dtype, shape, device);
}

}  // namespace

Result<ProcessedWeights> CudaLinearKernel::export_impl(const LinearLayer& layer) const {
  namespace io = processed_io;
  const auto* st = static_cast<const LayerState*>(layer.kernel_state.get());
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(st->device));
  ProcessedWeights w;
  w.tensors.emplace_back("meta", io::meta_tensor(plan_meta(*st)));
  w.tensors.emplace_back("flags", io::meta_tensor({st->scalar_weight_scale ? 1 : 0, st->bf16_exact ? 1 : 0,
                                                   st->static_zero_point}));
  w.tensors.emplace_back("scalars", io::from_vector(std::vector<float>{st->static_input_scale}, DType::kF32));
  QL_RETURN_IF_ERROR(export_device_tensor(w, "w", st->w));
  QL_RETURN_IF_ERROR(export_device_tensor(w, "w_scale", st->w_scale));
  if (st->w_scale_scalar.defined()) QL_RETURN_IF_ERROR(export_device_tensor(w, "w_scale_scalar", st->w_scale_scalar));
  if (st->w_colsum.defined()) QL_RETURN_IF_ERROR(export_device_tensor(w, "w_colsum", st->w_colsum));
  return w;
}

Status CudaLinearKernel::import_impl(LinearLayer& layer, const ProcessedWeights& w) const {
  namespace io = processed_io;
  const LinearConfig& c = layer.config;
  const LayoutPlan p = plan_layout(c);
  QL_RETURN_IF_ERROR(io::expect_meta(w, plan_meta(p), {std::begin(kCudaMetaNames), std::end(kCudaMetaNames)}));
  auto st = std::make_shared<LayerState>();
  QL_CUDA_CHECK(cudaGetDevice(&st->device));
  QL_CUDA_CHECK(cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device));
  static_cast<LayoutPlan&>(*st) = p;
  std::vector<int64_t> flags;
  std::vector<float> scalars;
  QL_RETURN_IF_ERROR(io::to_vector(w, "flags", DType::kI64, 3, flags));
  QL_RETURN_IF_ERROR(io::to_vector(w, "scalars", DType::kF32, 1, scalars));
  st->scalar_weight_scale = flags[0] != 0;
  st->bf16_exact = flags[1] != 0;
  st->bf16_route = takes_bf16_route(c, st->bf16_exact);  // derived, as at process
  st->static_zero_point = static_cast<int32_t>(flags[2]);
  st->static_input_scale = scalars[0];
  QL_ASSIGN_OR_RETURN(st->w, import_device_tensor(w, "w", DType::kU8, p.w_shape(), st->device));
  QL_ASSIGN_OR_RETURN(st->w_scale, import_device_tensor(w, "w_scale", p.scale_dtype(), p.scale_shape(), st->device));
  if (p.scale_kind == WeightScale::kRow) {
    QL_ASSIGN_OR_RETURN(st->w_scale_scalar, import_device_tensor(w, "w_scale_scalar", DType::kF32, {1}, st->device));
  }
  if (asymmetric_int8(c)) {
    QL_ASSIGN_OR_RETURN(st->w_colsum, import_device_tensor(w, "w_colsum", DType::kI64, {c.n}, st->device));
  }
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  layer.kernel_state = std::move(st);
  return Status::ok();
}

namespace {

struct ApplyCtx {
  const LinearConfig& c;
  const LayerState& st;
  const Tensor& x;
  const Tensor* bias;
  Tensor& out;
  int64_t m;
  Stream stream;
  const QuantizedTensor* pre = nullptr;  // a pre-quantized activation (input_quant_key), or null
};

ActQuantArgs quant_args(const ApplyCtx& a, const QuantKey& key) {
  ActQuantArgs q;
  q.x = a.x.raw();
  q.x_dtype = a.x.dtype();
  q.m = a.m;
  q.k = a.c.k;
  q.ld_x = a.x.strides()[0];
  q.mode = act_mode(key);
  q.static_scale = a.st.static_input_scale;
  return q;
}

// A pre-quantized activation's codes with rows k_valid long (zero padding), as the GEMMs read them: the
// tensor itself when it already is, else a padded copy in `pad`.
Result<const void*> padded_codes(const QuantizedTensor& q, int64_t k_valid, Scratch& pad, Stream stream) {
  const Tensor& d = q.data;
  const int64_t ld = d.strides()[0];
  if (ld == k_valid && d.strides()[1] == 1) return static_cast<const void*>(d.raw());
  if (d.strides()[1] != 1) return Status::error("pre-quantized activation codes must have contiguous rows");
  QL_ASSIGN_OR_RETURN(pad, Scratch::make(static_cast<size_t>(q.rows * k_valid), stream));
  QL_CUDA_CHECK(cudaMemsetAsync(pad.get(), 0, static_cast<size_t>(q.rows * k_valid), stream));
  QL_CUDA_CHECK(cudaMemcpy2DAsync(pad.get(), static_cast<size_t>(k_valid), d.raw(), static_cast<size_t>(ld),
                                  static_cast<size_t>(q.cols), static_cast<size_t>(q.rows), cudaMemcpyDeviceToDevice,
                                  stream));
  return static_cast<const void*>(pad.get());
}

Status expect_quantized_on(const QuantizedTensor& q, int device) {
  QL_RETURN_IF_ERROR(expect_on_device(q.data, device, "pre-quantized activation codes"));
  QL_RETURN_IF_ERROR(expect_on_device(q.scale, device, "pre-quantized activation scales"));
  if (q.scale.dtype() != DType::kF32 || (q.scale.numel() != 1 && q.scale.numel() != q.rows)) {
    return Status::error("pre-quantized activation scales must be f32 [1] or [M, 1], got " + q.scale.describe());
  }
  if (!q.key.symmetric) {
    QL_RETURN_IF_ERROR(expect_on_device(q.zero_point, device, "pre-quantized activation zero points"));
    if (q.zero_point.dtype() != DType::kI32 || (q.zero_point.numel() != 1 && q.zero_point.numel() != q.rows)) {
      return Status::error("pre-quantized activation zero points must be i32 [1] or [M, 1], got " +
                           q.zero_point.describe());
    }
  }
  return Status::ok();
}

Status apply_stream(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const int64_t ld = stream_ld_x(c.k);
  QL_ASSIGN_OR_RETURN(Scratch xf, Scratch::make(sizeof(float) * a.m * ld, a.stream));
  WeightStreamArgs s;
  s.format = a.st.format;
  s.scale_kind = a.st.scale_kind;
  s.w = static_cast<const uint8_t*>(a.st.w.raw());
  s.w_row_bytes = a.st.row_bytes;
  s.w_scale = a.st.w_scale.raw();
  s.ws_ld = a.st.ws_ld;
  s.k_valid = a.st.k_valid;
  s.x = xf.as<float>();
  s.ld_x = ld;
  s.bias = a.bias ? a.bias->raw() : nullptr;
  s.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  s.out = a.out.raw();
  s.out_dtype = a.out.dtype();
  s.m = a.m;
  s.n = c.n;
  s.sm_count = a.st.sm_count;

  Scratch scales, amax;
  if (!c.activation_key) {
    QL_RETURN_IF_ERROR(launch_widen_to_f32(a.x.raw(), a.x.dtype(), a.m, c.k, a.x.strides()[0], xf.as<float>(), ld,
                                           a.stream));
  } else {
    ActQuantArgs q = quant_args(a, *c.activation_key);
    q.codes = xf.get();
    q.codes_as_float = true;
    q.ld_codes = ld;
    int64_t count = 1;
    switch (q.mode) {
      case ActQuantMode::kStaticTensor:
      case ActQuantMode::kDynamicTensor: q.scale = {nullptr, 0, 0, false}; break;
      case ActQuantMode::kDynamicToken: count = a.m; q.scale = {nullptr, 1, 0, false}; break;
      case ActQuantMode::kDynamicGroup128: {
        const int64_t g = (c.k + 127) / 128;
        count = a.m * g;
        q.scale = {nullptr, g, 1, false};
        break;
      }
      case ActQuantMode::kMx32: {
        const int64_t g = c.k / 32;
        count = a.m * g;
        q.scale = {nullptr, g, 1, true};
        break;
      }
    }
    QL_ASSIGN_OR_RETURN(scales, Scratch::make(sizeof(float) * count, a.stream));
    q.scale.scales = scales.get();
    if (q.mode == ActQuantMode::kDynamicTensor) {
      QL_ASSIGN_OR_RETURN(amax, Scratch::make(sizeof(uint32_t), a.stream));
      q.amax_scratch = amax.as<uint32_t>();
    }
    QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));
    s.x_scale = scales.as<float>();
    s.xs_m = q.scale.m_stride;
    s.xs_g = q.scale.g_stride;
  }
  return launch_weight_stream(s, a.stream);
}

// Runs g (operands and scales set) into a.out: bias in cuBLASLt's epilogue when it takes the bias dtype,
// else an F32 result plus our epilogue; rows beyond a.m (padded runs) are dropped.
Status run_lt_into_out(const ApplyCtx& a, LtGemm& g) {
  const LinearConfig& c = a.c;
  const bool lt_bias = a.bias == nullptr || a.bias->dtype() == bias_dtype_for(g.ab_dtype, a.out.dtype());
  g.bias = lt_bias && a.bias ? a.bias->raw() : nullptr;
  g.out_dtype = lt_bias ? a.out.dtype() : DType::kF32;
  if (lt_bias && g.m == a.m) {
    g.out = a.out.raw();
    return lt_gemm(g, a.stream);
  }
  Scratch result;
  if (!lt_bias && g.m == a.m && a.out.dtype() == DType::kF32) {
    g.out = a.out.raw();  // an F32 output is its own accumulator
  } else {
    QL_ASSIGN_OR_RETURN(result, Scratch::make(static_cast<size_t>(g.m * c.n * element_size(g.out_dtype)), a.stream));
    g.out = result.get();
  }
  QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
  if (lt_bias) {
    QL_CUDA_CHECK(cudaMemcpyAsync(a.out.raw(), g.out, static_cast<size_t>(a.m * c.n * element_size(g.out_dtype)),
                                  cudaMemcpyDeviceToDevice, a.stream));
    return Status::ok();
  }
  return launch_bias_epilogue(static_cast<const float*>(g.out), a.bias->raw(), a.bias->dtype(), a.out.raw(),
                              a.out.dtype(), a.m, c.n, a.stream);
}

// FP8 per-tensor / per-token activations quantized by the caller (input_quant_key).
Status apply_cublaslt_prequantized(const ApplyCtx& a) {
  const QuantizedTensor& q = *a.pre;
  Scratch pad, expanded;
  QL_ASSIGN_OR_RETURN(const void* codes, padded_codes(q, a.st.k_valid, pad, a.stream));
  LtGemm g;
  g.ab_dtype = DType::kF8E4M3;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.x = codes;
  g.ld_x = a.st.k_valid;
  g.m = a.m;
  g.n = a.c.n;
  g.k = a.st.k_valid;
  const bool x_scalar = q.scale.numel() == 1 && a.m != 1;
  if (a.st.scalar_weight_scale && x_scalar) {
    g.scale_mode = LtScaleMode::kScalar;
    g.w_scale = static_cast<const float*>(a.st.w_scale_scalar.raw());
    g.x_scale = static_cast<const float*>(q.scale.raw());
  } else {
    g.scale_mode = LtScaleMode::kOuterVec;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    if (x_scalar) {  // OUTER_VEC wants one activation scale per row
      QL_ASSIGN_OR_RETURN(expanded, Scratch::make(sizeof(float) * a.m, a.stream));
      QL_RETURN_IF_ERROR(launch_broadcast_f32(static_cast<const float*>(q.scale.raw()), expanded.as<float>(), a.m,
                                              a.stream));
      g.x_scale = expanded.as<float>();
    } else {
      g.x_scale = static_cast<const float*>(q.scale.raw());
    }
  }
  return run_lt_into_out(a, g);
}

Status apply_cublaslt(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const QuantKey& key = *c.activation_key;
  const int64_t kl = a.st.k_valid;
  const bool block = c.family == Family::kFp8BlockScaled;
  // cuBLASLt's block-scaled mode finds no algorithm unless M is a multiple of 16 (measured on the H200 with
  // CUDA 13.0: M = 2, 7, 9, 17, 257 fail; 16, 64, 4096 run): run it on M rounded up, the extra rows zero.
  const int64_t m_run = block ? round_up(a.m, 16) : a.m;
  if (a.pre != nullptr) return apply_cublaslt_prequantized(a);
  ActQuantArgs q = quant_args(a, key);
  QL_ASSIGN_OR_RETURN(Scratch codes, Scratch::make(static_cast<size_t>(m_run * kl), a.stream));
  if (m_run > a.m) {
    QL_CUDA_CHECK(cudaMemsetAsync(codes.as<uint8_t>() + a.m * kl, 0, static_cast<size_t>((m_run - a.m) * kl), a.stream));
  }
  q.codes = codes.get();
  q.ld_codes = kl;

  LtGemm g;
  g.ab_dtype = DType::kF8E4M3;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.x = codes.get();
  g.ld_x = kl;
  g.m = m_run;
  g.n = c.n;
  g.k = kl;

  int64_t count = 1;
  if (block) {
    g.scale_mode = LtScaleMode::kBlock;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    count = (c.k + 127) / 128 * m_run;
    q.scale = {nullptr, 1, m_run, false};  // [kb * M + m]
  } else if (a.st.scalar_weight_scale && !key.scale.group.is_per_token()) {
    g.scale_mode = LtScaleMode::kScalar;
    g.w_scale = static_cast<const float*>(a.st.w_scale_scalar.raw());
    q.scale = {nullptr, 0, 0, false};
  } else {
    g.scale_mode = LtScaleMode::kOuterVec;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    count = a.m;
    q.scale = {nullptr, 1, 0, false};  // per-tensor scales are repeated per row
  }
  QL_ASSIGN_OR_RETURN(Scratch scales, Scratch::make(sizeof(float) * count, a.stream));
  if (m_run > a.m) QL_CUDA_CHECK(cudaMemsetAsync(scales.get(), 0, sizeof(float) * count, a.stream));
  q.scale.scales = scales.get();
  g.x_scale = scales.as<float>();
  Scratch amax;
  if (q.mode == ActQuantMode::kDynamicTensor) {
    QL_ASSIGN_OR_RETURN(amax, Scratch::make(sizeof(uint32_t), a.stream));
    q.amax_scratch = amax.as<uint32_t>();
  }
  QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));

  return run_lt_into_out(a, g);
}

// kDequantBf16: per block of weight rows, the codes widened to BF16 (MX scales folded in exactly), then a
// cuBLASLt BF16 GEMM writing that column block of the output. Row scales (FP8 weight-only) and bias dtypes
// cuBLASLt's epilogue does not take go through an FP32 block and our epilogue.
Status apply_dequant_bf16(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const LayerState& st = a.st;
  const int64_t m = a.m, k_ld = round_up(st.k_valid, 8);
  const bool mx = st.scale_kind == WeightScale::kMx32;

  // Activations as BF16: given (A16), or MXFP8 codes widened with their scales.
  const void* xb = a.x.raw();
  int64_t ld_x = a.x.strides()[0];
  Scratch x_codes, x_scales, x_bf16;
  if (c.activation_key) {
    ActQuantArgs q = quant_args(a, *c.activation_key);
    const int64_t groups = c.k / 32;
    QL_ASSIGN_OR_RETURN(x_codes, Scratch::make(static_cast<size_t>(m * c.k), a.stream));
    QL_ASSIGN_OR_RETURN(x_scales, Scratch::make(static_cast<size_t>(m * groups), a.stream));
    QL_ASSIGN_OR_RETURN(x_bf16, Scratch::make(static_cast<size_t>(m * c.k * 2), a.stream));
    q.codes = x_codes.get();
    q.ld_codes = c.k;
    q.scale = {x_scales.get(), groups, 1, false};
    QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));
    DequantArgs d;
    d.format = WeightFormat::kE4M3;
    d.scale_kind = DequantScale::kMx32;
    d.codes = x_codes.as<uint8_t>();
    d.row_bytes = c.k;
    d.scales = x_scales.as<uint8_t>();
    d.ld_scales = groups;
    d.rows = m;
    d.k = c.k;
    d.out = x_bf16.get();
    d.ld_out = c.k;
    QL_RETURN_IF_ERROR(launch_dequant_bf16(d, a.stream));
    xb = x_bf16.get();
    ld_x = c.k;
  }

  // Row blocks of at most 32 MiB of BF16 weights (and a multiple of 128 rows).
  const int64_t block = std::min<int64_t>(c.n, std::max<int64_t>(128, (int64_t{32} << 20) / (2 * k_ld) / 128 * 128));
  QL_ASSIGN_OR_RETURN(Scratch wb, Scratch::make(static_cast<size_t>(block * k_ld * 2), a.stream));
  const bool lt_bias = a.bias == nullptr || a.bias->dtype() == a.out.dtype();
  const bool direct = mx && lt_bias;
  Scratch acc;
  if (!direct) {
    QL_ASSIGN_OR_RETURN(acc, Scratch::make(static_cast<size_t>(m * block * 4), a.stream));
  }
  const size_t out_es = static_cast<size_t>(element_size(a.out.dtype()));
  const size_t bias_es = a.bias ? static_cast<size_t>(element_size(a.bias->dtype())) : 0;
  for (int64_t n0 = 0; n0 < c.n; n0 += block) {
    const int64_t nc = std::min(block, c.n - n0);
    DequantArgs d;
    d.format = st.format;
    d.scale_kind = mx ? DequantScale::kMx32 : DequantScale::kNone;
    d.codes = static_cast<const uint8_t*>(st.w.raw()) + n0 * st.row_bytes;
    d.row_bytes = st.row_bytes;
    d.scales = mx ? static_cast<const uint8_t*>(st.w_scale.raw()) + n0 * st.ws_ld : nullptr;
    d.ld_scales = st.ws_ld;
    d.rows = nc;
    d.k = st.k_valid;
    d.out = wb.get();
    d.ld_out = k_ld;
    QL_RETURN_IF_ERROR(launch_dequant_bf16(d, a.stream));
    LtGemm g;
    g.ab_dtype = DType::kBF16;
    g.w = wb.get();
    g.ld_w = k_ld;
    g.x = xb;
    g.ld_x = ld_x;
    g.m = m;
    g.n = nc;
    g.k = c.k;
    if (direct) {
      g.out = static_cast<uint8_t*>(a.out.raw()) + n0 * out_es;
      g.out_dtype = a.out.dtype();
      g.ld_out = c.n;
      g.bias = a.bias ? static_cast<const uint8_t*>(a.bias->raw()) + n0 * bias_es : nullptr;
      QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
      continue;
    }
    g.out = acc.get();
    g.out_dtype = DType::kF32;
    QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
    QL_RETURN_IF_ERROR(launch_scale_bias_epilogue(
        acc.as<float>(), m, nc, mx ? nullptr : static_cast<const float*>(st.w_scale.raw()) + n0,
        a.bias ? static_cast<const uint8_t*>(a.bias->raw()) + n0 * bias_es : nullptr,
        a.bias ? a.bias->dtype() : DType::kF32, static_cast<uint8_t*>(a.out.raw()) + n0 * out_es, a.out.dtype(), c.n,
        a.stream));
  }
  return Status::ok();
}

Status apply_int8(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const QuantKey& key = *c.activation_key;
  const int64_t kl = a.st.k_valid;
  Int8QuantArgs q;
  q.x = a.x.raw();
  q.x_dtype = a.x.dtype();
  q.m = a.m;
  q.k = c.k;
  q.ld_x = a.x.strides()[0];
  q.mode = key.scale.is_static ? (key.symmetric ? Int8ActMode::kStaticSym : Int8ActMode::kStaticAsym)
                               : (key.symmetric ? Int8ActMode::kDynamicTokenSym : Int8ActMode::kDynamicTokenAsym);
  q.static_scale = a.st.static_input_scale;
  q.static_zero_point = a.st.static_zero_point;
  q.ld_codes = kl;
  Scratch codes, scales, zps;
  const void* code_ptr = nullptr;
  const float* scale_ptr = nullptr;
  const int32_t* zp_ptr = nullptr;
  bool per_row = !key.scale.is_static;
  if (a.pre != nullptr) {
    QL_ASSIGN_OR_RETURN(code_ptr, padded_codes(*a.pre, kl, codes, a.stream));
    scale_ptr = static_cast<const float*>(a.pre->scale.raw());
    per_row = a.pre->scale.numel() != 1 || a.m == 1;
    if (!key.symmetric) zp_ptr = static_cast<const int32_t*>(a.pre->zero_point.raw());
  } else {
    QL_ASSIGN_OR_RETURN(codes, Scratch::make(static_cast<size_t>(a.m * kl), a.stream));
    QL_ASSIGN_OR_RETURN(scales, Scratch::make(sizeof(float) * a.m, a.stream));
    QL_ASSIGN_OR_RETURN(zps, Scratch::make(sizeof(int32_t) * a.m, a.stream));
    q.codes = codes.as<int8_t>();
    q.scales = scales.as<float>();
    q.zero_points = zps.as<int32_t>();
    QL_RETURN_IF_ERROR(launch_int8_act_quant(q, a.stream));
    code_ptr = codes.get();
    scale_ptr = per_row ? scales.as<float>() : nullptr;
    zp_ptr = per_row && !key.symmetric ? zps.as<int32_t>() : nullptr;
  }
  QL_ASSIGN_OR_RETURN(Scratch acc, Scratch::make(sizeof(int32_t) * a.m * c.n, a.stream));

  LtGemm g;
  g.ab_dtype = DType::kI8;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.x = code_ptr;
  g.ld_x = kl;
  g.m = a.m;
  g.n = c.n;
  g.k = kl;
  g.out = acc.get();
  g.out_dtype = DType::kI32;
  QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));

  Int8EpilogueArgs e;
  e.acc = acc.as<int32_t>();
  e.m = a.m;
  e.n = c.n;
  // Scales and zero points: per row (dynamic, or pre-quantized [M, 1]), or one value (static: the layer's,
  // or a pre-quantized activation's [1] on the device).
  e.x_scale = scale_ptr;
  e.x_scale_per_row = per_row;
  e.x_scale_value = a.st.static_input_scale;
  e.x_zero_point = zp_ptr;
  e.x_zero_point_per_row = per_row;
  e.x_zero_point_value = a.st.static_zero_point;
  e.w_scale = static_cast<const float*>(a.st.w_scale.raw());
  e.w_colsum = key.symmetric ? nullptr : static_cast<const int64_t*>(a.st.w_colsum.raw());
  e.bias = a.bias ? a.bias->raw() : nullptr;
  e.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  e.out = a.out.raw();
  e.out_dtype = a.out.dtype();
  return launch_int8_epilogue(e, a.stream);
}

}  // namespace

Status CudaLinearKernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias,
                                    Tensor& out) const {
  if (!layer.kernel_state) return Status::error("layer " + layer.name + " has no device state");
  const auto& st = *static_cast<const LayerState*>(layer.kernel_state.get());
  const QuantizedTensor* pre = x.is_quantized() ? &x.quantized_tensor() : nullptr;
  const Tensor& xt = pre ? pre->data : x.dense_tensor();
  if (pre) QL_RETURN_IF_ERROR(expect_quantized_on(*pre, st.device));
  QL_RETURN_IF_ERROR(expect_on_device(xt, st.device, "activation"));
  QL_RETURN_IF_ERROR(expect_on_device(out, st.device, "output"));
  if (bias != nullptr) QL_RETURN_IF_ERROR(expect_on_device(*bias, st.device, "bias"));
  if (xt.strides()[0] < layer.config.k) return Status::error("activation rows overlap (row stride < K)");
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(st.device));
  const ApplyCtx ctx{layer.config, st, xt, bias, out, xt.size(0), current_stream(), pre};
  if (family_ == Family::kInt8ScaledMM) return apply_int8(ctx);
  if (pre) return apply_cublaslt(ctx);  // input_quant_key is declared on the cuBLASLt route only
  if (route_ == Route::kDequantBf16) {
    if (!st.bf16_exact) {
      return Status::error("layer " + layer.name + ": its E8M0 scales leave BF16's exact range (dequant_bf16.hpp); "
                           "the streaming kernels take it");
    }
    return apply_dequant_bf16(ctx);
  }
  const bool lt_possible = is_w8a8_fp8(family_) && layer.config.n % 16 == 0;
  const bool large = route_ == Route::kAuto && ctx.m > stream_max_m_;
  if (route_ == Route::kCublasLt || (large && lt_possible)) return apply_cublaslt(ctx);
  if (large && st.bf16_route) return apply_dequant_bf16(ctx);
  return apply_stream(ctx);
}

}  // namespace qlinear::cuda
