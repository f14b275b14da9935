// The format table and the scalar reference codec declared in formats.hpp.
//
// Every float format goes through one minifloat codec driven by its row (E, M, bias, specials); integers
// and E8M0 have their own short codecs. Tests compare all of them against tables
// generated independently from ml_dtypes and numpy (tools/gen_format_tables.py).
#include "qlinear/formats.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

namespace qlinear {
namespace {

using enum FormatKind;
using enum SpecialValues;
using D = DType;

// One row per DType, in enum order: traits() indexes this array by the enum value.
// Columns: dtype, name, kind, bits, E, M, bias, signed, specials, max_finite, min_normal, min_subnormal,
// codes_per_pack, bytes_per_pack, safetensors name. An integer's max_finite is its largest positive value
// (127 for I8), the symmetric range quantizers scale to.
// clang-format off
constexpr FormatTraits kFormatTable[] = {
  {D::kF64,    "f64",      kFloat,   64, 11, 52, 1023, true,  kIeee,           DBL_MAX,      0x1p-1022, 0x1p-1074, 1, 8, "F64"},
  {D::kF32,    "f32",      kFloat,   32,  8, 23,  127, true,  kIeee,           FLT_MAX,      0x1p-126,  0x1p-149,  1, 4, "F32"},
  {D::kF16,    "f16",      kFloat,   16,  5, 10,   15, true,  kIeee,           65504.0,      0x1p-14,   0x1p-24,   1, 2, "F16"},
  {D::kBF16,   "bf16",     kFloat,   16,  8,  7,  127, true,  kIeee,           0x1.fep127,   0x1p-126,  0x1p-133,  1, 2, "BF16"},
  {D::kF8E4M3, "f8e4m3fn", kFloat,    8,  4,  3,    7, true,  kNanOnlyMaxCode, 448.0,        0x1p-6,    0x1p-9,    1, 1, "F8_E4M3"},
  {D::kF8E5M2, "f8e5m2",   kFloat,    8,  5,  2,   15, true,  kIeee,           57344.0,      0x1p-14,   0x1p-16,   1, 1, "F8_E5M2"},
  {D::kF6E2M3, "f6e2m3fn", kFloat,    6,  2,  3,    1, true,  kNone,           7.5,          1.0,       0x1p-3,    4, 3, ""},
  {D::kF6E3M2, "f6e3m2fn", kFloat,    6,  3,  2,    3, true,  kNone,           28.0,         0x1p-2,    0x1p-4,    4, 3, ""},
  {D::kF4E2M1, "f4e2m1fn", kFloat,    4,  2,  1,    1, true,  kNone,           6.0,          1.0,       0x1p-1,    2, 1, ""},
  // E8M0 has no zero: its smallest value 2^-127 is both its min_normal and its min_subnormal.
  {D::kE8M0,   "e8m0fnu",  kScale,    8,  8,  0,  127, false, kE8M0,           0x1p127,      0x1p-127,  0x1p-127,  1, 1, ""},
  {D::kI8,     "i8",       kInteger,  8,  0,  0,    0, true,  kNone,           127.0,        0.0,       0.0,       1, 1, "I8"},
  {D::kU8,     "u8",       kInteger,  8,  0,  0,    0, false, kNone,           255.0,        0.0,       0.0,       1, 1, "U8"},
  {D::kI16,    "i16",      kInteger, 16,  0,  0,    0, true,  kNone,           32767.0,      0.0,       0.0,       1, 2, "I16"},
  {D::kI32,    "i32",      kInteger, 32,  0,  0,    0, true,  kNone,           2147483647.0, 0.0,       0.0,       1, 4, "I32"},
  // 2^63 - 1 is not a double; this is the nearest one, 2^63.
  {D::kI64,    "i64",      kInteger, 64,  0,  0,    0, true,  kNone,           0x1p63,       0.0,       0.0,       1, 8, "I64"},
};
// clang-format on

constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kFormatTable[i].dtype) != i) return false;
  }
  return true;
}
static_assert(std::size(kFormatTable) == kNumDTypes, "one row per DType");
static_assert(rows_in_enum_order(), "rows must follow the DType enum: traits() indexes by it");

// Names accepted by dtype_from_name besides each row's name and safetensors name: "e8m0" is the spelling
// formats.hpp's comments use.
struct Alias {
  std::string_view text;
  DType dtype;
};
constexpr Alias kAliases[] = {{"e8m0", DType::kE8M0}};

// Codes travel as uint32_t through the public API, so a 64-bit format (F64, I64) has no scalar code:
// decode gives NaN, encode and unpack_code give 0 and pack_code writes nothing, which any test that misuses
// them will notice. Their slots are read directly (element_as_double). The codec below works on uint64_t and needs no change to cover
// them once the API's code type is widened.
constexpr int kMaxCodeBits = 32;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr uint64_t low_bits(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

// Rounds x (0 <= x < 2^63, any fraction) to the nearest integer, ties to even. Written out rather than
// std::nearbyint so that the result does not depend on the floating-point environment's rounding mode.
uint64_t round_half_even(double x) {
  const double whole = std::floor(x);
  const double fraction = x - whole;  // exact (Sterbenz): whole <= x < 2 * whole, or whole = 0
  auto n = static_cast<uint64_t>(whole);
  if (fraction > 0.5 || (fraction == 0.5 && (n & 1) != 0)) ++n;
  return n;
}

// ---- Minifloats: sign | exponent (E bits) | mantissa (M bits) ------------------------------------------
// Magnitude codes are ordered like the values they encode, so "is it finite" and "did rounding overflow"
// are both one comparison against the largest finite magnitude code.

uint64_t max_finite_magnitude(const FormatTraits& t) {
  const int magnitude_bits = t.exponent_bits + t.mantissa_bits;
  switch (t.specials) {
    case kIeee: return (low_bits(t.exponent_bits) << t.mantissa_bits) - 1;  // below the Inf/NaN binade
    case kNanOnlyMaxCode: return low_bits(magnitude_bits) - 1;  // only S.1111.111 is NaN
    case kNone:
    case kE8M0: break;
  }
  return low_bits(magnitude_bits);
}

// The magnitude an out-of-range value takes in Overflow::kNonSaturating.
uint64_t nonsaturating_overflow_magnitude(const FormatTraits& t) {
  switch (t.specials) {
    case kIeee: return low_bits(t.exponent_bits) << t.mantissa_bits;  // Inf
    case kNanOnlyMaxCode: return low_bits(t.exponent_bits + t.mantissa_bits);  // NaN
    case kNone:
    case kE8M0: break;
  }
  return max_finite_magnitude(t);  // nothing beyond the largest finite value to encode
}

double decode_minifloat(const FormatTraits& t, uint64_t code) {
  const bool negative = (code >> (t.bits - 1) & 1) != 0;
  const uint64_t magnitude = code & low_bits(t.bits - 1);
  const uint64_t exponent = magnitude >> t.mantissa_bits;
  const uint64_t mantissa = magnitude & low_bits(t.mantissa_bits);
  double value;
  if (magnitude > max_finite_magnitude(t)) {
    value = t.specials == kIeee && mantissa == 0 ? kInf : kNaN;
  } else {
    // Subnormals (exponent field 0) have no implicit bit and share the exponent of the smallest normal.
    const uint64_t significand = exponent == 0 ? mantissa : mantissa | uint64_t{1} << t.mantissa_bits;
    const int scale = static_cast<int>(std::max<uint64_t>(exponent, 1)) - t.exponent_bias - t.mantissa_bits;
    value = std::ldexp(static_cast<double>(significand), scale);
  }
  return negative ? -value : value;
}

uint64_t encode_minifloat(const FormatTraits& t, double value, Overflow overflow) {
  const uint64_t sign = std::signbit(value) ? uint64_t{1} << (t.bits - 1) : 0;
  if (std::isnan(value)) {
    switch (t.specials) {
      case kIeee:  // exponent all ones, quiet bit (mantissa MSB) set
        return sign | low_bits(t.exponent_bits) << t.mantissa_bits | uint64_t{1} << (t.mantissa_bits - 1);
      case kNanOnlyMaxCode: return sign | low_bits(t.exponent_bits + t.mantissa_bits);
      case kNone:
      case kE8M0: break;
    }
    return 0;  // no NaN to give back: +0 (formats.hpp)
  }
  const uint64_t max_magnitude = max_finite_magnitude(t);
  const uint64_t overflow_magnitude =
      overflow == Overflow::kSaturate ? max_magnitude : nonsaturating_overflow_magnitude(t);
  const double a = std::fabs(value);
  if (a == 0) return sign;
  const int min_exponent = 1 - t.exponent_bias;  // of the smallest normal, and of the subnormals
  const int max_exponent = static_cast<int>(max_magnitude >> t.mantissa_bits) - t.exponent_bias;
  if (std::isinf(a) || std::ilogb(a) > max_exponent) return sign | overflow_magnitude;

  // a = q * 2^(e - M) with q in [0, 2^(M+1)): the scaling by a power of two is exact, so rounding q to an
  // integer is the only rounding.
  const int e = std::max(std::ilogb(a), min_exponent);
  const uint64_t q = round_half_even(std::ldexp(a, t.mantissa_bits - e));
  // For a normal q >= 2^M supplies the implicit bit, which adds one to the exponent field; when q rounds
  // up to 2^(M+1) the carry moves to the next binade (or past max_magnitude) by itself.
  const uint64_t magnitude = (static_cast<uint64_t>(e - min_exponent) << t.mantissa_bits) + q;
  return sign | (magnitude > max_magnitude ? overflow_magnitude : magnitude);
}

// ---- Integers: two's complement or unsigned ------------------------------------------------------------

double decode_integer(const FormatTraits& t, uint64_t code) {
  const uint64_t value = code & low_bits(t.bits);
  const bool negative = t.is_signed && (value >> (t.bits - 1) & 1) != 0;
  return negative ? static_cast<double>(static_cast<int64_t>(value | ~low_bits(t.bits)))
                  : static_cast<double>(value);
}

uint64_t encode_integer(const FormatTraits& t, double value) {
  if (std::isnan(value)) return 0;
  // Bounds are integers, so clamping before rounding gives the same result as after; exact for <= 32 bits.
  const double lo = t.is_signed ? -std::ldexp(1.0, t.bits - 1) : 0.0;
  const double hi = std::ldexp(1.0, t.is_signed ? t.bits - 1 : t.bits) - 1.0;
  const double clamped = std::clamp(value, lo, hi);
  const auto magnitude = static_cast<int64_t>(round_half_even(std::fabs(clamped)));
  const int64_t integer = clamped < 0 ? -magnitude : magnitude;
  return static_cast<uint64_t>(integer) & low_bits(t.bits);
}

// ---- E8M0: code c is 2^(c - 127), c = 255 is NaN --------------------------------------------------------
constexpr uint64_t kE8M0NaN = 0xFF;
constexpr uint64_t kE8M0MaxCode = 0xFE;  // 2^127
constexpr int kE8M0Bias = 127;

double decode_e8m0(uint64_t code) {
  code &= 0xFF;
  return code == kE8M0NaN ? kNaN : std::ldexp(1.0, static_cast<int>(code) - kE8M0Bias);
}

// A scale is a power of two, so "nearest" is measured in log2: v = m * 2^k with m in [1, 2) goes to 2^(k+1)
// when m > sqrt(2), else to 2^k. There are no ties: sqrt(2) * 2^k is irrational, never a double.
// (ml_dtypes' float8_e8m0fnu rounds in the linear domain instead, at 1.5 * 2^k.) Values below 2^-127 go
// to 2^-127, the nearest code. Zero, negatives and NaN have no code but NaN: E8M0 has no zero and no sign.
uint64_t encode_e8m0(double value, Overflow overflow) {
  if (std::isnan(value) || value <= 0) return kE8M0NaN;
  const uint64_t overflow_code = overflow == Overflow::kSaturate ? kE8M0MaxCode : kE8M0NaN;
  if (std::isinf(value)) return overflow_code;
  int exponent = 0;
  const double m = 2.0 * std::frexp(value, &exponent);  // value = m * 2^(exponent - 1), m in [1, 2)
  // m^2 - 2 in a single rounding: its sign is exact, and so is the comparison m > sqrt(2).
  const int k = exponent - 1 + (std::fma(m, m, -2.0) > 0 ? 1 : 0);
  if (k > kE8M0Bias) return overflow_code;
  return static_cast<uint64_t>(std::max(k, -kE8M0Bias) + kE8M0Bias);
}

// ---- Packing: a pack is `bytes_per_pack` bytes read as one little-endian word of `codes_per_pack`
// codes, code j at bit j * bits. For FP6 that is w = v0 | v1<<6 | v2<<12 | v3<<18; for FP4 the low nibble
// first; for byte-or-wider formats one element slot.

uint64_t read_pack(const uint8_t* pack, int bytes) {
  uint64_t word = 0;
  for (int i = 0; i < bytes; ++i) word |= uint64_t{pack[i]} << (8 * i);
  return word;
}

void write_pack(uint8_t* pack, int bytes, uint64_t word) {
  for (int i = 0; i < bytes; ++i) pack[i] = static_cast<uint8_t>(word >> (8 * i));
}

}  // namespace

const FormatTraits& traits(DType dtype) { return kFormatTable[static_cast<int>(dtype)]; }

std::span<const FormatTraits> all_formats() { return kFormatTable; }

std::string_view name(DType dtype) { return traits(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view text) {
  for (const FormatTraits& t : kFormatTable) {
    if (text == t.name || (!t.safetensors_name.empty() && text == t.safetensors_name)) return t.dtype;
  }
  for (const Alias& alias : kAliases) {
    if (text == alias.text) return alias.dtype;
  }
  return std::nullopt;
}

std::optional<int64_t> checked_storage_bytes(DType d, int64_t count) {
  const FormatTraits& t = traits(d);
  if (count < 0) return std::nullopt;
  const int64_t packs = count / t.codes_per_pack + (count % t.codes_per_pack != 0 ? 1 : 0);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(packs, int64_t{t.bytes_per_pack}, &bytes)) return std::nullopt;
  return bytes;
}

int64_t storage_bytes(DType d, int64_t count) {
  const std::optional<int64_t> bytes = checked_storage_bytes(d, count);
  if (!bytes) {
    throw std::length_error("storage_bytes: " + std::to_string(count) + " codes of " + std::string(name(d)) +
                            " is negative or needs more than 2^63 bytes");
  }
  return *bytes;
}

int element_size(DType d) { return is_packed(d) ? 0 : traits(d).bytes_per_pack; }

double decode(DType d, uint32_t code) {
  const FormatTraits& t = traits(d);
  if (t.bits > kMaxCodeBits) return kNaN;
  switch (t.kind) {
    case kFloat: return decode_minifloat(t, code);
    case kInteger: return decode_integer(t, code);
    case kScale: break;
  }
  return decode_e8m0(code);
}

uint32_t encode(DType d, double value, Overflow overflow) {
  const FormatTraits& t = traits(d);
  if (t.bits > kMaxCodeBits) return 0;
  switch (t.kind) {
    case kFloat: return static_cast<uint32_t>(encode_minifloat(t, value, overflow));
    case kInteger: return static_cast<uint32_t>(encode_integer(t, value));
    case kScale: break;
  }
  return static_cast<uint32_t>(encode_e8m0(value, overflow));
}

// The helpers go through the same codec, so they are exact (decode) and round to nearest even (encode);
// encode keeps the sign of a NaN and gives the canonical quiet NaN.
float bf16_to_float(uint16_t bits) { return static_cast<float>(decode(DType::kBF16, bits)); }
uint16_t float_to_bf16(float value) {
  return static_cast<uint16_t>(encode(DType::kBF16, value, Overflow::kNonSaturating));
}
float f16_to_float(uint16_t bits) { return static_cast<float>(decode(DType::kF16, bits)); }
uint16_t float_to_f16(float value) {
  return static_cast<uint16_t>(encode(DType::kF16, value, Overflow::kNonSaturating));
}

uint32_t unpack_code(DType d, const uint8_t* row, int64_t index) {
  const FormatTraits& t = traits(d);
  if (t.bits > kMaxCodeBits) return 0;
  const uint8_t* pack = row + index / t.codes_per_pack * t.bytes_per_pack;
  const int shift = static_cast<int>(index % t.codes_per_pack) * t.bits;
  return static_cast<uint32_t>(read_pack(pack, t.bytes_per_pack) >> shift & low_bits(t.bits));
}

void pack_code(DType d, uint8_t* row, int64_t index, uint32_t code) {
  const FormatTraits& t = traits(d);
  if (t.bits > kMaxCodeBits) return;
  uint8_t* pack = row + index / t.codes_per_pack * t.bytes_per_pack;
  const int shift = static_cast<int>(index % t.codes_per_pack) * t.bits;
  const uint64_t field = low_bits(t.bits) << shift;
  const uint64_t word = (read_pack(pack, t.bytes_per_pack) & ~field) | (uint64_t{code} << shift & field);
  write_pack(pack, t.bytes_per_pack, word);
}

}  // namespace qlinear
