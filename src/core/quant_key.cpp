#include "qlinear/quant_key.hpp"

#include <array>

namespace qlinear {

std::string GroupShape::to_string() const {
  if (is_per_tensor()) return "per_tensor";
  if (is_per_token()) return "per_token";
  if (is_per_channel()) return "per_channel";
  auto dim = [](int64_t v) { return v < 0 ? std::string("all") : std::to_string(v); };
  return dim(row) + "x" + dim(col);
}

std::string ScaleDesc::to_string() const {
  return std::string(name(dtype)) + "," + (is_static ? "static" : "dynamic") + "," + group.to_string();
}

std::string QuantKey::to_string() const {
  std::string s = "QuantKey(" + std::string(name(dtype)) + ",scale(" + scale.to_string() + ")";
  if (scale2) s += ",scale2(" + scale2->to_string() + ")";
  s += symmetric ? ",symmetric)" : ",asymmetric)";
  return s;
}

namespace {
constexpr std::array kNamedKeys = {
    NamedKey{"kFp8StaticTensorSym", kFp8StaticTensorSym},
    NamedKey{"kFp8DynamicTensorSym", kFp8DynamicTensorSym},
    NamedKey{"kFp8StaticTokenSym", kFp8StaticTokenSym},
    NamedKey{"kFp8StaticChannelSym", kFp8StaticChannelSym},
    NamedKey{"kFp8DynamicTokenSym", kFp8DynamicTokenSym},
    NamedKey{"kFp8Dynamic128Sym", kFp8Dynamic128Sym},
    NamedKey{"kFp8Dynamic64Sym", kFp8Dynamic64Sym},
    NamedKey{"kFp8Static128BlockSym", kFp8Static128BlockSym},
    NamedKey{"kFp8Dynamic128x128Sym", kFp8Dynamic128x128Sym},
    NamedKey{"kInt8StaticTensorSym", kInt8StaticTensorSym},
    NamedKey{"kInt8StaticTensorAsym", kInt8StaticTensorAsym},
    NamedKey{"kInt8DynamicTokenSym", kInt8DynamicTokenSym},
    NamedKey{"kInt8DynamicTokenAsym", kInt8DynamicTokenAsym},
    NamedKey{"kInt8StaticChannelSym", kInt8StaticChannelSym},
    NamedKey{"kMxfp8Static", kMxfp8Static},
    NamedKey{"kMxfp8Dynamic", kMxfp8Dynamic},
    NamedKey{"kMxfp6E2M3Static", kMxfp6E2M3Static},
    NamedKey{"kMxfp6E2M3Dynamic", kMxfp6E2M3Dynamic},
    NamedKey{"kMxfp6E3M2Static", kMxfp6E3M2Static},
    NamedKey{"kMxfp6E3M2Dynamic", kMxfp6E3M2Dynamic},
    NamedKey{"kMxfp4Static", kMxfp4Static},
    NamedKey{"kMxfp4Dynamic", kMxfp4Dynamic},
    NamedKey{"kNvfp4Static", kNvfp4Static},
    NamedKey{"kNvfp4Dynamic", kNvfp4Dynamic},
};
}  // namespace

std::span<const NamedKey> named_keys() { return kNamedKeys; }

std::string key_name(const QuantKey& key) {
  for (const NamedKey& k : kNamedKeys) {
    if (k.key == key) return k.name;
  }
  if (key == kNvfp4DynamicGlobal) return "kNvfp4DynamicGlobal";
  return key.to_string();
}

}  // namespace qlinear
