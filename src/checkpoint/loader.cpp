#include "qlinear/loader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "qlinear/name_pattern.hpp"
#include <set>
#include <sstream>

#include "qlinear/kernel.hpp"

namespace qlinear {

namespace fs = std::filesystem;

namespace {

// vLLM's packed_modules_mapping: checkpoint shards that one fused layer holds, in this order.
struct FusionRule {
  std::string_view fused;
  std::vector<std::string_view> shards;
};
const std::vector<FusionRule> kFusionRules = {
    {"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
    {"gate_up_proj", {"gate_proj", "up_proj"}},
    {"qkv_proj", {"query", "key", "value"}},  // BERT attention.self
};

std::string_view leaf_of(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}
std::string parent_of(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(name.substr(0, dot + 1));
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Model dimensions that tensor-parallel sharding of k/v needs (KV-head replication).
struct ModelDims {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
};

struct Shard {
  std::string module;  // checkpoint module name, e.g. model.layers.0.self_attn.k_proj
  int64_t rows = 0;    // output rows after tensor-parallel slicing
  Tensor weight, weight_scale, weight_global_scale, input_scale, input_global_scale, input_zero_point, bias;
};

class LayerLoader {
 public:
  LayerLoader(const Checkpoint& ckpt, const Scheme& scheme, const LoadOptions& opt, const ModelDims& dims)
      : ckpt_(ckpt), scheme_(scheme), opt_(opt), dims_(dims) {}

  Result<LoadedLayer> load(const std::string& name, const std::vector<std::string>& modules);

 private:
  Result<Shard> read_shard(const std::string& module, Parallelism par, int64_t* full_rows, int64_t* full_k);
  Result<Tensor> scale_tensor(const std::string& tensor_name, const Tensor& t, int64_t rows, int64_t k);
  Status slice_rows(Shard& s, const std::string& module, int64_t rows);
  Status slice_cols(Shard& s, const std::string& module, int64_t k);
  std::string where(const std::string& module) const { return ckpt_.root() + ": layer " + module; }

  const Checkpoint& ckpt_;
  const Scheme& scheme_;
  const LoadOptions& opt_;
  const ModelDims& dims_;
  int64_t bytes_ = 0;
};

bool is_float_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16 || d == DType::kF64; }

Tensor to_f32(const Tensor& t) {
  Tensor c = t.contiguous();
  Tensor out = Tensor::empty(DType::kF32, c.shape());
  for (int64_t i = 0; i < c.numel(); ++i) out.data<float>()[i] = static_cast<float>(element_as_double(c, i));
  return out;
}

// The scale that the key says one value covers: checkpoints store per-tensor scales as [] or [1] and
// per-channel ones as [N, 1] or [N]; everything becomes the contract's shape here.
Result<Tensor> LayerLoader::scale_tensor(const std::string& tensor_name, const Tensor& t, int64_t rows, int64_t k) {
  const QuantKey& key = scheme_.weight_key;
  const GroupShape g = key.scale.group;
  Tensor s = t;
  if (key.scale.dtype == DType::kF32) {
    if (!is_float_dtype(t.dtype())) {
      return Status::error(ckpt_.root() + ": tensor '" + tensor_name + "' is " + t.describe() +
                           ", expected a float scale (f32, bf16 or f16)");
    }
    s = to_f32(t);
  } else if (t.dtype() != key.scale.dtype && !(key.scale.dtype == DType::kE8M0 && t.dtype() == DType::kU8)) {
    return Status::error(ckpt_.root() + ": tensor '" + tensor_name + "' is " + t.describe() + ", expected " +
                         std::string(name(key.scale.dtype == DType::kE8M0 ? DType::kU8 : key.scale.dtype)) +
                         " scales");
  }
  if (key.scale.dtype == DType::kE8M0) s = Tensor::from_blob(s.raw(), DType::kU8, s.shape(), s.owner());
  if (g.is_per_channel() && s.numel() == 1 && rows > 1) {
    // A per-tensor scale on a per-channel scheme (resolve_scheme maps them): repeat it for every row.
    Tensor expanded = Tensor::empty(DType::kF32, {rows, 1});
    std::fill_n(expanded.data<float>(), rows, s.data<float>()[0]);
    return expanded;
  }
  Shape want;
  if (g.is_per_tensor()) {
    want = {1};
  } else if (g.is_per_channel()) {
    want = {rows, 1};
  } else {
    want = {(rows + g.row - 1) / g.row, (k + g.col - 1) / g.col};
  }
  int64_t numel = 1;
  for (int64_t d : want) numel *= d;
  if (s.numel() != numel) {
    return Status::error(ckpt_.root() + ": tensor '" + tensor_name + "' is " + t.describe() + ", expected " +
                         shape_to_string(want) + " for " + key_name(key) + " with N=" + std::to_string(rows) +
                         " K=" + std::to_string(k));
  }
  return s.contiguous().reshape(want);
}

Result<Tensor> per_tensor_f32(const Checkpoint& ckpt, const std::string& tensor_name) {
  QL_ASSIGN_OR_RETURN(Tensor t, ckpt.tensor(tensor_name));
  if (!is_float_dtype(t.dtype()) || t.numel() != 1) {
    return Status::error(ckpt.root() + ": tensor '" + tensor_name + "' is " + t.describe() +
                         ", expected one float value");
  }
  return to_f32(t).reshape({1});
}

Result<Shard> LayerLoader::read_shard(const std::string& module, Parallelism par, int64_t* full_rows,
                                      int64_t* full_k) {
  Shard s;
  s.module = module;
  const QuantKey& wk = scheme_.weight_key;
  const std::string wname = ckpt_.has(module + ".weight_packed") ? module + ".weight_packed" : module + ".weight";
  QL_ASSIGN_OR_RETURN(s.weight, ckpt_.tensor(wname));
  const DType storage = is_packed(wk.dtype) ? DType::kU8 : wk.dtype;
  if (s.weight.dtype() != storage || s.weight.rank() != 2) {
    return Status::error(where(module) + " (" + std::string(scheme_.name) + "): tensor '" + wname + "' is " +
                         s.weight.describe() + ", expected 2-D " + std::string(name(storage)));
  }
  const int64_t rows = s.weight.size(0);
  // Packed formats store K through their packing: FP6 4 codes in 3 bytes, FP4 2 per byte.
  const int64_t k = is_packed(wk.dtype)
                        ? s.weight.size(1) * traits(wk.dtype).codes_per_pack / traits(wk.dtype).bytes_per_pack
                        : s.weight.size(1);
  *full_rows = rows;
  *full_k = k;
  const std::string sname = ckpt_.has(module + ".weight_scale_inv") ? module + ".weight_scale_inv"
                                                                     : module + ".weight_scale";
  QL_ASSIGN_OR_RETURN(Tensor raw_scale, ckpt_.tensor(sname));
  QL_ASSIGN_OR_RETURN(s.weight_scale, scale_tensor(sname, raw_scale, rows, k));
  if (wk.scale2) {
    QL_ASSIGN_OR_RETURN(s.weight_global_scale, per_tensor_f32(ckpt_, module + ".weight_global_scale"));
  }
  if (const auto& ak = scheme_.activation_key) {
    if (ak->scale.is_static) {
      QL_ASSIGN_OR_RETURN(s.input_scale, per_tensor_f32(ckpt_, module + ".input_scale"));
    }
    if (ak->scale2) {
      QL_ASSIGN_OR_RETURN(s.input_global_scale, per_tensor_f32(ckpt_, module + ".input_global_scale"));
    }
    if (ak->scale.is_static && !ak->symmetric) {
      QL_ASSIGN_OR_RETURN(Tensor zp, ckpt_.tensor(module + ".input_zero_point"));
      if (zp.numel() != 1 || is_float_dtype(zp.dtype()) || zp.dtype() == DType::kF8E4M3) {
        return Status::error(where(module) + ": tensor '" + module + ".input_zero_point' is " + zp.describe() +
                             ", expected one integer");
      }
      s.input_zero_point = Tensor::empty(DType::kI32, {1});
      s.input_zero_point.data<int32_t>()[0] = static_cast<int32_t>(element_as_double(zp, 0));
    }
  }
  if (ckpt_.has(module + ".bias")) {
    QL_ASSIGN_OR_RETURN(Tensor b, ckpt_.tensor(module + ".bias"));
    if (b.rank() != 1 || b.size(0) != rows || !is_float_dtype(b.dtype())) {
      return Status::error(where(module) + ": tensor '" + module + ".bias' is " + b.describe() + ", expected [" +
                           std::to_string(rows) + "] floats");
    }
    s.bias = to_f32(b);
  }
  s.rows = rows;
  if (opt_.tp_size > 1) {
    QL_RETURN_IF_ERROR(par == Parallelism::kColumn ? slice_rows(s, module, rows) : slice_cols(s, module, k));
  }
  for (const Tensor* t : {&s.weight, &s.weight_scale, &s.weight_global_scale, &s.input_scale,
                          &s.input_global_scale, &s.input_zero_point}) {
    if (t->defined()) bytes_ += t->nbytes();
  }
  return s;
}

// Column parallel: this rank's rows of the weight and of every per-row or per-block scale.
Status LayerLoader::slice_rows(Shard& s, const std::string& module, int64_t rows) {
  const int tp = opt_.tp_size, rank = opt_.tp_rank;
  int64_t part = rows / tp, begin = rank * part;
  const std::string_view leaf = leaf_of(module);
  const bool kv = leaf == "k_proj" || leaf == "v_proj" || leaf == "key" || leaf == "value";
  if (kv && dims_.num_kv_heads > 0 && tp >= dims_.num_kv_heads) {
    // Fewer KV heads than ranks: each head is replicated on tp / num_kv_heads ranks (vLLM QKVParallelLinear).
    if (tp % dims_.num_kv_heads != 0) {
      return Status::error(where(module) + ": tensor-parallel size " + std::to_string(tp) +
                           " is not a multiple of the " + std::to_string(dims_.num_kv_heads) + " KV heads");
    }
    const int64_t replicas = tp / dims_.num_kv_heads;
    part = rows / dims_.num_kv_heads;
    begin = (rank / replicas) * part;
  } else if (rows % tp != 0) {
    return Status::error(where(module) + ": " + std::to_string(rows) +
                         " output features do not split evenly over tensor-parallel size " + std::to_string(tp));
  }
  // Row blocks (128x128): the slice keeps the shard's own grid, so it must start on one of its blocks and hold
  // whole blocks, except that a slice running to the shard's end keeps the shard's partial last block.
  const GroupShape g = scheme_.weight_key.scale.group;
  if (g.row > 1 && (begin % g.row != 0 || (part % g.row != 0 && begin + part != rows))) {
    const std::string why =
        begin % g.row != 0
            ? "starts at row " + std::to_string(begin) + ", inside a " + std::to_string(g.row) + "-row block"
            : "ends at row " + std::to_string(begin + part) + ", inside a " + std::to_string(g.row) +
                  "-row block, before the shard's end";
    return Status::error(where(module) + ": this rank's slice of " + std::to_string(part) + " of its " +
                         std::to_string(rows) + " output rows " + why + " of the " + g.to_string() +
                         " weight blocks (one block's scale cannot be split between ranks); tensor-parallel size " +
                         std::to_string(tp) + " needs each rank's rows to be a multiple of " +
                         std::to_string(g.row));
  }
  QL_ASSIGN_OR_RETURN(s.weight, s.weight.narrow(0, begin, part));
  if (!g.is_per_tensor()) {
    const int64_t r = g.row > 1 ? g.row : 1;
    QL_ASSIGN_OR_RETURN(s.weight_scale, s.weight_scale.narrow(0, begin / r, (part + r - 1) / r));
  }
  if (s.bias.defined()) {
    QL_ASSIGN_OR_RETURN(s.bias, s.bias.narrow(0, begin, part));
  }
  s.rows = part;
  return Status::ok();
}

// Row parallel: this rank's input columns of the weight and of every per-group / per-block scale.
Status LayerLoader::slice_cols(Shard& s, const std::string& module, int64_t k) {
  const int tp = opt_.tp_size, rank = opt_.tp_rank;
  const QuantKey& wk = scheme_.weight_key;
  const GroupShape g = wk.scale.group;
  if (k % tp != 0) {
    return Status::error(where(module) + ": " + std::to_string(k) +
                         " input features do not split evenly over tensor-parallel size " + std::to_string(tp));
  }
  const int64_t part = k / tp;
  if (g.col > 1 && part % g.col != 0) {
    return Status::error(where(module) + ": this rank's " + std::to_string(part) +
                         " input features are not a multiple of the " + g.to_string() + " scale block (" +
                         key_name(wk) + "); tensor-parallel size " + std::to_string(tp) + " is too large");
  }
  const int64_t byte_begin = storage_bytes(wk.dtype, rank * part), byte_len = storage_bytes(wk.dtype, part);
  QL_ASSIGN_OR_RETURN(Tensor w, s.weight.narrow(1, byte_begin, byte_len));
  s.weight = w.contiguous();
  if (g.col > 1) {
    QL_ASSIGN_OR_RETURN(Tensor sc, s.weight_scale.narrow(1, rank * part / g.col, part / g.col));
    s.weight_scale = sc.contiguous();
  }
  if (rank != 0) s.bias = Tensor();  // the bias is added once, after the all-reduce
  return Status::ok();
}

// Per-tensor values of fused shards: one per shard ([num_shards]), or [1] for an unfused layer.
Tensor stack_scalars(const std::vector<Tensor>& parts) {
  std::vector<float> values;
  for (const Tensor& p : parts) values.push_back(p.data<float>()[0]);
  return f32_vector(values);
}

Result<LoadedLayer> LayerLoader::load(const std::string& name, const std::vector<std::string>& modules) {
  LoadedLayer out;
  out.scheme = &scheme_;
  out.shards = modules;
  out.parallelism = parallelism_of(name);
  std::vector<Shard> shards;
  int64_t k = -1;
  for (const std::string& m : modules) {
    int64_t rows = 0, kk = 0;
    QL_ASSIGN_OR_RETURN(Shard s, read_shard(m, out.parallelism, &rows, &kk));
    if (k >= 0 && kk != k) {
      return Status::error(where(name) + ": fused shards disagree on input features (" + std::to_string(k) +
                           " vs " + std::to_string(kk) + " in " + m + ")");
    }
    k = kk;
    out.full_n += rows;
    shards.push_back(std::move(s));
  }
  out.full_k = k;
  const QuantKey& wk = scheme_.weight_key;
  std::vector<Tensor> w, sc, gsc, isc, igs, bias;
  std::vector<int64_t> widths;
  for (const Shard& s : shards) {
    w.push_back(s.weight);
    sc.push_back(s.weight_scale);
    widths.push_back(s.rows);
    if (s.weight_global_scale.defined()) gsc.push_back(s.weight_global_scale);
    if (s.input_scale.defined()) isc.push_back(s.input_scale);
    if (s.input_global_scale.defined()) igs.push_back(s.input_global_scale);
    if (s.bias.defined()) bias.push_back(s.bias);
  }
  LinearLayer& layer = out.layer;
  layer.name = name;
  layer.tp_rank = opt_.tp_rank;
  layer.tp_size = opt_.tp_size;
  int64_t n = 0;
  for (int64_t r : widths) n += r;
  layer.config = make_config(scheme_, n, opt_.tp_size > 1 && out.parallelism == Parallelism::kRow ? k / opt_.tp_size : k,
                             opt_.input_dtype, opt_.out_dtype);
  if (shards.size() > 1) layer.config.logical_widths = widths;
  layer.params["weight"] = concat_rows(w);
  // Per-row and per-block scales: the shards' rows one after the other. With 128x128 blocks each shard keeps
  // its own grid (ScaleRowGrid, qlinear/layer.hpp), a partial last block included.
  layer.params["weight_scale"] = wk.scale.group.is_per_tensor() ? stack_scalars(sc) : concat_rows(sc);
  if (!gsc.empty()) layer.params["weight_global_scale"] = stack_scalars(gsc);
  if (!isc.empty()) layer.params["input_scale"] = stack_scalars(isc);
  if (!igs.empty()) layer.params["input_global_scale"] = stack_scalars(igs);
  if (shards[0].input_zero_point.defined()) {
    for (const Shard& s : shards) {
      if (s.input_zero_point.data<int32_t>()[0] != shards[0].input_zero_point.data<int32_t>()[0]) {
        return Status::error(where(name) + ": fused shards have different input zero points (" + shards[0].module +
                             " vs " + s.module + "); one zero point per layer is supported");
      }
    }
    layer.params["input_zero_point"] = shards[0].input_zero_point;
  }
  if (!bias.empty()) {
    if (bias.size() != shards.size() && !(out.parallelism == Parallelism::kRow && opt_.tp_rank != 0)) {
      return Status::error(where(name) + ": some fused shards have a bias and some do not");
    }
    out.bias = concat_rows(bias);
  }
  out.checkpoint_bytes = bytes_;
  QL_RETURN_IF_ERROR(validate_layer_tensors(layer).with_context(ckpt_.root()));
  return out;
}

Result<ModelDims> read_model_config(const std::string& path, QuantConfig* quant) {
  std::ifstream in(path);
  if (!in) return Status::error(path + ": cannot open (a checkpoint directory needs its config.json)");
  std::stringstream text;
  text << in.rdbuf();
  QL_ASSIGN_OR_RETURN(*quant, parse_quant_config(text.str(), path));
  ModelDims dims;
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_object()) {
    if (j.contains("num_attention_heads") && j["num_attention_heads"].is_number_integer()) {
      dims.num_heads = j["num_attention_heads"].get<int64_t>();
      dims.num_kv_heads = dims.num_heads;
    }
    if (j.contains("num_key_value_heads") && j["num_key_value_heads"].is_number_integer()) {
      dims.num_kv_heads = j["num_key_value_heads"].get<int64_t>();
    }
  }
  return dims;
}

}  // namespace

Parallelism parallelism_of(std::string_view module_name) {
  const std::string_view leaf = leaf_of(module_name);
  if (leaf == "o_proj" || leaf == "down_proj" || leaf == "out_proj" || leaf == "dense_4h_to_h" || leaf == "fc2" ||
      leaf == "w2") {
    return Parallelism::kRow;
  }
  // BERT: attention.output.dense and output.dense project back to the hidden size.
  if (leaf == "dense" && module_name.find("output.dense") != std::string_view::npos) return Parallelism::kRow;
  return Parallelism::kColumn;
}

Result<LoadedModel> load_checkpoint(const std::string& path, const LoadOptions& opt) {
  if (opt.tp_size < 1 || opt.tp_rank < 0 || opt.tp_rank >= opt.tp_size) {
    return Status::error("tensor-parallel rank " + std::to_string(opt.tp_rank) + " of size " +
                         std::to_string(opt.tp_size) + " is invalid (need 0 <= rank < size)");
  }
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) return Status::error(path + ": no such file or directory");
  const bool is_dir = fs::is_directory(p, ec);
  const fs::path dir = is_dir ? p : p.parent_path();
  // Named by the path given, not by the config.json it lacks (the user may not know one is needed).
  if (!is_dir && p.extension() != ".safetensors") {
    return Status::error(path + " is not a checkpoint: expected a model directory (config.json and *.safetensors) "
                         "or a .safetensors file with config.json beside it");
  }
  if (!fs::exists(dir / "config.json", ec)) {
    return Status::error(path + " is not a checkpoint: " + (is_dir ? "the directory" : "the file's directory") +
                         " has no config.json (" + (dir / "config.json").string() + ": cannot open)");
  }
  LoadedModel model;
  model.path = path;
  QL_ASSIGN_OR_RETURN(ModelDims dims, read_model_config((dir / "config.json").string(), &model.config));
  QL_ASSIGN_OR_RETURN(model.checkpoint, Checkpoint::open(path));
  std::optional<NamePattern> filter;
  if (!opt.layer_regex.empty()) {
    auto compiled = NamePattern::compile(opt.layer_regex, NamePattern::Anchor::kSearch);
    if (!compiled) return compiled.status().with_context("layer regex (--layers)");
    filter = std::move(*compiled);
  }

  // Linear modules: a 2-D weight (or weight_packed) tensor; quantized ones carry a weight_scale.
  std::vector<std::string> modules;
  std::set<std::string> quantized;
  for (const std::string& t : model.checkpoint.names()) {
    std::string module;
    if (ends_with(t, ".weight_packed")) module = t.substr(0, t.size() - 14);
    else if (ends_with(t, ".weight")) module = t.substr(0, t.size() - 7);
    else continue;
    auto e = model.checkpoint.entry(t);
    if (!e || e->shape.size() != 2) continue;
    if (std::find(modules.begin(), modules.end(), module) == modules.end()) modules.push_back(module);
    if (model.checkpoint.has(module + ".weight_scale") || model.checkpoint.has(module + ".weight_scale_inv")) {
      quantized.insert(module);
    }
  }
  // Group shards into fused layers.
  std::vector<std::pair<std::string, std::vector<std::string>>> layers;
  std::set<std::string> taken;
  for (const std::string& m : modules) {
    if (taken.count(m) || !quantized.count(m)) continue;
    bool fused = false;
    for (const FusionRule& rule : kFusionRules) {
      const std::string_view leaf = leaf_of(m);
      if (!opt.fuse || std::find(rule.shards.begin(), rule.shards.end(), leaf) == rule.shards.end()) continue;
      const std::string parent = parent_of(m);
      std::vector<std::string> shard_names;
      for (std::string_view s : rule.shards) shard_names.push_back(parent + std::string(s));
      if (std::all_of(shard_names.begin(), shard_names.end(), [&](const std::string& s) { return quantized.count(s) > 0; })) {
        for (const std::string& s : shard_names) taken.insert(s);
        layers.emplace_back(parent + std::string(rule.fused), shard_names);
        fused = true;
        break;
      }
    }
    if (!fused) {
      taken.insert(m);
      layers.emplace_back(m, std::vector<std::string>{m});
    }
  }
  for (const std::string& m : modules) {
    if (!quantized.count(m)) model.unquantized.push_back(m);
  }
  for (const auto& [name, shards] : layers) {
    if (filter && !filter->matches(name)) continue;
    QL_ASSIGN_OR_RETURN(const Scheme* scheme, scheme_for_layer(model.config, name, shards));
    if (scheme == nullptr) {
      model.unquantized.push_back(name);
      continue;
    }
    LayerLoader loader(model.checkpoint, *scheme, opt, dims);
    QL_ASSIGN_OR_RETURN(LoadedLayer layer, loader.load(name, shards));
    model.layers.push_back(std::move(layer));
  }
  if (model.layers.empty()) {
    return Status::error(path + ": no quantized linear layer" +
                         (filter ? " matches --layers '" + opt.layer_regex + "'" : std::string(" found")));
  }
  return model;
}

}  // namespace qlinear
