#include "qlinear/layer.hpp"

#include <array>

namespace qlinear {

namespace {
constexpr std::array<std::string_view, kNumFamilies> kFamilyNames = {
    "fp8_scaled_mm", "int8_scaled_mm", "fp8_block_scaled", "fp8_weight_only",
    "mxfp8",         "mxfp6",          "mxfp4",            "nvfp4",
};
static_assert(static_cast<int>(Family::kNvfp4) + 1 == kNumFamilies, "kFamilyNames must list every family");
}  // namespace

std::string_view family_name(Family f) { return kFamilyNames[static_cast<size_t>(f)]; }

std::optional<Family> family_from_name(std::string_view text) {
  for (size_t i = 0; i < kFamilyNames.size(); ++i) {
    if (kFamilyNames[i] == text) return static_cast<Family>(i);
  }
  return std::nullopt;
}

std::string LinearConfig::to_string() const {
  std::string s = std::string(family_name(family)) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                  " weight=" + key_name(weight_key) +
                  " activation=" + (activation_key ? key_name(*activation_key) : std::string(name(input_dtype))) +
                  " out=" + std::string(name(out_dtype));
  if (logical_widths.size() > 1) {
    s += " shards=[";
    for (size_t i = 0; i < logical_widths.size(); ++i) s += (i ? "," : "") + std::to_string(logical_widths[i]);
    s += "]";
    // Shards that keep their own block grids (a partial block before the last shard) say so.
    if (const ScaleRowGrid g = scale_row_grid(*this); !g.uniform) s += " weight_scale=" + g.to_string();
  }
  return s;
}

ScaleRowGrid scale_row_grid(const LinearConfig& c) {
  ScaleRowGrid g;
  g.block = c.weight_key.scale.group.row > 1 ? c.weight_key.scale.group.row : 1;
  g.n = c.n;
  const std::vector<int64_t> widths = c.logical_widths.empty() ? std::vector<int64_t>{c.n} : c.logical_widths;
  int64_t row = 0;
  for (size_t s = 0; s < widths.size(); ++s) {
    g.row_begin.push_back(row);
    g.scale_row_begin.push_back(g.rows);
    if (s + 1 < widths.size() && widths[s] % g.block != 0) g.uniform = false;
    row += widths[s];
    g.rows += (widths[s] + g.block - 1) / g.block;
  }
  return g;
}

int64_t ScaleRowGrid::shard_of(int64_t n) const {
  int64_t s = 0;
  while (s + 1 < static_cast<int64_t>(row_begin.size()) && row_begin[static_cast<size_t>(s + 1)] <= n) ++s;
  return s;
}

int64_t ScaleRowGrid::scale_row(int64_t n) const {
  if (uniform) return n / block;
  const size_t s = static_cast<size_t>(shard_of(n));
  return scale_row_begin[s] + (n - row_begin[s]) / block;
}

int64_t ScaleRowGrid::boundary_off(int64_t multiple) const {
  if (uniform && block % multiple == 0) return -1;
  for (const int64_t r : row_begin) {
    if (r % multiple != 0) return r;
  }
  return -1;
}

std::string ScaleRowGrid::to_string() const {
  if (uniform) return std::to_string(block) + "-row grid: " + std::to_string(rows) + " scale rows";
  std::string s = "per-shard " + std::to_string(block) + "-row grids:";
  for (size_t i = 0; i < row_begin.size(); ++i) {
    const int64_t end_row = i + 1 < row_begin.size() ? row_begin[i + 1] : n;
    const int64_t end_scale = i + 1 < scale_row_begin.size() ? scale_row_begin[i + 1] : rows;
    s += (i ? ", " : " ") + std::to_string(end_row - row_begin[i]) + "->" +
         std::to_string(end_scale - scale_row_begin[i]);
  }
  return s + " scale rows";
}

Result<Tensor> LinearLayer::get(const std::string& param) const {
  auto it = params.find(param);
  if (it == params.end() || !it->second.defined()) {
    return Status::error("layer " + (name.empty() ? std::string("<unnamed>") : name) + " (" +
                         std::string(family_name(config.family)) + ") has no tensor '" + param + "'");
  }
  return it->second;
}

Activation Activation::dense(Tensor x) {
  Activation a;
  a.orig_dtype_ = x.dtype();
  a.dense_ = std::move(x);
  return a;
}

Activation Activation::quantized(QuantizedTensor q, DType orig_dtype) {
  Activation a;
  a.quantized_ = std::move(q);
  a.orig_dtype_ = orig_dtype;
  return a;
}

int64_t Activation::rows() const {
  if (quantized_) return quantized_->rows;
  return dense_.rank() == 2 ? dense_.size(0) : -1;
}

int64_t Activation::cols() const {
  if (quantized_) return quantized_->cols;
  return dense_.rank() == 2 ? dense_.size(1) : -1;
}

}  // namespace qlinear
