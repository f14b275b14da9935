#pragma once
// Every element and scale format qlinear knows, in one table (formats.cpp), with its scalar reference codec.
// Adding a format is a row in kFormatTable, a NaN/Inf rule if it is new, and its exhaustive test table.
//
// Storage: a Tensor's dtype is what its bytes hold. Byte-sized and wider formats are stored one element per
// slot. Sub-byte formats are stored packed in U8 tensors, the way checkpoints carry them:
//   FP4 E2M1: two codes per byte, element 2i in the low nibble, 2i+1 in the high nibble.
//   FP6 E2M3/E3M2: four codes in three bytes, w = v0 | v1<<6 | v2<<12 | v3<<18, stored little-endian
//                  (byte0 = w & 0xFF, byte1 = w >> 8 & 0xFF, byte2 = w >> 16) — AMD Quark / vLLM layout.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qlinear {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP E4M3FN: no Inf, NaN = S.1111.111, max 448
  kF8E5M2,  // IEEE-like: Inf and NaN, max 57344
  kF6E2M3,  // OCP MX FP6: no Inf/NaN, max 7.5
  kF6E3M2,  // OCP MX FP6: no Inf/NaN, max 28
  kF4E2M1,  // OCP MX FP4: no Inf/NaN, max 6
  kE8M0,    // OCP MX scale: 2^(code-127), code 255 = NaN, no zero, no sign
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
};
inline constexpr int kNumDTypes = static_cast<int>(DType::kI64) + 1;

// How a format spends its all-ones exponent (or its special codes).
enum class SpecialValues : uint8_t {
  kNone,          // every code is finite (FP6, FP4, integers)
  kIeee,          // exponent all ones: Inf when mantissa = 0, NaN otherwise (F32, F16, BF16, E5M2)
  kNanOnlyMaxCode,  // only S.1111.111 is NaN, the rest of the top binade is finite (E4M3FN)
  kE8M0,          // code 0xFF is NaN; no zero, no sign
};

enum class FormatKind : uint8_t { kFloat, kInteger, kScale };

struct FormatTraits {
  DType dtype;
  std::string_view name;  // canonical short name (ml_dtypes spelling): "f8e4m3fn", "bf16", "e8m0fnu", "i8"
  FormatKind kind;
  int bits;                 // bits per code
  int exponent_bits;        // floats: E; integers/scale: 0 / 8
  int mantissa_bits;        // floats: M (without the implicit bit)
  int exponent_bias;        // floats and E8M0
  bool is_signed;
  SpecialValues specials;
  double max_finite;        // largest finite value (integers: the largest positive one)
  double min_normal;        // smallest positive normal (floats; E8M0: 2^-127), 0 otherwise
  double min_subnormal;     // smallest positive value (floats), 0 otherwise
  int codes_per_pack;       // sub-byte packing: codes in one pack (1 for byte+ formats)
  int bytes_per_pack;       // bytes of one pack
  std::string_view safetensors_name;  // dtype string in safetensors headers ("" when none)
};

// The one table. Indexed by DType.
const FormatTraits& traits(DType dtype);
std::span<const FormatTraits> all_formats();
std::string_view name(DType dtype);
// Looks a dtype up by its canonical name or its safetensors name ("F8_E4M3", "BF16", ...).
std::optional<DType> dtype_from_name(std::string_view text);

inline bool is_float(DType d) { return traits(d).kind == FormatKind::kFloat; }
inline bool is_packed(DType d) { return traits(d).codes_per_pack > 1; }
// Bytes needed to store `count` codes of `d` (packed formats round up to whole packs). A negative count or
// one whose bytes overflow int64 throws std::length_error; checked_storage_bytes returns nullopt instead.
int64_t storage_bytes(DType d, int64_t count);
std::optional<int64_t> checked_storage_bytes(DType d, int64_t count);
// Bytes of one element slot for byte-or-wider formats; 0 for packed sub-byte formats.
int element_size(DType d);

// ---- Scalar reference codec --------------------------------------------------------------------------
// Obviously-right, slow code: fast kernels use lookup tables or SIMD built from (and tested against) it.

// Exact value of `code` (low `bits` bits used). Integers decode to their value; E8M0 to 2^(code-127).
double decode(DType d, uint32_t code);

enum class Overflow : uint8_t {
  kSaturate,        // out-of-range finite values and ±Inf clamp to ±max_finite
  kNonSaturating,   // out-of-range values become Inf where the format has Inf, NaN where it has only NaN;
                    // formats with neither (FP6, FP4) saturate anyway (there is nothing else to encode)
};

// Round-to-nearest-even encode of `value`. NaN encodes to the format's NaN; formats without NaN encode NaN
// as +0 (documented choice: there is no NaN to give back; quantizers never produce NaN from finite data).
// Integers round half to even and clamp to their range; E8M0 rounds log2 to the nearest exponent.
uint32_t encode(DType d, double value, Overflow overflow = Overflow::kSaturate);

// Convenience for the float16 family and scalars.
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);  // RNE, NaN preserved
float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float value);   // RNE, overflow -> Inf

// ---- Sub-byte packing ----------------------------------------------------------------------------------
// Reads code `index` of a packed row (FP4 or FP6 layout above).
uint32_t unpack_code(DType d, const uint8_t* row, int64_t index);
// Writes code `index` into a packed row (other codes in the same bytes are preserved).
void pack_code(DType d, uint8_t* row, int64_t index, uint32_t code);

}  // namespace qlinear
