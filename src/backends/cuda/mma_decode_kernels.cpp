// The tensor-core decode kernels' checks, weight processing (packing on the host, upload), the weight cache
// and apply (mma_decode_kernels.hpp).
#include "backends/cuda/mma_decode_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/act_quant_bf16.hpp"
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_epilogue_math.hpp"
#include "backends/cuda/mx_fp8_block.hpp"
#include "backends/cuda/mx_fp8_block_math.hpp"
#include "core/processed_io.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear::cuda {

const MmaDecodeLinearKernel kSm90MmaDecodeFp8WeightOnly(
    Family::kFp8WeightOnly, "sm90_mma_decode_fp8_weight_only",
    "sm_90a FP8 W8A16 (per-tensor / per-channel): E4M3 decoded in registers to BF16 before mma.sync, FP32 "
    "accumulation, scales in the epilogue; built for M <= 64 (BF16 activations)");
const MmaDecodeLinearKernel kSm90MmaDecodeMxfp8(
    Family::kMxfp8, "sm90_mma_decode_mxfp8",
    "sm_90a MXFP8 W8A16 / W8A8: E4M3 x E8M0 decoded exactly to BF16 in registers before mma.sync (W8A8: the "
    "activations quantized as the reference does in one pass that writes their exact BF16 values); built for "
    "M <= 64");
const MmaDecodeLinearKernel kSm90MmaDecodeMxfp6(
    Family::kMxfp6, "sm90_mma_decode_mxfp6",
    "sm_90a MXFP6 (E2M3 / E3M2) W6A16 / W6A6 / W6A8: codes x E8M0 decoded exactly to BF16 in registers before "
    "mma.sync (quantized MX activations: quantized as the reference does in one pass that writes their exact "
    "BF16 values; above M = 128 W6A6 runs on FP8 tensor cores, both operands re-scaled exactly to E4M3 per "
    "128 block); built for M <= 64");
const MmaDecodeLinearKernel kSm90MmaDecodeMxfp4(
    Family::kMxfp4, "sm90_mma_decode_mxfp4",
    "sm_90a MXFP4 W4A16 / W4A4 / W4A6 / W4A8: E2M1 x E8M0 decoded exactly to BF16 in registers before mma.sync "
    "(quantized MX or static FP8 activations: quantized as the reference does in one pass that writes their "
    "exact BF16 values, the FP8 scale in the epilogue; above M = 128 W4A4 / W4A6 run on FP8 tensor cores, both "
    "operands re-scaled exactly to E4M3 per 128 block); built for M <= 64");
const MmaDecodeLinearKernel kSm90MmaDecodeNvfp4(
    Family::kNvfp4, "sm90_mma_decode_nvfp4",
    "sm_90a NVFP4 W4A16 / W4A4: E2M1 x E4M3 (per 16) decoded exactly to BF16 in registers before mma.sync (W4A4: "
    "the activations quantized as the reference does, static or per-call global scale, in one pass that writes "
    "their exact BF16 values), global scales in the epilogue; built for M <= 64");

namespace {

struct MmaLayerState {
  MmaLayout layout;
  bool fold = true;
  int device = 0;
  int sm_count = 132;
  const char* device_name = nullptr;  // the tuned table's key (table_device_name)
  Tensor w;          // u8 [weight_bytes]
  Tensor w_scale;    // u8 [scale_bytes] (MX, NVFP4)
  Tensor row_factor;  // f64 [N, 2]: MmaFactor per row (per-channel FP8: the scale; NVFP4: 2^8 / g and g / 2^8)
  // Quantized activations: the layer's static input scale (FP8 per tensor) or input global scale (NVFP4).
  float in_scale = 1.0f;
  float in_global = 1.0f;
  // The FP8 block route of large M (mx_fp8_block.hpp), for layers with MX activations whose weight blocks
  // fit E4M3: the per-block exponents [ceil(N/128), K/128] (I32) and cuBLASLt's scale grid (F32).
  bool fp8_block = false;
  std::string fp8_block_why_not;
  Tensor blk_exp, blk_scale;
  int blk_exp_min = 0, blk_exp_max = 0;
  Tensor w_fp8;  // the weights widened once to E4M3 [N, K] (QLINEAR_MX_FP8_BLOCK=keep), else undefined
};

// The name the tuned table (tuning/mma_decode_table.hpp) knows this device by, read once per device (the
// string lives as long as the process); null when it cannot be read or QLINEAR_MMA_DECODE_TABLE=off (the
// built-in rules only, to measure what the table gains).
const char* table_device_name(int device) {
  static const bool table_off = [] {
    const char* v = std::getenv("QLINEAR_MMA_DECODE_TABLE");
    return v != nullptr && std::string(v) == "off";
  }();
  const std::string& name = device_name(device);
  return table_off || name.empty() ? nullptr : name.c_str();
}

// How a layer's quantized activations are made (act_quant_bf16.hpp), or why this kernel cannot.
struct ActPlan {
  ActBf16Mode mode = ActBf16Mode::kMx32;
  ActElem elem = ActElem::kE4M3;
  ActMxRule rule = ActMxRule::kCeilOverMax;
  bool static_scale = false;     // kFp8Static: the layer's input_scale
  bool static_global = false;    // kNvfp4: the layer's input_global_scale (else per call)
};

std::optional<ActElem> act_elem_of(DType d) {
  switch (d) {
    case DType::kF8E4M3: return ActElem::kE4M3;
    case DType::kF6E2M3: return ActElem::kE2M3;
    case DType::kF6E3M2: return ActElem::kE3M2;
    case DType::kF4E2M1: return ActElem::kE2M1;
    default: return std::nullopt;
  }
}

Result<ActPlan> act_plan_of(const LinearConfig& c) {
  const QuantKey& a = *c.activation_key;
  ActPlan p;
  if (c.family == Family::kNvfp4) {
    if (a != kNvfp4Dynamic && a != kNvfp4DynamicGlobal) {
      return Status::error("NVFP4 activations other than dynamic E2M1 x E4M3 per 16 are not quantized here");
    }
    p.mode = ActBf16Mode::kNvfp4;
    p.static_global = a.scale2 && a.scale2->is_static;
    return p;
  }
  if (c.family != Family::kMxfp8 && c.family != Family::kMxfp6 && c.family != Family::kMxfp4) {
    return Status::error("quantized activations on " + std::string(family_name(c.family)) + " weights");
  }
  if (a.scale.dtype == DType::kE8M0) {
    const std::optional<ActElem> e = act_elem_of(a.dtype);
    if (!e || a.scale.is_static || a.scale.group != kMxBlock) {
      return Status::error("MX activations " + key_name(a) + ": only dynamic E4M3/E2M3/E3M2/E2M1 per 32");
    }
    p.elem = *e;
    p.rule = default_mx_rule(a) == MxScaleRule::kQuarkEven ? ActMxRule::kQuarkEven : ActMxRule::kCeilOverMax;
    return p;
  }
  if (a == kFp8StaticTensorSym && c.family == Family::kMxfp4) {
    p.mode = ActBf16Mode::kFp8Static;
    p.elem = ActElem::kE4M3;
    p.static_scale = true;
    return p;
  }
  return Status::error("activations " + key_name(a) + " on MX weights are not quantized on the GPU (dynamic MX "
                       "per 32, or static per-tensor FP8 on MXFP4 weights, are)");
}

// The FP8 block route's element formats: MX E2M1 / E2M3 / E3M2 weights with dynamic MX activations of
// those formats (mx_fp8_block_math.hpp), or why not.
Result<std::pair<ActElem, ActElem>> fp8_block_elems(const LinearConfig& c) {
  if (!c.activation_key) return Status::error("BF16 activations");
  QL_ASSIGN_OR_RETURN(const ActPlan plan, act_plan_of(c));
  const std::optional<ActElem> w = act_elem_of(c.weight_key.dtype);
  if (plan.mode != ActBf16Mode::kMx32 || plan.elem == ActElem::kE4M3 || c.family == Family::kMxfp8 || !w) {
    return Status::error("only MXFP4 / MXFP6 weights with MXFP4 / MXFP6 activations take it");
  }
  if (c.k % 128 != 0) return Status::error("K=" + std::to_string(c.k) + " is not a multiple of 128");
  return std::pair{*w, plan.elem};
}

const std::string kFp8BlockRoute =
    "activations quantized per 32 and re-scaled per 128 block to exact E4M3 codes, weights widened per call to "
    "exact E4M3 with a 128x128 block scale, cuBLASLt block-scaled FP8 GEMM (FP8 tensor-core sums promoted per 128 "
    "K), rows whose blocks leave E4M3's window recomputed exactly in FP32";

// QLINEAR_MX_FP8_BLOCK: "off" keeps every M on the BF16 routes (to measure what the route gains); "keep"
// widens the weights to E4M3 once, at process / import, and keeps them (N x K bytes of device memory more
// per layer) instead of widening them per call.
const std::string& fp8_block_env() {
  static const std::string v = [] {
    const char* e = std::getenv("QLINEAR_MX_FP8_BLOCK");
    return std::string(e != nullptr ? e : "");
  }();
  return v;
}

// Whether apply takes the FP8 block route at M, for a layer whose plan fits: above kMmaWidenAboveM unless
// forced (MmaDecodeForce::mx_fp8_block) or turned off.
bool takes_fp8_block(int64_t m) {
  const bool off = fp8_block_env() == "off";
  const int forced = mma_decode_forced().mx_fp8_block;
  if (off && forced == 0) return false;
  return forced > 0 || (forced == 0 && m > kMmaWidenAboveM);
}

// What explain says about the activations.
std::string act_plan_note(const ActPlan& p) {
  switch (p.mode) {
    case ActBf16Mode::kMx32:
      return std::string("activations quantized per 32 (") +
             (p.rule == ActMxRule::kQuarkEven ? "Quark even" : "ceil over max") +
             " rule) to exact BF16 values in one pass";
    case ActBf16Mode::kNvfp4:
      return std::string("activations quantized NVFP4 per 16 (") + (p.static_global ? "static" : "per-call") +
             " global scale) to exact BF16 values in one pass, the division by g in the f64 epilogue";
    case ActBf16Mode::kFp8Static:
      return "activations quantized to static per-tensor FP8 (exact BF16 values in one pass), the scale in the "
             "epilogue";
  }
  return "";
}

// The largest element of a host f32 tensor (a fused layer's static scales, one per shard: vLLM's max()).
Result<float> max_param(const LinearLayer& layer, const char* name) {
  QL_ASSIGN_OR_RETURN(Tensor t, layer.get(name));
  if (t.device().kind != DeviceKind::kCpu || t.dtype() != DType::kF32 || t.numel() == 0) {
    return Status::error("layer " + layer.name + ": " + name + " must be a non-empty f32 host tensor, got " +
                         t.describe());
  }
  const Tensor s = t.contiguous();
  return *std::max_element(s.data<float>(), s.data<float>() + s.numel());
}

MmaLayout layout_of(const LinearConfig& c) {
  MmaLayout l;
  l.n = c.n;
  l.k = c.k;
  switch (c.weight_key.dtype) {
    case DType::kF6E2M3: l.code = MmaCode::kE2M3; break;
    case DType::kF6E3M2: l.code = MmaCode::kE3M2; break;
    case DType::kF4E2M1: l.code = MmaCode::kE2M1; break;
    default: l.code = MmaCode::kE4M3; break;
  }
  l.scale = c.family == Family::kNvfp4 ? MmaScale::kNv16
            : c.family == Family::kFp8WeightOnly ? MmaScale::kRow
                                                 : MmaScale::kMx32;
  return l;
}

Status expect_host(const Tensor& t, const std::string& what) {
  if (t.device().kind != DeviceKind::kCpu) {
    return Status::error("checkpoint tensor '" + what + "' is on " + t.device().to_string() +
                         "; process_weights_after_loading reads host tensors");
  }
  return Status::ok();
}

// One factor per output row from an f32 per-tensor ([], [1]), per-shard ([shards]) or per-channel ([N], [N, 1])
// tensor, through f(value).
template <class F>
std::vector<MmaFactor> per_row(const LinearConfig& c, const Tensor& t, bool per_channel, F&& f) {
  const Tensor s = t.contiguous();
  const float* p = s.data<float>();
  std::vector<MmaFactor> rows(static_cast<size_t>(c.n));
  if (per_channel) {
    for (int64_t r = 0; r < c.n; ++r) rows[r] = f(p[r]);
    return rows;
  }
  int64_t row = 0;
  for (int64_t shard = 0; shard < c.num_shards(); ++shard) {
    const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[shard];
    std::fill(rows.begin() + row, rows.begin() + row + width, f(p[s.numel() == 1 ? 0 : shard]));
    row += width;
  }
  return rows;
}

// The weight plan of the FP8 block route on the device.
Status upload_fp8_plan(MmaLayerState& st, const MxFp8WeightPlan& plan, int64_t n, int64_t k) {
  const int64_t rb = (n + 127) / 128, kb = k / 128, ld = (kb + 3) / 4 * 4;
  if (plan.row_blocks != rb || plan.k_blocks != kb || static_cast<int64_t>(plan.exponent.size()) != rb * kb ||
      static_cast<int64_t>(plan.scale.size()) != rb * ld) {
    return Status::error("FP8 block plan of " + std::to_string(plan.row_blocks) + " x " + std::to_string(plan.k_blocks) +
                         " blocks does not match N=" + std::to_string(n) + ", K=" + std::to_string(k));
  }
  QL_ASSIGN_OR_RETURN(st.blk_exp, upload(plan.exponent.data(), plan.exponent.size() * 4, DType::kI32, {rb * kb}, st.device));
  QL_ASSIGN_OR_RETURN(st.blk_scale, upload(plan.scale.data(), plan.scale.size() * 4, DType::kF32, {rb, ld}, st.device));
  st.blk_exp_min = plan.exp_min;
  st.blk_exp_max = plan.exp_max;
  st.fp8_block = true;
  if (fp8_block_env() == "keep") {
    QL_ASSIGN_OR_RETURN(st.w_fp8, empty(DType::kF8E4M3, {n, k}, st.device));
    MmaDecodeArgs a;
    a.layout = st.layout;
    a.w = static_cast<const uint8_t*>(st.w.raw());
    a.w_scale = static_cast<const uint8_t*>(st.w_scale.raw());
    a.sm_count = st.sm_count;
    QL_RETURN_IF_ERROR(mma_detail::widen_fp8(a, static_cast<const int32_t*>(st.blk_exp.raw()),
                                             static_cast<uint8_t*>(st.w_fp8.raw()), current_stream()));
  }
  return Status::ok();
}

const char* const kMetaNames[] = {"code", "scale", "n", "k"};
std::vector<int64_t> meta_of(const MmaLayout& l) {
  return {static_cast<int64_t>(l.code), static_cast<int64_t>(l.scale), l.n, l.k};
}

}  // namespace

Verdict MmaDecodeLinearKernel::is_supported(const Platform& platform) const {
  if (platform.kind != PlatformKind::kCuda || !platform.cuda) return Verdict::no("not a CUDA platform");
  if (platform.cuda->compute_capability != 90) {
    return Verdict::no("compute capability " + std::to_string(platform.cuda->compute_capability) +
                       ": built for sm_90a (Hopper) only");
  }
  return Verdict::yes();
}

Verdict MmaDecodeLinearKernel::can_implement(const LinearConfig& c) const {
  if (c.family != family_) return Verdict::no("layer family is " + std::string(family_name(c.family)));
  if (c.activation_key) {
    const Result<ActPlan> plan = act_plan_of(c);
    if (!plan) return Verdict::no("quantized activations: " + plan.message());
    return Verdict::yes();  // any input dtype: the quantizer reads it, the kernel sees exact BF16 values
  }
  if (c.input_dtype != DType::kBF16) {
    return Verdict::no("activations are " + std::string(qlinear::name(c.input_dtype)) +
                       "; the BF16 tensor-core decode takes BF16 activations only");
  }
  if (c.k % 8 != 0) return Verdict::no("K=" + std::to_string(c.k) + " is not a multiple of 8 (16-byte BF16 rows)");
  if (family_ == Family::kFp8WeightOnly) {
    if (c.weight_key.dtype != DType::kF8E4M3) return Verdict::no("weights are not E4M3");
    if (!c.weight_key.scale.group.is_per_tensor() && !c.weight_key.scale.group.is_per_channel()) {
      return Verdict::no("weight scales are neither per-tensor nor per-channel (128x128 blocks take other kernels)");
    }
  }
  return Verdict::yes();
}

bool mma_decode_folds_scales(const LinearLayer& layer) {
  const auto* st = static_cast<const MmaLayerState*>(layer.kernel_state.get());
  return st != nullptr && st->fold;
}

int mma_decode_splits_for(const LinearLayer& layer, int64_t m) {
  const auto* st = static_cast<const MmaLayerState*>(layer.kernel_state.get());
  if (st == nullptr) return 0;
  MmaDecodeArgs a;
  a.layout = st->layout;
  a.m = m;
  a.sm_count = st->sm_count;
  a.device_name = st->device_name;
  a.programmatic = layer.config.activation_key.has_value();  // as apply launches it
  return mma_decode_splits(a);
}

std::string mma_decode_route_for(const LinearLayer& layer, int64_t m) {
  const auto* st = static_cast<const MmaLayerState*>(layer.kernel_state.get());
  if (st == nullptr) return "not processed";
  if (st->fp8_block && takes_fp8_block(m)) {
    return kFp8BlockRoute + (st->w_fp8.defined() ? "; the E4M3 weights kept since process (QLINEAR_MX_FP8_BLOCK=keep)" : "");
  }
  const std::string not_fp8 = !st->fp8_block && fp8_block_elems(layer.config) && takes_fp8_block(m)
                                  ? " (FP8 block route not taken: " + st->fp8_block_why_not + ")"
                                  : "";
  MmaDecodeArgs a;
  a.layout = st->layout;
  a.fold = st->fold;
  a.m = m;
  a.sm_count = st->sm_count;
  a.device_name = st->device_name;
  a.programmatic = layer.config.activation_key.has_value();
  return mma_route_description(a) + not_fp8;
}

int64_t mma_decode_weight_bytes(const LinearLayer& layer) {
  const auto* st = static_cast<const MmaLayerState*>(layer.kernel_state.get());
  return st == nullptr ? 0 : st->layout.weight_bytes() + st->layout.scale_bytes();
}

int64_t MmaDecodeLinearKernel::max_m() const { return kMmaDecodeMaxM; }

std::vector<MRoute> MmaDecodeLinearKernel::m_routes(const LinearConfig& config) const {
  MmaDecodeArgs a;
  a.layout = layout_of(config);
  const std::string self(name());
  // MX layers whose E8M0 scales do not fold exactly into BF16 (decided at process) take the promoted path.
  const bool mx = config.family != Family::kFp8WeightOnly && config.family != Family::kNvfp4;
  // Quantized activations: the same routes after one pass that writes their exact BF16 values.
  std::string act;
  if (config.activation_key) {
    if (const Result<ActPlan> plan = act_plan_of(config)) act = "; " + act_plan_note(*plan);
  }
  // The routes on the current GPU (its tuned table entries), when there is one.
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) a.device_name = table_device_name(device);
  const bool fp8 = fp8_block_elems(config).is_ok();
  std::vector<MRoute> routes;
  int64_t lo = 1;
  const std::vector<int64_t> ends = mma_route_bucket_ends(a);
  a.programmatic = config.activation_key.has_value();  // after the activation pass (mma_decode.hpp)
  for (size_t i = 0; i <= ends.size(); ++i) {
    const int64_t hi = i < ends.size() ? ends[i] : MRoute::kNoLimit;
    a.m = i < ends.size() ? hi : lo;
    a.fold = true;
    std::string why = mma_route_description(a);
    if (mx) {
      a.fold = false;
      why += "; MX layers whose scales do not fold: " + mma_route_description(a);
    }
    if (fp8 && takes_fp8_block(lo)) {
      why = "layers whose 128x128 weight blocks fit E4M3 (checked at load): " + kFp8BlockRoute + "; the others: " + why;
    }
    routes.push_back({lo, hi, self, why + act});
    lo = hi + 1;
  }
  return routes;
}

Status MmaDecodeLinearKernel::process_impl(LinearLayer& layer) const {
  const LinearConfig& c = layer.config;
  QL_ASSIGN_OR_RETURN(Tensor weight, layer.get("weight"));
  QL_ASSIGN_OR_RETURN(Tensor scale, layer.get("weight_scale"));
  QL_RETURN_IF_ERROR(expect_host(weight, "weight"));
  QL_RETURN_IF_ERROR(expect_host(scale, "weight_scale"));
  auto st = std::make_shared<MmaLayerState>();
  QL_CUDA_CHECK(cudaGetDevice(&st->device));
  QL_CUDA_CHECK(cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device));
  st->device_name = table_device_name(st->device);
  st->layout = layout_of(c);
  const MmaLayout& l = st->layout;

  const Tensor wc = weight.contiguous();
  const std::vector<uint8_t> packed =
      mma_pack_weight(l, static_cast<const uint8_t*>(wc.raw()), storage_bytes(c.weight_key.dtype, c.k));
  QL_ASSIGN_OR_RETURN(st->w, upload(packed.data(), packed.size(), DType::kU8, {l.weight_bytes()}, st->device));

  if (l.scale == MmaScale::kRow) {
    const std::vector<MmaFactor> rows = per_row(c, scale, c.weight_key.scale.group.is_per_channel(), mma_multiplier);
    QL_ASSIGN_OR_RETURN(st->row_factor, upload(rows.data(), rows.size() * sizeof(MmaFactor), DType::kF64, {c.n, 2}, st->device));
  } else {
    const Tensor sc = scale.contiguous();
    const uint8_t* sb = static_cast<const uint8_t*>(sc.raw());
    if (l.scale == MmaScale::kMx32) {
      int lo = 0, hi = 0;
      mma_fold_range(l.code, lo, hi);
      const auto [mn, mx] = std::minmax_element(sb, sb + sc.nbytes());
      st->fold = sc.nbytes() == 0 || (*mn >= lo && *mx <= hi);
    } else {
      QL_ASSIGN_OR_RETURN(Tensor global, layer.get("weight_global_scale"));
      QL_RETURN_IF_ERROR(expect_host(global, "weight_global_scale"));
      // x = q * s / g: the kernel's folded weights are q * s * 2^-8, so rows divide by g / 2^8
      // (mma_epilogue_math.hpp).
      const std::vector<MmaFactor> rows = per_row(c, global, false, mma_nvfp4_row_factor);
      for (const MmaFactor& f : rows) {
        if (!std::isfinite(f.scale) || !(f.divisor > 0)) {
          return Status::error("layer " + layer.name + ": weight_global_scale g = " + std::to_string(256 * f.divisor) +
                               " must be finite and > 0, with 2^8 / g finite");
        }
      }
      QL_ASSIGN_OR_RETURN(st->row_factor, upload(rows.data(), rows.size() * sizeof(MmaFactor), DType::kF64, {c.n, 2}, st->device));
    }
    const std::vector<uint8_t> ps = mma_pack_scales(l, sb);
    QL_ASSIGN_OR_RETURN(st->w_scale, upload(ps.data(), ps.size(), DType::kU8, {l.scale_bytes()}, st->device));
    if (const auto elems = fp8_block_elems(c); !elems) {
      st->fp8_block_why_not = elems.message();
    } else if (!st->fold) {
      st->fp8_block_why_not = "the weights' E8M0 scales leave the fold range";
    } else {
      const MxFp8WeightPlan plan = mx_fp8_plan_weights(
          elems->first, c.n, c.k, sb, mx_fp8_nonzero_groups(elems->first, c.n, c.k, static_cast<const uint8_t*>(wc.raw())));
      if (plan.ok) {
        QL_RETURN_IF_ERROR(upload_fp8_plan(*st, plan, c.n, c.k));
      } else {
        st->fp8_block_why_not = plan.why_not;
      }
    }
  }
  if (c.activation_key) {
    QL_ASSIGN_OR_RETURN(const ActPlan plan, act_plan_of(c));
    if (plan.static_scale) {
      QL_ASSIGN_OR_RETURN(st->in_scale, max_param(layer, "input_scale"));
    }
    if (plan.static_global) {
      QL_ASSIGN_OR_RETURN(st->in_global, max_param(layer, "input_global_scale"));
      // The epilogue divides by it (mma_epilogue_math.hpp), as the reference does, which refuses the same.
      if (!std::isfinite(st->in_global) || !(st->in_global > 0)) {
        return Status::error("layer " + layer.name + ": input_global_scale = " + std::to_string(st->in_global) +
                             " must be finite and > 0");
      }
    }
  }
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  layer.kernel_state = std::move(st);
  return Status::ok();
}

// Processed layout version 6 (mma_layout.hpp: E2M1 codes as selector fields, one scale record per row pair;
// 5 had no FP8 block plan, 4 f32 row scales): meta I64 [code, scale, n, k] (checked against the config),
// flags I64 [fold, fp8_block, blk_exp_min, blk_exp_max], act_scalars F32 [in_scale, in_global] (the static
// activation scales; 1 where none), w U8 [weight_bytes], w_scale U8 [scale_bytes] (MX, NVFP4), row_factor
// F64 [N, 2] (FP8 per-channel, NVFP4: MmaFactor per row), blk_exp I32 [ceil(N/128) * K/128] (fp8_block).
Result<ProcessedWeights> MmaDecodeLinearKernel::export_impl(const LinearLayer& layer) const {
  namespace io = processed_io;
  const auto* st = static_cast<const MmaLayerState*>(layer.kernel_state.get());
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(st->device));
  ProcessedWeights w;
  w.tensors.emplace_back("meta", io::meta_tensor(meta_of(st->layout)));
  w.tensors.emplace_back("flags", io::meta_tensor({st->fold ? 1 : 0, st->fp8_block ? 1 : 0, st->blk_exp_min, st->blk_exp_max}));
  w.tensors.emplace_back("act_scalars", io::from_vector(std::vector<float>{st->in_scale, st->in_global}, DType::kF32));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"w", &st->w}, {"w_scale", &st->w_scale},
                                {"row_factor", &st->row_factor}, {"blk_exp", &st->blk_exp}}) {
    if (!t->defined()) continue;
    QL_ASSIGN_OR_RETURN(Tensor host, to_host(*t));
    w.tensors.emplace_back(name, std::move(host));
  }
  return w;
}

Status MmaDecodeLinearKernel::import_impl(LinearLayer& layer, const ProcessedWeights& w) const {
  namespace io = processed_io;
  const LinearConfig& c = layer.config;
  auto st = std::make_shared<MmaLayerState>();
  st->layout = layout_of(c);
  const MmaLayout& l = st->layout;
  QL_RETURN_IF_ERROR(io::expect_meta(w, meta_of(l), {std::begin(kMetaNames), std::end(kMetaNames)}));
  std::vector<int64_t> flags;
  QL_RETURN_IF_ERROR(io::to_vector(w, "flags", DType::kI64, 4, flags));
  st->fold = flags[0] != 0;
  std::vector<float> act_scalars;
  QL_RETURN_IF_ERROR(io::to_vector(w, "act_scalars", DType::kF32, 2, act_scalars));
  st->in_scale = act_scalars[0];
  st->in_global = act_scalars[1];
  QL_CUDA_CHECK(cudaGetDevice(&st->device));
  QL_CUDA_CHECK(cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device));
  st->device_name = table_device_name(st->device);
  auto load = [&](const char* name, DType dtype, const Shape& shape, Tensor& dst) -> Status {
    QL_ASSIGN_OR_RETURN(Tensor host, expect_processed_tensor(w, name, dtype, shape));
    QL_ASSIGN_OR_RETURN(dst, upload(host.raw(), static_cast<size_t>(host.nbytes()), dtype, shape, st->device));
    return Status::ok();
  };
  QL_RETURN_IF_ERROR(load("w", DType::kU8, {l.weight_bytes()}, st->w));
  if (l.scale != MmaScale::kRow) QL_RETURN_IF_ERROR(load("w_scale", DType::kU8, {l.scale_bytes()}, st->w_scale));
  if (l.scale != MmaScale::kMx32) QL_RETURN_IF_ERROR(load("row_factor", DType::kF64, {c.n, 2}, st->row_factor));
  if (flags[1] != 0) {
    MxFp8WeightPlan plan;
    plan.row_blocks = (c.n + 127) / 128;
    plan.k_blocks = c.k / 128;
    QL_ASSIGN_OR_RETURN(Tensor host, expect_processed_tensor(w, "blk_exp", DType::kI32, {plan.row_blocks * plan.k_blocks}));
    plan.exponent.assign(host.data<int32_t>(), host.data<int32_t>() + host.numel());
    plan.exp_min = static_cast<int>(flags[2]);
    plan.exp_max = static_cast<int>(flags[3]);
    mx_fp8_fill_scales(plan);
    QL_RETURN_IF_ERROR(upload_fp8_plan(*st, plan, c.n, c.k));
  } else if (fp8_block_elems(c).is_ok()) {
    // What process found (mx_fp8_plan_weights names the block; the cache entry keeps only the verdict).
    st->fp8_block_why_not = !st->fold ? "the weights' E8M0 scales leave the fold range"
                                      : "a 128x128 weight block spans more octaves than E4M3 holds (loading "
                                        "without the weight cache names the block)";
  }
  QL_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  layer.kernel_state = std::move(st);
  return Status::ok();
}

// The decode GEMM's arguments that come from the layer's state and the call's M, bias and output.
MmaDecodeArgs layer_gemm_args(const MmaLayerState& st, int64_t m, const Tensor* bias, Tensor& out) {
  MmaDecodeArgs a;
  a.layout = st.layout;
  a.fold = st.fold;
  a.w = static_cast<const uint8_t*>(st.w.raw());
  a.w_scale = st.w_scale.defined() ? static_cast<const uint8_t*>(st.w_scale.raw()) : nullptr;
  a.row_factor = st.row_factor.defined() ? static_cast<const MmaFactor*>(st.row_factor.raw()) : nullptr;
  a.m = m;
  a.bias = bias ? bias->raw() : nullptr;
  a.bias_dtype = bias ? bias->dtype() : DType::kF32;
  a.out = out.raw();
  a.out_dtype = out.dtype();
  a.sm_count = st.sm_count;
  a.device_name = st.device_name;
  return a;
}

Status MmaDecodeLinearKernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias,
                                         Tensor& out) const {
  if (!layer.kernel_state) return Status::error("layer " + layer.name + " has no device state");
  if (x.is_quantized()) return Status::error("layer " + layer.name + ": this kernel takes dense activations");
  const auto& st = *static_cast<const MmaLayerState*>(layer.kernel_state.get());
  const LinearConfig& c = layer.config;
  const Tensor& xt = x.dense_tensor();
  QL_RETURN_IF_ERROR(expect_on_device(xt, st.device, "activation"));
  QL_RETURN_IF_ERROR(expect_on_device(out, st.device, "output"));
  if (bias != nullptr) QL_RETURN_IF_ERROR(expect_on_device(*bias, st.device, "bias"));
  if (xt.strides()[1] != 1 || xt.strides()[0] < c.k) {
    return Status::error("layer " + layer.name + ": activation rows must be contiguous and not overlap");
  }
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(st.device));
  const Stream stream = current_stream();
  const int64_t m = xt.size(0);
  const void* xb = xt.raw();
  int64_t ld = xt.strides()[0];
  if (st.fp8_block && m > 0 && takes_fp8_block(m)) {
    if (!out.is_contiguous()) return Status::error("layer " + layer.name + ": the output must be contiguous");
    QL_ASSIGN_OR_RETURN(const ActPlan plan, act_plan_of(c));
    MxFp8BlockArgs f;
    f.gemm.layout = st.layout;
    f.gemm.fold = st.fold;
    f.gemm.w = static_cast<const uint8_t*>(st.w.raw());
    f.gemm.w_scale = static_cast<const uint8_t*>(st.w_scale.raw());
    f.gemm.x = xt.raw();
    f.gemm.ld_x = xt.strides()[0];
    f.gemm.m = m;
    f.gemm.bias = bias ? bias->raw() : nullptr;
    f.gemm.bias_dtype = bias ? bias->dtype() : DType::kF32;
    f.gemm.out = out.raw();
    f.gemm.out_dtype = out.dtype();
    f.gemm.sm_count = st.sm_count;
    f.x_dtype = xt.dtype();
    f.act_elem = plan.elem;
    f.act_rule = plan.rule;
    f.blk_exp = static_cast<const int32_t*>(st.blk_exp.raw());
    f.blk_scale = static_cast<const float*>(st.blk_scale.raw());
    f.weight_exp_min = st.blk_exp_min;
    f.weight_exp_max = st.blk_exp_max;
    f.w_fp8 = st.w_fp8.defined() ? static_cast<const uint8_t*>(st.w_fp8.raw()) : nullptr;
    return launch_mx_fp8_block_gemm(f, stream);
  }
  Scratch widened;
  MmaFactor* factor = nullptr;
  if (c.activation_key && m > 0) {
    // Quantized activations: one pass writes the exact BF16 values of the reference's quantization and the
    // factor that does not fold into them (act_quant_bf16.hpp states the exactness range).
    QL_ASSIGN_OR_RETURN(const ActPlan plan, act_plan_of(c));
    // One stream-ordered buffer: the BF16 values, then (16-byte aligned) the factor (two f64) and the u32
    // |x| max scratch.
    const size_t values_bytes = static_cast<size_t>((m * c.k * 2 + 15) / 16 * 16);
    QL_ASSIGN_OR_RETURN(widened, Scratch::make(values_bytes + sizeof(MmaFactor) + 16, stream));
    char* tail = static_cast<char*>(widened.get()) + values_bytes;
    ActBf16Args q;
    q.x = xt.raw();
    q.x_dtype = xt.dtype();
    q.m = m;
    q.k = c.k;
    q.ld_x = ld;
    q.mode = plan.mode;
    q.elem = plan.elem;
    q.rule = plan.rule;
    q.static_scale = st.in_scale;
    q.global_scale = st.in_global;
    q.dynamic_global = plan.mode == ActBf16Mode::kNvfp4 && !plan.static_global;
    q.out = widened.get();
    q.ld_out = c.k;
    if (plan.mode != ActBf16Mode::kMx32) factor = q.factor = reinterpret_cast<MmaFactor*>(tail);
    if (q.dynamic_global) q.amax_scratch = reinterpret_cast<uint32_t*>(tail + sizeof(MmaFactor));
    QL_RETURN_IF_ERROR(launch_act_quant_bf16(q, stream));
    xb = widened.get();
    ld = c.k;
  }
  if (ld % 8 != 0 || reinterpret_cast<uintptr_t>(xb) % 16 != 0) {
    return Status::error("layer " + layer.name + ": activation rows must be contiguous, 16-byte aligned, with a "
                         "row stride that is a multiple of 8 elements (got stride " + std::to_string(ld) + ")");
  }
  if (!out.is_contiguous()) return Status::error("layer " + layer.name + ": the output must be contiguous");
  MmaDecodeArgs a = layer_gemm_args(st, m, bias, out);
  a.x = xb;
  a.ld_x = ld;
  a.x_factor = factor;  // null unless the activations carry a factor
  a.x_factor_stride = 0;
  a.programmatic = c.activation_key && m > 0 && !mma_decode_forced().no_programmatic;
  return launch_mma_decode(a, stream);
}

}  // namespace qlinear::cuda
