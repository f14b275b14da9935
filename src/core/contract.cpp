// The per-family contract: which quantization keys a family admits, which checkpoint tensors a layer of it
// carries (names, dtypes, shapes), and what makes a config well-formed. Kernels build on this; it is the
// single place the layout of every family's tensors is written down (see docs/FORMATS.md).
#include <array>

#include "qlinear/kernel.hpp"

namespace qlinear {

namespace {

constexpr std::array kFp8WeightKeys = {kFp8StaticTensorSym, kFp8StaticChannelSym};
constexpr std::array kFp8ActKeys = {kFp8StaticTensorSym, kFp8DynamicTensorSym, kFp8DynamicTokenSym};
constexpr std::array kInt8WeightKeys = {kInt8StaticChannelSym, kInt8StaticTensorSym};
constexpr std::array kInt8ActKeys = {kInt8StaticTensorSym, kInt8StaticTensorAsym, kInt8DynamicTokenSym,
                                     kInt8DynamicTokenAsym};
constexpr std::array kFp8BlockWeightKeys = {kFp8Static128BlockSym};
constexpr std::array kFp8BlockActKeys = {kFp8Dynamic128Sym};
constexpr std::array kFp8WeightOnlyKeys = {kFp8StaticTensorSym, kFp8StaticChannelSym, kFp8Static128BlockSym};
constexpr std::array<QuantKey, 0> kNoKeys = {};
constexpr std::array kMxfp8WeightKeys = {kMxfp8Static};
constexpr std::array kMxfp8ActKeys = {kMxfp8Dynamic};
constexpr std::array kMxfp6WeightKeys = {kMxfp6E2M3Static, kMxfp6E3M2Static};
constexpr std::array kMxfp6ActKeys = {kMxfp8Dynamic, kMxfp6E2M3Dynamic, kMxfp6E3M2Dynamic, kMxfp4Dynamic};
constexpr std::array kMxfp4WeightKeys = {kMxfp4Static};
constexpr std::array kMxfp4ActKeys = {kMxfp8Dynamic, kMxfp6E2M3Dynamic, kMxfp4Dynamic, kFp8StaticTensorSym};
constexpr std::array kNvfp4WeightKeys = {kNvfp4Static};
constexpr std::array kNvfp4ActKeys = {kNvfp4Dynamic, kNvfp4DynamicGlobal};

const std::array<FamilyContract, kNumFamilies> kContracts = {{
    {Family::kFp8ScaledMM, kFp8WeightKeys, kFp8ActKeys, false},
    {Family::kInt8ScaledMM, kInt8WeightKeys, kInt8ActKeys, false},
    {Family::kFp8BlockScaled, kFp8BlockWeightKeys, kFp8BlockActKeys, false},
    {Family::kFp8WeightOnly, kFp8WeightOnlyKeys, kNoKeys, true},
    {Family::kMxfp8, kMxfp8WeightKeys, kMxfp8ActKeys, true},
    {Family::kMxfp6, kMxfp6WeightKeys, kMxfp6ActKeys, true},
    {Family::kMxfp4, kMxfp4WeightKeys, kMxfp4ActKeys, true},
    {Family::kNvfp4, kNvfp4WeightKeys, kNvfp4ActKeys, true},
}};

bool contains(std::span<const QuantKey> keys, const QuantKey& key) {
  for (const QuantKey& k : keys) {
    if (k == key) return true;
  }
  return false;
}

std::string key_list(std::span<const QuantKey> keys) {
  std::string s;
  for (const QuantKey& k : keys) s += (s.empty() ? "" : ", ") + key_name(k);
  return s.empty() ? "none" : s;
}

bool is_activation_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// Elements along K that one weight scale covers, or 0 when the scale spans all of K.
int64_t weight_block_k(const QuantKey& key) { return key.scale.group.col > 0 ? key.scale.group.col : 0; }

}  // namespace

const FamilyContract& family_contract(Family family) { return kContracts[static_cast<size_t>(family)]; }

Verdict check_config(const LinearConfig& c) {
  const FamilyContract& contract = family_contract(c.family);
  const std::string fam(family_name(c.family));
  if (!contains(contract.weight_keys, c.weight_key)) {
    return Verdict::no(fam + " weights must be one of {" + key_list(contract.weight_keys) + "}, got " +
                       key_name(c.weight_key));
  }
  if (c.activation_key && !contains(contract.activation_keys, *c.activation_key)) {
    std::string why = fam + " activations must be one of {" + key_list(contract.activation_keys) + "}";
    if (contract.allows_unquantized_activations) why += " or unquantized";
    if (c.family == Family::kFp8BlockScaled && c.activation_key->scale.is_static) {
      why += "; only dynamic per-token-group activation quantization is supported";
    }
    return Verdict::no(why + ", got " + key_name(*c.activation_key));
  }
  if (!c.activation_key && !contract.allows_unquantized_activations) {
    return Verdict::no(fam + " needs quantized activations (one of {" + key_list(contract.activation_keys) +
                       "}); use a weight-only scheme for unquantized activations");
  }
  if (!is_activation_dtype(c.input_dtype)) {
    return Verdict::no("input dtype must be f32, bf16 or f16, got " + std::string(name(c.input_dtype)));
  }
  if (!is_activation_dtype(c.out_dtype)) {
    return Verdict::no("output dtype must be f32, bf16 or f16, got " + std::string(name(c.out_dtype)));
  }
  if (c.n <= 0 || c.k <= 0) {
    return Verdict::no("weight shape must be positive, got N=" + std::to_string(c.n) + " K=" + std::to_string(c.k));
  }
  if (!c.logical_widths.empty()) {
    int64_t sum = 0;
    for (int64_t w : c.logical_widths) {
      if (w < 0) return Verdict::no("fused shard width " + std::to_string(w) + " is negative");
      sum += w;
    }
    if (sum != c.n) {
      return Verdict::no("fused shard widths sum to " + std::to_string(sum) + " but N=" + std::to_string(c.n));
    }
  }
  // Block formats: K must hold whole blocks (the scale tensor has K/block columns).
  const int64_t wk = weight_block_k(c.weight_key);
  if (c.weight_key.scale.dtype != DType::kF32 && wk > 0 && c.k % wk != 0) {
    return Verdict::no("K=" + std::to_string(c.k) + " is not a multiple of " + std::to_string(wk) + " (" +
                       (wk == 32 ? "MX block" : "NVFP4 block") + ")");
  }
  if (c.activation_key && c.activation_key->scale.group.col > 0 && c.k % c.activation_key->scale.group.col != 0 &&
      c.activation_key->scale.dtype != DType::kF32) {
    return Verdict::no("K=" + std::to_string(c.k) + " is not a multiple of the activation block " +
                       std::to_string(c.activation_key->scale.group.col));
  }
  if (c.bmm_batch_size) return Verdict::no("batched (bmm) layers are not supported");
  return Verdict::yes();
}

namespace {

std::string expect_shape_msg(const LinearLayer& layer, const std::string& param, const Tensor& t,
                             const std::string& expected) {
  return "layer " + (layer.name.empty() ? std::string("<unnamed>") : layer.name) + ": tensor '" + param +
         "' is " + t.describe() + ", expected " + expected;
}

// A per-tensor scale may be stored as [], [1] or one value per fused shard [num_shards].
bool is_per_tensor_shape(const Tensor& t, int64_t shards) {
  return (t.numel() == 1 && t.rank() <= 1) || (t.rank() == 1 && t.size(0) == shards);
}

Status expect(const LinearLayer& layer, const std::string& param, DType dtype, const Shape& shape) {
  QL_ASSIGN_OR_RETURN(Tensor t, layer.get(param));
  if (t.dtype() != dtype || t.shape() != shape) {
    return Status::error(expect_shape_msg(layer, param, t, std::string(name(dtype)) + shape_to_string(shape)));
  }
  return Status::ok();
}

Status expect_scale(const LinearLayer& layer, const std::string& param, const QuantKey& key, int64_t rows,
                    int64_t cols) {
  QL_ASSIGN_OR_RETURN(Tensor t, layer.get(param));
  const GroupShape g = key.scale.group;
  const int64_t shards = layer.config.num_shards();
  // E8M0 scales travel as raw bytes (U8), as checkpoints and vLLM carry them.
  const bool dtype_ok = t.dtype() == key.scale.dtype || (key.scale.dtype == DType::kE8M0 && t.dtype() == DType::kU8);
  if (!dtype_ok) {
    return Status::error(expect_shape_msg(layer, param, t, "dtype " + std::string(name(key.scale.dtype))));
  }
  if (g.is_per_tensor()) {
    if (!is_per_tensor_shape(t, shards)) {
      return Status::error(expect_shape_msg(layer, param, t,
                                            "a per-tensor scale: [], [1] or [" + std::to_string(shards) + "]"));
    }
    return Status::ok();
  }
  if (g.is_per_channel()) {
    const bool ok = (t.rank() == 2 && t.size(0) == rows && t.size(1) == 1) || (t.rank() == 1 && t.size(0) == rows);
    if (!ok) return Status::error(expect_shape_msg(layer, param, t, "[" + std::to_string(rows) + ", 1]"));
    return Status::ok();
  }
  // Row blocks (128x128): every fused shard's own grid, one after the other (ScaleRowGrid).
  const int64_t scale_rows = g.row > 1 ? scale_row_grid(layer.config).rows : (rows + g.row - 1) / g.row;
  const Shape want = {scale_rows, (cols + g.col - 1) / g.col};
  if (t.shape() != want) return Status::error(expect_shape_msg(layer, param, t, shape_to_string(want)));
  return Status::ok();
}

}  // namespace

Status validate_layer_tensors(const LinearLayer& layer) {
  const LinearConfig& c = layer.config;
  const Verdict v = check_config(c);
  if (!v) return Status::error("layer " + layer.name + ": invalid config: " + v.reason);
  const QuantKey& wk = c.weight_key;
  // Weight codes: byte formats [N, K]; packed formats [N, packed bytes of K].
  const DType storage = is_packed(wk.dtype) ? DType::kU8 : wk.dtype;
  const int64_t cols = is_packed(wk.dtype) ? storage_bytes(wk.dtype, c.k) : c.k;
  QL_RETURN_IF_ERROR(expect(layer, "weight", storage, {c.n, cols}));
  QL_RETURN_IF_ERROR(expect_scale(layer, "weight_scale", wk, c.n, c.k));
  if (wk.scale2) {
    QL_ASSIGN_OR_RETURN(Tensor g, layer.get("weight_global_scale"));
    if (g.dtype() != DType::kF32 || !is_per_tensor_shape(g, c.num_shards())) {
      return Status::error(expect_shape_msg(layer, "weight_global_scale", g, "f32 [1] or [num_shards]"));
    }
  }
  if (c.activation_key && c.activation_key->scale.is_static) {
    QL_ASSIGN_OR_RETURN(Tensor s, layer.get("input_scale"));
    if (s.dtype() != DType::kF32 || !is_per_tensor_shape(s, c.num_shards())) {
      return Status::error(expect_shape_msg(layer, "input_scale", s, "f32 [1] or [num_shards]"));
    }
    if (!c.activation_key->symmetric) {
      QL_ASSIGN_OR_RETURN(Tensor z, layer.get("input_zero_point"));
      if (z.dtype() != DType::kI32 || z.numel() != 1) {
        return Status::error(expect_shape_msg(layer, "input_zero_point", z, "i32 [1]"));
      }
    }
  }
  if (c.activation_key && c.activation_key->scale2 && c.activation_key->scale2->is_static) {
    QL_ASSIGN_OR_RETURN(Tensor g, layer.get("input_global_scale"));
    if (g.dtype() != DType::kF32 || !is_per_tensor_shape(g, c.num_shards())) {
      return Status::error(expect_shape_msg(layer, "input_global_scale", g, "f32 [1] or [num_shards]"));
    }
  }
  return Status::ok();
}

}  // namespace qlinear
