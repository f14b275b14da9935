#include "qlinear/scheme.hpp"

#include <array>

namespace qlinear {

namespace {
// The scheme table: one row per user-facing scheme, named the same in the CLI, JSON and docs.
constexpr std::array kSchemes = {
    Scheme{"w8a8-fp8-tensor", Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8StaticTensorSym,
           "FP8 E4M3 weights with one scale per tensor (per shard when fused), static per-tensor FP8 input"},
    Scheme{"w8a8-fp8-channel", Family::kFp8ScaledMM, kFp8StaticChannelSym, kFp8DynamicTokenSym,
           "FP8 E4M3 weights with per-output-channel scales, dynamic per-token FP8 input"},
    Scheme{"w8a8-fp8-block", Family::kFp8BlockScaled, kFp8Static128BlockSym, kFp8Dynamic128Sym,
           "FP8 E4M3 weights in 128x128 blocks, dynamic 1x128-group FP8 input (DeepSeek style)"},
    Scheme{"w8a16-fp8", Family::kFp8WeightOnly, kFp8StaticChannelSym, std::nullopt,
           "FP8 E4M3 weights with per-channel scales, activations stay BF16/F16/F32"},
    Scheme{"w8a8-int8-dynamic", Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8DynamicTokenSym,
           "INT8 weights with per-channel scales, dynamic per-token symmetric INT8 input"},
    Scheme{"w8a8-int8-static", Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8StaticTensorSym,
           "INT8 weights with per-channel scales, static per-tensor symmetric INT8 input"},
    Scheme{"w8a8-int8-static-asym", Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8StaticTensorAsym,
           "INT8 weights with per-channel scales, static per-tensor asymmetric INT8 input (zero point)"},
    Scheme{"w8a8-mxfp8", Family::kMxfp8, kMxfp8Static, kMxfp8Dynamic,
           "OCP MXFP8: E4M3 weights and activations, E8M0 scale per 32 along K"},
    Scheme{"w8a16-mxfp8", Family::kMxfp8, kMxfp8Static, std::nullopt,
           "OCP MXFP8 weights (E4M3, E8M0 per 32), activations stay BF16/F16/F32"},
    Scheme{"w6a16-mxfp6-e2m3", Family::kMxfp6, kMxfp6E2M3Static, std::nullopt,
           "OCP MXFP6 E2M3 weights (4 codes per 3 bytes, E8M0 per 32), activations unquantized"},
    Scheme{"w6a16-mxfp6-e3m2", Family::kMxfp6, kMxfp6E3M2Static, std::nullopt,
           "OCP MXFP6 E3M2 weights (4 codes per 3 bytes, E8M0 per 32), activations unquantized"},
    Scheme{"w4a16-mxfp4", Family::kMxfp4, kMxfp4Static, std::nullopt,
           "OCP MXFP4 E2M1 weights (2 codes per byte, E8M0 per 32), activations unquantized"},
    Scheme{"w4a4-mxfp4", Family::kMxfp4, kMxfp4Static, kMxfp4Dynamic,
           "OCP MXFP4 weights and activations (E2M1, E8M0 per 32), activations by Quark's \"even\" scale rule"},
    Scheme{"w6a6-mxfp6-e2m3", Family::kMxfp6, kMxfp6E2M3Static, kMxfp6E2M3Dynamic,
           "OCP MXFP6 E2M3 weights and activations (E8M0 per 32), activations by Quark's \"even\" scale rule"},
    Scheme{"w6a6-mxfp6-e3m2", Family::kMxfp6, kMxfp6E3M2Static, kMxfp6E3M2Dynamic,
           "OCP MXFP6 E3M2 weights and activations (E8M0 per 32), activations by Quark's \"even\" scale rule"},
    Scheme{"w4a6-mxfp4-mxfp6-e2m3", Family::kMxfp4, kMxfp4Static, kMxfp6E2M3Dynamic,
           "OCP MXFP4 weights, MXFP6 E2M3 dynamic activations (Quark's mxfp4_mxfp6_e2m3, \"even\" rule)"},
    Scheme{"w4a8-mxfp4-fp8", Family::kMxfp4, kMxfp4Static, kFp8StaticTensorSym,
           "OCP MXFP4 weights, FP8 E4M3 activations with a static per-tensor scale (Quark's mxfp4_fp8)"},
    Scheme{"w4a4-nvfp4", Family::kNvfp4, kNvfp4Static, kNvfp4Dynamic,
           "NVFP4: E2M1 weights and activations, E4M3 scale per 16 along K, f32 global scale"},
};
}  // namespace

std::span<const Scheme> all_schemes() { return kSchemes; }

const Scheme* find_scheme(std::string_view name) {
  for (const Scheme& s : kSchemes) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const Scheme* scheme_for(const LinearConfig& config) {
  for (const Scheme& s : kSchemes) {
    if (s.family == config.family && s.weight_key == config.weight_key &&
        s.activation_key == config.activation_key) {
      return &s;
    }
  }
  return nullptr;
}

std::string scheme_names() {
  std::string s;
  for (const Scheme& scheme : kSchemes) s += (s.empty() ? "" : ", ") + std::string(scheme.name);
  return s;
}

LinearConfig make_config(const Scheme& s, int64_t n, int64_t k, DType input_dtype, DType out_dtype) {
  LinearConfig c;
  c.family = s.family;
  c.weight_key = s.weight_key;
  c.activation_key = s.activation_key;
  c.n = n;
  c.k = k;
  c.input_dtype = input_dtype;
  c.out_dtype = out_dtype;
  return c;
}

}  // namespace qlinear
