#pragma once
// Schemes: the user-facing names of (family, weight key, activation key) combinations, the same in the
// CLI, JSON output, checkpoints and docs. One table (scheme.cpp).
#include <optional>
#include <span>
#include <string_view>

#include "qlinear/layer.hpp"

namespace qlinear {

struct Scheme {
  std::string_view name;  // "w8a8-fp8-channel"
  Family family;
  QuantKey weight_key;
  std::optional<QuantKey> activation_key;  // none: weight-only (A16)
  std::string_view description;
};

std::span<const Scheme> all_schemes();
const Scheme* find_scheme(std::string_view name);
// The scheme whose family and keys match a config, if any.
const Scheme* scheme_for(const LinearConfig& config);
// "w8a8-fp8-tensor, w8a8-fp8-channel, ..." for error messages.
std::string scheme_names();

// A config for scheme `s` at shape (n, k).
LinearConfig make_config(const Scheme& s, int64_t n, int64_t k, DType input_dtype = DType::kBF16,
                         DType out_dtype = DType::kBF16);

}  // namespace qlinear
