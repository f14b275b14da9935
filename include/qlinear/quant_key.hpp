#pragma once
// What a quantized operand is: its element format, how its scales are laid out, whether they are known
// ahead (static) or computed from the data (dynamic). Kernels compare keys with == to decide whether an
// activation that arrives already quantized is usable as is.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "qlinear/formats.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear {

// Extent of the elements one scale covers, as (rows, cols) of a row-major [rows, cols] operand
// (an activation [M, K] or a weight [N, K]); -1 means "the whole dimension".
struct GroupShape {
  int64_t row = -1;
  int64_t col = -1;

  constexpr bool operator==(const GroupShape&) const = default;
  constexpr bool is_per_tensor() const { return row == -1 && col == -1; }
  constexpr bool is_per_token() const { return row == 1 && col == -1; }    // one scale per row (activation)
  constexpr bool is_per_channel() const { return row == -1 && col == 1; }  // one per output channel (weight [N,K]
                                                                           // stores it as [N,1])
  // 1 x G groups along K (activation groups, MX blocks); vLLM's is_per_group.
  constexpr bool is_per_group() const { return row == 1 && col >= 1; }
  // Scale tensor shape for a [rows, cols] operand: per-tensor [1], per-row [rows, 1], blocks [ceil, ceil].
  std::string to_string() const;  // "per_tensor", "per_token", "per_channel", "1x32", "128x128"
};

inline constexpr GroupShape kPerTensor{-1, -1};
inline constexpr GroupShape kPerToken{1, -1};
inline constexpr GroupShape kPerChannel{-1, 1};
inline constexpr GroupShape kGroup1x128{1, 128};
inline constexpr GroupShape kGroup1x64{1, 64};
inline constexpr GroupShape kBlock128x128{128, 128};
inline constexpr GroupShape kMxBlock{1, 32};    // OCP MX: 32 elements along K share an E8M0 scale
inline constexpr GroupShape kNvfp4Block{1, 16};  // NVFP4: 16 elements along K share an E4M3 scale

struct ScaleDesc {
  DType dtype = DType::kF32;  // F32, E8M0 (MX) or F8E4M3 (NVFP4 block scales)
  bool is_static = true;
  GroupShape group = kPerTensor;

  constexpr bool operator==(const ScaleDesc&) const = default;
  std::string to_string() const;  // "f32,static,per_tensor"
};

struct QuantKey {
  DType dtype = DType::kF8E4M3;  // element format (F6/F4 are the logical format; storage is packed U8)
  ScaleDesc scale;
  std::optional<ScaleDesc> scale2;  // NVFP4's per-tensor global scale
  bool symmetric = true;            // false: a zero point accompanies the scale (INT8 asymmetric)

  constexpr bool operator==(const QuantKey&) const = default;
  // "QuantKey(f8e4m3fn,scale(f32,dynamic,per_token),symmetric)" — vLLM's spelling.
  std::string to_string() const;
};

// ---- The named keys (vLLM's, plus the INT8 and MXFP6 ones it leaves implicit) ----
inline constexpr ScaleDesc kF32StaticTensor{DType::kF32, true, kPerTensor};
inline constexpr ScaleDesc kF32DynamicTensor{DType::kF32, false, kPerTensor};

inline constexpr QuantKey kFp8StaticTensorSym{DType::kF8E4M3, {DType::kF32, true, kPerTensor}};
inline constexpr QuantKey kFp8DynamicTensorSym{DType::kF8E4M3, {DType::kF32, false, kPerTensor}};
inline constexpr QuantKey kFp8StaticTokenSym{DType::kF8E4M3, {DType::kF32, true, kPerToken}};
inline constexpr QuantKey kFp8StaticChannelSym{DType::kF8E4M3, {DType::kF32, true, kPerChannel}};
inline constexpr QuantKey kFp8DynamicTokenSym{DType::kF8E4M3, {DType::kF32, false, kPerToken}};
inline constexpr QuantKey kFp8Dynamic128Sym{DType::kF8E4M3, {DType::kF32, false, kGroup1x128}};
inline constexpr QuantKey kFp8Dynamic64Sym{DType::kF8E4M3, {DType::kF32, false, kGroup1x64}};
inline constexpr QuantKey kFp8Static128BlockSym{DType::kF8E4M3, {DType::kF32, true, kBlock128x128}};
inline constexpr QuantKey kFp8Dynamic128x128Sym{DType::kF8E4M3, {DType::kF32, false, kBlock128x128}};

inline constexpr QuantKey kInt8StaticTensorSym{DType::kI8, {DType::kF32, true, kPerTensor}};
inline constexpr QuantKey kInt8StaticTensorAsym{DType::kI8, {DType::kF32, true, kPerTensor}, std::nullopt, false};
inline constexpr QuantKey kInt8DynamicTokenSym{DType::kI8, {DType::kF32, false, kPerToken}};
inline constexpr QuantKey kInt8DynamicTokenAsym{DType::kI8, {DType::kF32, false, kPerToken}, std::nullopt, false};
inline constexpr QuantKey kInt8StaticChannelSym{DType::kI8, {DType::kF32, true, kPerChannel}};

inline constexpr QuantKey kMxfp8Static{DType::kF8E4M3, {DType::kE8M0, true, kMxBlock}};
inline constexpr QuantKey kMxfp8Dynamic{DType::kF8E4M3, {DType::kE8M0, false, kMxBlock}};
inline constexpr QuantKey kMxfp6E2M3Static{DType::kF6E2M3, {DType::kE8M0, true, kMxBlock}};
inline constexpr QuantKey kMxfp6E2M3Dynamic{DType::kF6E2M3, {DType::kE8M0, false, kMxBlock}};
inline constexpr QuantKey kMxfp6E3M2Static{DType::kF6E3M2, {DType::kE8M0, true, kMxBlock}};
inline constexpr QuantKey kMxfp6E3M2Dynamic{DType::kF6E3M2, {DType::kE8M0, false, kMxBlock}};
inline constexpr QuantKey kMxfp4Static{DType::kF4E2M1, {DType::kE8M0, true, kMxBlock}};
inline constexpr QuantKey kMxfp4Dynamic{DType::kF4E2M1, {DType::kE8M0, false, kMxBlock}};
inline constexpr QuantKey kNvfp4Static{DType::kF4E2M1, {DType::kF8E4M3, true, kNvfp4Block}, kF32StaticTensor};
inline constexpr QuantKey kNvfp4Dynamic{DType::kF4E2M1, {DType::kF8E4M3, false, kNvfp4Block}, kF32StaticTensor};
// NVFP4 activations whose global scale is also computed per call (g = 448*6/amax of the whole activation):
// for a layer made from a float model without calibration, where no static input_global_scale is known.
// The same E4M3 per-16 block math; only where g comes from differs. Not a checkpoint key (compressed-tensors
// stores input_global_scale), so it is not in named_keys() (the quantizer oracle's list) but key_name knows it.
inline constexpr QuantKey kNvfp4DynamicGlobal{DType::kF4E2M1, {DType::kF8E4M3, false, kNvfp4Block}, kF32DynamicTensor};

// Every named key with its name, for printing, parsing and tests.
struct NamedKey {
  const char* name;
  QuantKey key;
};
std::span<const NamedKey> named_keys();
// "kFp8DynamicTokenSym" for a named key, to_string() otherwise.
std::string key_name(const QuantKey& key);

// A quantized operand: codes, scales laid out per its key, and what it was made from (the reference
// quantizers in quantize.hpp make them; kernels take them as pre-quantized activations).
struct QuantizedTensor {
  QuantKey key;
  Tensor data;        // [rows, cols] F8E4M3 / I8, or packed U8 [rows, packed_cols] for FP6/FP4
  Tensor scale;       // per-tensor [1]; per-row [rows, 1]; 1xG [rows, ceil(cols/G)]; 128x128 [ceil, ceil];
                      // MX E8M0 [rows, cols/32] (U8 bytes); NVFP4 F8E4M3 [rows, cols/16]
  Tensor scale2;      // NVFP4: f32 [1] global scale g (multiplier); undefined otherwise
  Tensor zero_point;  // asymmetric INT8: i32 [1] (static) or [rows, 1] (dynamic); undefined otherwise
  int64_t rows = 0;
  int64_t cols = 0;
};

}  // namespace qlinear
