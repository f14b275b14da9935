// The format table and its scalar reference codec, checked against tables derived independently from
// ml_dtypes and numpy (tools/gen_format_tables.py, which documents the file layouts), and by hand at the
// rounding boundaries that matter most.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qlinear/formats.hpp"

namespace qlinear {

// gtest prints parameters through PrintTo found by argument-dependent lookup, so it lives in qlinear (static:
// local to this test). Names the format instead of dumping the enum's byte.
static void PrintTo(DType d, std::ostream* os) { *os << name(d); }

namespace {

static_assert(std::endian::native == std::endian::little, "the tables are little-endian");

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Overflow kSat = Overflow::kSaturate;
constexpr Overflow kNonSat = Overflow::kNonSaturating;

// encode_<name>.bin, one record per input.
struct EncodeRecord {
  double input;
  uint32_t nonsaturating;
  uint32_t saturating;
};
static_assert(sizeof(EncodeRecord) == 16, "matches RECORD in tools/gen_format_tables.py");

template <class T>
std::vector<T> read_table(const std::string& file) {
  const std::string path = std::string(QLINEAR_TEST_DATA) + "/formats/" + file;
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() % sizeof(T) != 0) {
    ADD_FAILURE() << path << ": missing, empty or not a whole number of " << sizeof(T) << "-byte entries";
    return {};
  }
  std::vector<T> table(bytes.size() / sizeof(T));
  std::memcpy(table.data(), bytes.data(), bytes.size());
  return table;
}

std::string hex(uint32_t code) {
  std::ostringstream s;
  s << "0x" << std::hex << code;
  return s.str();
}

std::string show(double v) {
  std::ostringstream s;
  s << std::hexfloat << v << " (" << std::defaultfloat << std::setprecision(17) << v << ")";
  return s.str();
}

// Bit-exact on values: NaN matches NaN, and -0 differs from +0.
bool same_value(double expected, double actual) {
  if (std::isnan(expected) || std::isnan(actual)) return std::isnan(expected) && std::isnan(actual);
  return expected == actual && std::signbit(expected) == std::signbit(actual);
}

// Counts failures of a sweep and keeps the first few, so one broken rule does not print 65536 lines.
class Mismatches {
 public:
  void add(const std::string& what) {
    if (count_++ < kShown) text_ += "\n  " + what;
  }
  int count() const { return count_; }
  const std::string& text() const { return text_; }

 private:
  static constexpr int kShown = 10;
  int count_ = 0;
  std::string text_;
};

uint32_t code_count(DType d) { return uint32_t{1} << traits(d).bits; }

std::vector<DType> formats_up_to(int bits) {
  std::vector<DType> out;
  for (const FormatTraits& t : all_formats()) {
    if (t.bits <= bits) out.push_back(t.dtype);
  }
  return out;
}

std::string param_name(const testing::TestParamInfo<DType>& info) { return std::string(name(info.param)); }

// ---- Against the ml_dtypes / numpy tables ----------------------------------------------------------------

class DecodeTable : public testing::TestWithParam<DType> {};

TEST_P(DecodeTable, EveryCodeDecodesAsMlDtypes) {
  const DType d = GetParam();
  const auto expected = read_table<float>("decode_" + std::string(name(d)) + ".f32");
  ASSERT_EQ(expected.size(), code_count(d));
  Mismatches bad;
  for (uint32_t code = 0; code < code_count(d); ++code) {
    const double actual = decode(d, code);
    if (!same_value(expected[code], actual)) {
      bad.add("code " + hex(code) + ": expected " + show(expected[code]) + ", got " + show(actual));
    }
  }
  EXPECT_EQ(bad.count(), 0) << bad.text();
}

INSTANTIATE_TEST_SUITE_P(Formats, DecodeTable, testing::ValuesIn(formats_up_to(16)), param_name);

class EncodeTable : public testing::TestWithParam<DType> {};

TEST_P(EncodeTable, EveryInputEncodesAsMlDtypesInBothModes) {
  const DType d = GetParam();
  const auto records = read_table<EncodeRecord>("encode_" + std::string(name(d)) + ".bin");
  ASSERT_FALSE(records.empty());
  Mismatches bad;
  for (const EncodeRecord& r : records) {
    const uint32_t nonsaturating = encode(d, r.input, kNonSat);
    const uint32_t saturating = encode(d, r.input, kSat);
    if (nonsaturating != r.nonsaturating) {
      bad.add("non-saturating " + show(r.input) + ": expected " + hex(r.nonsaturating) + ", got " +
              hex(nonsaturating));
    }
    if (saturating != r.saturating) {
      bad.add("saturating " + show(r.input) + ": expected " + hex(r.saturating) + ", got " + hex(saturating));
    }
  }
  EXPECT_EQ(bad.count(), 0) << records.size() << " inputs" << bad.text();
}

// Every format whose codes fit the codec's uint32_t: all but F64 and I64.
INSTANTIATE_TEST_SUITE_P(Formats, EncodeTable, testing::ValuesIn(formats_up_to(32)), param_name);

TEST(EncodeTable, HelpersAgreeWithTheTablesOnFloat32Inputs) {
  // float_to_bf16 / float_to_f16 take a float: check them on the inputs that are exactly a float.
  for (DType d : {DType::kBF16, DType::kF16}) {
    const auto records = read_table<EncodeRecord>("encode_" + std::string(name(d)) + ".bin");
    int checked = 0;
    Mismatches bad;
    for (const EncodeRecord& r : records) {
      const auto f = static_cast<float>(r.input);
      if (!same_value(r.input, f)) continue;
      ++checked;
      const uint16_t got = d == DType::kBF16 ? float_to_bf16(f) : float_to_f16(f);
      if (got != r.nonsaturating) {
        bad.add(show(r.input) + ": expected " + hex(r.nonsaturating) + ", got " + hex(got));
      }
    }
    EXPECT_GT(checked, 1000) << name(d);
    EXPECT_EQ(bad.count(), 0) << name(d) << bad.text();
  }
  for (uint32_t code = 0; code < 65536; ++code) {
    ASSERT_TRUE(same_value(decode(DType::kBF16, code), bf16_to_float(static_cast<uint16_t>(code)))) << hex(code);
    ASSERT_TRUE(same_value(decode(DType::kF16, code), f16_to_float(static_cast<uint16_t>(code)))) << hex(code);
  }
}

TEST(FormatTables, MatchWhatMlDtypesGivesNow) {
  // The committed tables are only as good as their provenance: re-derive them and compare byte for byte.
  if (std::system("python3 -c 'import ml_dtypes, numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with ml_dtypes and numpy is not available (tools/setup.sh installs them), "
                    "so the committed tables in tests/data/formats were not re-derived";
  }
  const std::string command = "python3 '" QLINEAR_SOURCE_DIR "/tools/gen_format_tables.py' --check";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

// ---- Round trips -----------------------------------------------------------------------------------------

class RoundTrip : public testing::TestWithParam<DType> {};

TEST_P(RoundTrip, EncodeOfDecodeGivesTheCodeBack) {
  const DType d = GetParam();
  Mismatches bad;
  int finite = 0;
  for (uint32_t code = 0; code < code_count(d); ++code) {
    const double value = decode(d, code);
    if (std::isnan(value)) continue;
    ++finite;  // includes -0 and, where the format has them, +-Inf
    for (Overflow mode : {kSat, kNonSat}) {
      // Saturating encode turns Inf into max_finite by design; every other code must come back.
      const bool saturates = std::isinf(value) && mode == kSat;
      const uint32_t expected = saturates ? encode(d, std::copysign(traits(d).max_finite, value)) : code;
      const uint32_t back = encode(d, value, mode);
      if (back != expected) bad.add(hex(code) + " = " + show(value) + " came back as " + hex(back));
    }
  }
  EXPECT_GT(finite, 0);
  EXPECT_EQ(bad.count(), 0) << bad.text();
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip, testing::ValuesIn(formats_up_to(16)), param_name);

// ---- Traits ----------------------------------------------------------------------------------------------

TEST(Traits, OneRowPerDTypeInEnumOrder) {
  ASSERT_EQ(all_formats().size(), static_cast<size_t>(kNumDTypes));
  for (int i = 0; i < kNumDTypes; ++i) {
    EXPECT_EQ(static_cast<int>(all_formats()[i].dtype), i);
    EXPECT_EQ(&traits(static_cast<DType>(i)), &all_formats()[i]);
  }
}

class TraitsOf : public testing::TestWithParam<DType> {};

TEST_P(TraitsOf, ExtremesAreWhatTheCodesDecodeTo) {
  const DType d = GetParam();
  const FormatTraits& t = traits(d);
  double largest = 0;
  double most_negative = 0;
  double smallest_positive = kInf;
  for (uint32_t code = 0; code < code_count(d); ++code) {
    const double v = decode(d, code);
    if (std::isnan(v) || std::isinf(v)) continue;
    largest = std::max(largest, v);
    most_negative = std::min(most_negative, v);
    if (v > 0) smallest_positive = std::min(smallest_positive, v);
  }
  EXPECT_EQ(t.max_finite, largest);
  EXPECT_EQ(t.is_signed, most_negative < 0);
  if (t.kind == FormatKind::kFloat) {
    EXPECT_EQ(most_negative, -largest);
  }
  if (t.kind == FormatKind::kInteger) {
    EXPECT_EQ(t.min_normal, 0.0);
    EXPECT_EQ(t.min_subnormal, 0.0);
  } else {
    EXPECT_EQ(t.min_subnormal, smallest_positive);
  }
  if (t.kind == FormatKind::kFloat) {
    EXPECT_EQ(t.min_subnormal, decode(d, 1));
    EXPECT_EQ(t.min_normal, decode(d, 1u << t.mantissa_bits));  // exponent field 1, mantissa 0
    EXPECT_EQ(t.bits, 1 + t.exponent_bits + t.mantissa_bits);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, TraitsOf, testing::ValuesIn(formats_up_to(16)), param_name);

TEST(Traits, WideFormatsMatchTheirCppTypes) {
  EXPECT_EQ(traits(DType::kF32).max_finite, std::numeric_limits<float>::max());
  EXPECT_EQ(traits(DType::kF32).min_normal, std::numeric_limits<float>::min());
  EXPECT_EQ(traits(DType::kF32).min_subnormal, std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(decode(DType::kF32, 0x7F7FFFFF), std::numeric_limits<float>::max());
  EXPECT_EQ(traits(DType::kF64).max_finite, std::numeric_limits<double>::max());
  EXPECT_EQ(traits(DType::kF64).min_normal, std::numeric_limits<double>::min());
  EXPECT_EQ(traits(DType::kF64).min_subnormal, std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(traits(DType::kI32).max_finite, 2147483647.0);
  EXPECT_EQ(decode(DType::kI32, 0x7FFFFFFF), 2147483647.0);
}

TEST(Traits, NamesRoundTrip) {
  for (const FormatTraits& t : all_formats()) {
    EXPECT_EQ(dtype_from_name(t.name), t.dtype) << t.name;
    EXPECT_EQ(name(t.dtype), t.name);
    if (!t.safetensors_name.empty()) {
      EXPECT_EQ(dtype_from_name(t.safetensors_name), t.dtype) << t.safetensors_name;
    }
  }
  EXPECT_EQ(dtype_from_name("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(dtype_from_name("bf16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("e8m0"), DType::kE8M0);  // the short spelling formats.hpp uses
  EXPECT_EQ(dtype_from_name("e8m0fnu"), DType::kE8M0);
  EXPECT_EQ(dtype_from_name(""), std::nullopt);  // FP6/FP4/E8M0 have no safetensors name
  EXPECT_EQ(dtype_from_name("float8_e4m3fn"), std::nullopt);
  EXPECT_EQ(dtype_from_name("BF16 "), std::nullopt);
  EXPECT_EQ(traits(DType::kF4E2M1).safetensors_name, "");
  EXPECT_EQ(traits(DType::kE8M0).safetensors_name, "");
}

TEST(Traits, StorageOfPackedAndUnpackedFormats) {
  EXPECT_TRUE(is_packed(DType::kF4E2M1));
  EXPECT_TRUE(is_packed(DType::kF6E2M3));
  EXPECT_TRUE(is_packed(DType::kF6E3M2));
  EXPECT_FALSE(is_packed(DType::kF8E4M3));
  EXPECT_FALSE(is_packed(DType::kE8M0));
  EXPECT_EQ(element_size(DType::kF4E2M1), 0);
  EXPECT_EQ(element_size(DType::kF6E2M3), 0);
  EXPECT_EQ(element_size(DType::kBF16), 2);
  EXPECT_EQ(element_size(DType::kF64), 8);
  EXPECT_EQ(element_size(DType::kE8M0), 1);
  EXPECT_EQ(storage_bytes(DType::kF4E2M1, 0), 0);
  EXPECT_EQ(storage_bytes(DType::kF4E2M1, 3), 2);  // the last byte holds one code
  EXPECT_EQ(storage_bytes(DType::kF6E3M2, 4), 3);
  EXPECT_EQ(storage_bytes(DType::kF6E3M2, 5), 6);  // whole packs of 4 codes / 3 bytes
  EXPECT_EQ(storage_bytes(DType::kF32, 7), 28);
  EXPECT_EQ(storage_bytes(DType::kI64, 3), 24);
  EXPECT_TRUE(is_float(DType::kF4E2M1));
  EXPECT_FALSE(is_float(DType::kE8M0));
  EXPECT_FALSE(is_float(DType::kI8));
}

// ---- Rounding boundaries, by hand ------------------------------------------------------------------------

TEST(Boundaries, E4M3OverflowsAtTheMidpointPast448) {
  // 448 = 1.75 * 2^8 is the top (S.1111.110); 480 would be S.1111.111, which is NaN. 464 is the tie between
  // them: to even, i.e. down to 448. Just above it rounds up, into NaN unless saturating.
  EXPECT_EQ(encode(DType::kF8E4M3, 448.0, kNonSat), 0x7Eu);
  EXPECT_EQ(encode(DType::kF8E4M3, 464.0, kNonSat), 0x7Eu);
  EXPECT_EQ(encode(DType::kF8E4M3, std::nextafter(464.0, kInf), kNonSat), 0x7Fu);
  EXPECT_EQ(encode(DType::kF8E4M3, std::nextafter(464.0, kInf), kSat), 0x7Eu);
  EXPECT_EQ(encode(DType::kF8E4M3, 500.0, kSat), 0x7Eu);
  EXPECT_EQ(encode(DType::kF8E4M3, -500.0, kSat), 0xFEu);
  EXPECT_EQ(encode(DType::kF8E4M3, -500.0, kNonSat), 0xFFu);
  EXPECT_EQ(encode(DType::kF8E4M3, kInf, kSat), 0x7Eu);
  EXPECT_EQ(encode(DType::kF8E4M3, kInf, kNonSat), 0x7Fu);
  EXPECT_EQ(encode(DType::kF8E4M3, kNaN, kSat), 0x7Fu);
  EXPECT_TRUE(std::isnan(decode(DType::kF8E4M3, 0x7F)));
  EXPECT_EQ(decode(DType::kF8E4M3, 0x78), 256.0);  // S.1111.000 is finite in E4M3FN
}

TEST(Boundaries, E5M2OverflowsToInfinity) {
  // 57344 = 1.75 * 2^15 (0x7B, mantissa odd); the tie 61440 with Inf rounds to even: up, to Inf.
  EXPECT_EQ(encode(DType::kF8E5M2, 61440.0, kNonSat), 0x7Cu);
  EXPECT_EQ(encode(DType::kF8E5M2, 61440.0, kSat), 0x7Bu);
  EXPECT_EQ(encode(DType::kF8E5M2, std::nextafter(61440.0, 0.0), kNonSat), 0x7Bu);
  EXPECT_EQ(encode(DType::kF8E5M2, -kInf, kNonSat), 0xFCu);
  EXPECT_EQ(encode(DType::kF8E5M2, kNaN), 0x7Eu);
}

TEST(Boundaries, Fp4TiesGoToEvenCodes) {
  // E2M1 magnitudes: 0, 0.5, 1, 1.5, 2, 3, 4, 6 at codes 0..7.
  EXPECT_EQ(encode(DType::kF4E2M1, 0.25), 0x0u);  // tie 0 | 0.5: code 0 is even
  EXPECT_EQ(encode(DType::kF4E2M1, std::nextafter(0.25, 1.0)), 0x1u);
  EXPECT_EQ(encode(DType::kF4E2M1, 0.75), 0x2u);  // tie 0.5 | 1: the subnormal 0.5 is odd
  EXPECT_EQ(encode(DType::kF4E2M1, 1.25), 0x2u);  // tie 1 | 1.5
  EXPECT_EQ(encode(DType::kF4E2M1, 1.75), 0x4u);  // tie 1.5 | 2, carries into the next binade
  EXPECT_EQ(encode(DType::kF4E2M1, 2.5), 0x4u);
  EXPECT_EQ(encode(DType::kF4E2M1, 5.0), 0x6u);   // tie 4 | 6
  EXPECT_EQ(encode(DType::kF4E2M1, -0.25), 0x8u);  // rounds to -0
  EXPECT_EQ(encode(DType::kF4E2M1, 7.0, kNonSat), 0x7u);  // no Inf, no NaN: saturates in both modes
  EXPECT_EQ(encode(DType::kF4E2M1, -kInf, kNonSat), 0xFu);
}

TEST(Boundaries, Fp6SaturatesInBothModes) {
  EXPECT_EQ(encode(DType::kF6E2M3, 7.75, kNonSat), 0x1Fu);  // tie 7.5 | 8: 8 does not exist
  EXPECT_EQ(encode(DType::kF6E2M3, 1e9, kNonSat), 0x1Fu);
  EXPECT_EQ(encode(DType::kF6E3M2, -1e9, kNonSat), 0x3Fu);
  EXPECT_EQ(decode(DType::kF6E3M2, 0x3F), -28.0);
  EXPECT_EQ(encode(DType::kF6E2M3, 0.0625), 0x0u);  // half of the smallest subnormal 0.125: to even
  EXPECT_EQ(encode(DType::kF6E2M3, 0.1875), 0x2u);  // 1.5 subnormal steps: to even, 2
}

TEST(Boundaries, NanWithoutANanCodeIsPositiveZero) {
  for (DType d : {DType::kF6E2M3, DType::kF6E3M2, DType::kF4E2M1}) {
    for (Overflow mode : {kSat, kNonSat}) {
      EXPECT_EQ(encode(d, kNaN, mode), 0u) << name(d);
      EXPECT_EQ(encode(d, -kNaN, mode), 0u) << name(d);
    }
  }
}

TEST(Boundaries, HalfPrecisionTiesToEven) {
  // bf16 around 1 has spacing 2^-7: 1 + 2^-8 is a tie between 0x3F80 (even) and 0x3F81.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie 0x3F81 | 0x3F82
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past bf16's max: Inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  // f16: 65520 is the tie between 65504 (0x7BFF, odd) and 2^16: to Inf.
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);  // half the smallest subnormal: to even, 0
  EXPECT_EQ(float_to_f16(0x1.8p-24f), 0x0002);  // 1.5 subnormal steps: to even, 2
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(encode(DType::kF16, 65520.0, kSat), 0x7BFFu);
  // One rounding from double: just above a bf16 tie rounds up (rounding through float would not).
  EXPECT_EQ(encode(DType::kBF16, std::nextafter(1.0 + 0x1p-8, 2.0)), 0x3F81u);
}

TEST(Boundaries, E8M0RoundsInLog2) {
  EXPECT_EQ(decode(DType::kE8M0, 127), 1.0);
  EXPECT_EQ(decode(DType::kE8M0, 0), 0x1p-127);
  EXPECT_EQ(decode(DType::kE8M0, 254), 0x1p127);
  EXPECT_TRUE(std::isnan(decode(DType::kE8M0, 255)));
  // log2(1.41) = 0.496 -> 2^0; log2(1.45) = 0.536 -> 2^1 (linear rounding, ml_dtypes', would give 2^0).
  EXPECT_EQ(encode(DType::kE8M0, 1.41), 127u);
  EXPECT_EQ(encode(DType::kE8M0, 1.45), 128u);
  EXPECT_EQ(encode(DType::kE8M0, 0.75), 127u);  // log2 = -0.415
  EXPECT_EQ(encode(DType::kE8M0, 0x1p-140), 0u);  // below the smallest code: it is the nearest
  EXPECT_EQ(encode(DType::kE8M0, 0x1.8p127, kSat), 254u);
  EXPECT_EQ(encode(DType::kE8M0, 0x1.8p127, kNonSat), 255u);
  EXPECT_EQ(encode(DType::kE8M0, kInf, kSat), 254u);
  for (Overflow mode : {kSat, kNonSat}) {  // no zero, no sign: NaN is the only answer
    EXPECT_EQ(encode(DType::kE8M0, 0.0, mode), 255u);
    EXPECT_EQ(encode(DType::kE8M0, -2.0, mode), 255u);
    EXPECT_EQ(encode(DType::kE8M0, kNaN, mode), 255u);
  }
}

TEST(Boundaries, IntegersRoundHalfToEvenAndClamp) {
  EXPECT_EQ(encode(DType::kI8, 2.5), 2u);
  EXPECT_EQ(encode(DType::kI8, 3.5), 4u);
  EXPECT_EQ(encode(DType::kI8, -2.5), 0xFEu);
  EXPECT_EQ(encode(DType::kI8, 127.5), 0x7Fu);
  EXPECT_EQ(encode(DType::kI8, -1e9, kNonSat), 0x80u);  // no Inf: both modes clamp
  EXPECT_EQ(encode(DType::kI8, kNaN), 0u);
  EXPECT_EQ(encode(DType::kU8, -0.7), 0u);
  EXPECT_EQ(encode(DType::kU8, 255.4), 0xFFu);
  EXPECT_EQ(encode(DType::kI32, -1.0), 0xFFFFFFFFu);
  EXPECT_EQ(encode(DType::kI32, kInf), 0x7FFFFFFFu);
  EXPECT_EQ(decode(DType::kI8, 0x80), -128.0);
  EXPECT_EQ(decode(DType::kI8, 0x1FF), -1.0);  // only the low 8 bits count
  EXPECT_EQ(decode(DType::kI32, 0x80000000), -2147483648.0);
  EXPECT_EQ(decode(DType::kU8, 0xFF), 255.0);
}

TEST(Boundaries, SixtyFourBitFormatsHaveNoScalarCode) {
  // Codes are uint32_t: F64 and I64 are read from their slots directly, not through the codec.
  EXPECT_TRUE(std::isnan(decode(DType::kF64, 0)));
  EXPECT_TRUE(std::isnan(decode(DType::kI64, 1)));
  EXPECT_EQ(encode(DType::kF64, 1.0), 0u);
  EXPECT_EQ(encode(DType::kI64, 1.0), 0u);
}

// ---- Packing ---------------------------------------------------------------------------------------------

TEST(Packing, Fp6WorkedExample) {
  // codes [1, 2, 3, 4]: w = 1 | 2<<6 | 3<<12 | 4<<18 = 0x000001 + 0x000080 + 0x003000 + 0x100000 = 0x103081,
  // stored little-endian: 0x81, 0x30, 0x10.
  uint8_t row[3] = {};
  for (int i = 0; i < 4; ++i) pack_code(DType::kF6E2M3, row, i, static_cast<uint32_t>(i + 1));
  EXPECT_EQ(row[0], 0x81);
  EXPECT_EQ(row[1], 0x30);
  EXPECT_EQ(row[2], 0x10);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(unpack_code(DType::kF6E3M2, row, i), static_cast<uint32_t>(i + 1));
}

TEST(Packing, Fp4LowNibbleFirst) {
  // codes [0x1, 0xF, 0x3]: byte 0 = 0xF << 4 | 0x1, byte 1 holds code 2 in its low nibble.
  uint8_t row[2] = {};
  const uint32_t codes[] = {0x1, 0xF, 0x3};
  for (int i = 0; i < 3; ++i) pack_code(DType::kF4E2M1, row, i, codes[i]);
  EXPECT_EQ(row[0], 0xF1);
  EXPECT_EQ(row[1], 0x03);
  EXPECT_EQ(unpack_code(DType::kF4E2M1, row, 1), 0xFu);
  EXPECT_EQ(unpack_code(DType::kF4E2M1, row, 2), 0x3u);
}

class Packing : public testing::TestWithParam<DType> {};

TEST_P(Packing, RandomRowsRoundTripAndLeaveNeighboursAlone) {
  const DType d = GetParam();
  const uint32_t mask = static_cast<uint32_t>((uint64_t{1} << traits(d).bits) - 1);
  std::mt19937 rng(1234);
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 33, 64}) {
    std::vector<uint32_t> codes(n);
    for (auto& c : codes) c = rng() & mask;
    std::vector<uint8_t> row(storage_bytes(d, n));
    for (auto& b : row) b = static_cast<uint8_t>(rng());  // packing must overwrite, not OR into, a field
    for (int64_t i = 0; i < n; ++i) pack_code(d, row.data(), i, codes[i]);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(unpack_code(d, row.data(), i), codes[i]) << "n=" << n << " i=" << i;
    // Rewrite each code in turn: only that code may change.
    for (int64_t i = 0; i < n; ++i) {
      codes[i] = rng() & mask;
      pack_code(d, row.data(), i, codes[i] | ~mask);  // bits above the code must be ignored
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(unpack_code(d, row.data(), j), codes[j]) << "n=" << n << " wrote " << i << ", read " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Packing,
                         testing::Values(DType::kF4E2M1, DType::kF6E2M3, DType::kF6E3M2, DType::kF8E4M3,
                                         DType::kE8M0, DType::kBF16, DType::kI32),
                         param_name);

}  // namespace
}  // namespace qlinear
