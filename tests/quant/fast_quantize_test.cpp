// quantize_fast against the reference quantizer, byte for byte, for every kernel set this CPU can run
// (AVX-512, AVX2, scalar): fresh random data each run (the seed is printed on failure) with the values
// that decide rounding and scales: zeros and negative zeros, subnormals, huge values, exact midpoints
// between two codes and their f32 neighbours, amax on power-of-two boundaries; F32, BF16 and F16 input;
// row and column counts off every vector width and block size; and Inf / NaN (the same error).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/fast_quant_isa.hpp"
#include "quant/quant_test_util.hpp"

namespace qlinear {
namespace {

using quant::fast::Kernels;
using quant_test::make_tensor;

struct Case {
  const char* name;
  QuantKey key;
  std::optional<MxScaleRule> rule;
};

std::vector<Case> cases() {
  std::vector<Case> out = {
      {"fp8 static tensor", kFp8StaticTensorSym, {}},
      {"fp8 dynamic tensor", kFp8DynamicTensorSym, {}},
      {"fp8 channel", kFp8StaticChannelSym, {}},
      {"fp8 dynamic token", kFp8DynamicTokenSym, {}},
      {"fp8 dynamic 1x128", kFp8Dynamic128Sym, {}},
      {"fp8 dynamic 1x64", kFp8Dynamic64Sym, {}},
      {"fp8 static 128x128", kFp8Static128BlockSym, {}},
      {"int8 static tensor", kInt8StaticTensorSym, {}},
      {"int8 channel", kInt8StaticChannelSym, {}},
      {"int8 dynamic token", kInt8DynamicTokenSym, {}},
      {"int8 dynamic token asym", kInt8DynamicTokenAsym, {}},
      {"nvfp4 static", kNvfp4Static, {}},
      {"nvfp4 dynamic global", kNvfp4DynamicGlobal, {}},
  };
  const QuantKey mx[] = {kMxfp8Static, kMxfp6E2M3Static, kMxfp6E3M2Static, kMxfp4Static, kMxfp4Dynamic};
  const MxScaleRule rules[] = {MxScaleRule::kCeilOverMax, MxScaleRule::kFloorLog2, MxScaleRule::kOcp,
                               MxScaleRule::kQuarkEven};
  for (const QuantKey& k : mx) {
    out.push_back({"mx default rule", k, {}});
    for (MxScaleRule r : rules) out.push_back({"mx", k, r});
  }
  return out;
}

// Values whose rounding is decided at a midpoint: for a scale s, the f32 values nearest m * s for the
// midpoints m of the element grid, and their neighbours one ulp away.
void add_midpoints(std::vector<double>& row, double s, DType elem, std::mt19937_64& rng) {
  std::vector<double> mids;
  if (elem == DType::kI8) {
    for (int i = 0; i < 127; ++i) mids.push_back(i + 0.5);
  } else {
    for (uint32_t c = 0; c + 1 < (1u << (traits(elem).bits - 1)); ++c) {
      const double a = decode(elem, c), b = decode(elem, c + 1);
      if (std::isfinite(a) && std::isfinite(b)) mids.push_back((a + b) / 2);
    }
  }
  std::uniform_int_distribution<size_t> pick(0, mids.size() - 1);
  std::uniform_int_distribution<int> step(-1, 1);
  for (double& v : row) {
    if (rng() % 3 != 0) continue;
    float f = static_cast<float>(mids[pick(rng)] * s);
    const int k = step(rng);
    if (k != 0) f = std::nextafter(f, k > 0 ? INFINITY : 0.0f);
    v = (rng() & 1) ? -static_cast<double>(f) : f;
  }
}

DType element_of(const QuantKey& k) { return k.dtype; }

// Rows of different kinds; the kind of row r is r % 12 (so every shape sees many of them).
std::vector<double> test_values(int64_t rows, int64_t cols, DType in, const QuantKey& key, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uni(-1, 1);
  const double big = in == DType::kF16 ? 3e4 : 1e30;
  const double tiny = in == DType::kF16 ? 1e-6 : in == DType::kBF16 ? 1e-39 : 1e-42;  // subnormal in `in`
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> row(static_cast<size_t>(cols));
    const int kind = static_cast<int>(r % 12);
    const double mag = std::pow(2.0, static_cast<int>(rng() % 40) - 20);
    for (int64_t c = 0; c < cols; ++c) {
      double x = normal(rng) * mag;
      switch (kind) {
        case 0: x = 0; break;
        case 1: x = (c % 3 == 0) ? -0.0 : 0.0; break;
        case 2: x = normal(rng) * big; break;
        case 3: x = normal(rng) * tiny; break;
        case 4: x = (c % 7 == 0) ? normal(rng) * big : normal(rng) * tiny; break;
        case 5: x = c == cols / 2 ? -3.5 * mag : 0.0; break;
        case 6: x = std::ldexp(std::round(uni(rng) * 64) / 8, static_cast<int>(rng() % 8)); break;  // short mantissas
        case 7: x = normal(rng) * std::pow(10.0, 3 * uni(rng)) * mag; break;
        default: break;
      }
      row[static_cast<size_t>(c)] = x;
    }
    if (kind >= 8) {
      // An amax that makes s a power of two (exact quotients, many exact ties) or an arbitrary f32 scale.
      const double elem_max = key.dtype == DType::kI8 ? 127.0 : traits(element_of(key)).max_finite;
      const double s = kind == 8 ? std::ldexp(1.0, static_cast<int>(rng() % 20) - 10) : std::fabs(normal(rng)) + 0.01;
      add_midpoints(row, s, key.dtype == DType::kI8 ? DType::kI8 : element_of(key), rng);
      row[static_cast<size_t>(rng() % cols)] = elem_max * s;
    }
    std::copy(row.begin(), row.end(), v.begin() + r * cols);
  }
  return v;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  const auto* pa = static_cast<const uint8_t*>(a.raw());
  const auto* pb = static_cast<const uint8_t*>(b.raw());
  for (int64_t i = 0; i < a.nbytes(); ++i) {
    ASSERT_EQ(pa[i], pb[i]) << what << ": byte " << i << " of " << a.nbytes();
  }
}

void expect_same(const Result<QuantizedTensor>& fast, const Result<QuantizedTensor>& ref) {
  ASSERT_EQ(static_cast<bool>(fast), static_cast<bool>(ref)) << (fast ? ref.message() : fast.message());
  if (!ref) {
    EXPECT_EQ(fast.message(), ref.message());
    return;
  }
  EXPECT_EQ(fast->rows, ref->rows);
  EXPECT_EQ(fast->cols, ref->cols);
  expect_same_tensor(fast->data, ref->data, "data");
  expect_same_tensor(fast->scale, ref->scale, "scale");
  expect_same_tensor(fast->scale2, ref->scale2, "scale2");
  expect_same_tensor(fast->zero_point, ref->zero_point, "zero_point");
}

// The reference's OpenMP team would spin between its calls while the pool runs quantize_fast's items:
// one OpenMP thread keeps the two from fighting over the cores.
class OneOpenMpThread : public ::testing::Environment {
 public:
  void SetUp() override { omp_set_num_threads(1); }
};
const auto* const kOneOpenMpThread = ::testing::AddGlobalTestEnvironment(new OneOpenMpThread);

uint64_t fresh_seed() { return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}(); }

TEST(QuantizeFast, EveryKernelSetMatchesTheReferenceBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 32}, {3, 64}, {7, 96}, {17, 160}, {130, 288},
                                                           {257, 160}, {2, 1056}, {5, 999}, {131, 130}};
  uint64_t n = 0;
  const std::vector<const Kernels*> kernel_sets = quant::fast::usable_kernels();
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(c.name) + " " + key_name(c.key));
    for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string("input ") + std::string(name(in)));
      for (auto [rows, cols] : shapes) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
        const Tensor x = make_tensor(in, rows, cols, test_values(rows, cols, in, c.key, seed + n++));
        QuantizeOptions o;
        o.mx_rule = c.rule;
        const auto ref = quantize(x, c.key, o);
        for (const Kernels* k : kernel_sets) {
          SCOPED_TRACE(std::string("kernels ") + k->name);
          expect_same(quant::fast::quantize_with(*k, x, c.key, o), ref);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(QuantizeFast, GivenScalesAndGlobalScales) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(0.001f, 2.0f);
  for (const Kernels* k : quant::fast::usable_kernels()) {
    SCOPED_TRACE(std::string("kernels ") + k->name);
    const Tensor x = make_tensor(DType::kBF16, 33, 160, test_values(33, 160, DType::kBF16, kFp8StaticTokenSym, rng()));
    QuantizeOptions tensor_scale;
    tensor_scale.static_scale = quant_test::f32_tensor({1}, {uni(rng)});
    expect_same(quant::fast::quantize_with(*k, x, kFp8StaticTensorSym, tensor_scale),
                quantize(x, kFp8StaticTensorSym, tensor_scale));
    expect_same(quant::fast::quantize_with(*k, x, kInt8StaticTensorSym, tensor_scale),
                quantize(x, kInt8StaticTensorSym, tensor_scale));
    std::vector<float> rows(33);
    for (float& v : rows) v = uni(rng);
    QuantizeOptions token_scale;
    token_scale.static_scale = quant_test::f32_tensor({33, 1}, rows);
    expect_same(quant::fast::quantize_with(*k, x, kFp8StaticTokenSym, token_scale),
                quantize(x, kFp8StaticTokenSym, token_scale));
    QuantizeOptions ub;
    ub.scale_ub = 0.5f;
    expect_same(quant::fast::quantize_with(*k, x, kFp8DynamicTokenSym, ub), quantize(x, kFp8DynamicTokenSym, ub));
    for (float g : {1.0f, 3.7f, 1e-30f, 3e38f}) {
      QuantizeOptions global;
      global.nvfp4_global_scale = g;
      expect_same(quant::fast::quantize_with(*k, x, kNvfp4Static, global), quantize(x, kNvfp4Static, global));
    }
  }
}

// Every f32 exponent as a block maximum (MX exponents, NVFP4 block scales, FP8 scales near f32's ends).
TEST(QuantizeFast, BlockMaximaOverTheWholeF32Range) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = 4, cols = 32 * 300;
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const int e = static_cast<int>(b % 278) - 149;  // 2^-149 .. 2^128
      for (int64_t i = 0; i < 32; ++i) {
        const uint32_t mant = (i == 0 && (rng() & 1)) ? 0x7FFFFFu : static_cast<uint32_t>(rng() & 0x7FFFFF);
        double x = std::ldexp(1.0 + mant * 0x1p-23, e);
        if (e >= 128) x = std::numeric_limits<float>::max() * (i == 3 ? 1.0 : 0.5);
        v[static_cast<size_t>(r * cols + b * 32 + i)] = (rng() & 1) ? -x : x;
      }
    }
  }
  const Tensor x = make_tensor(DType::kF32, rows, cols, v);
  for (const Kernels* k : quant::fast::usable_kernels()) {
    SCOPED_TRACE(std::string("kernels ") + k->name);
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + key_name(c.key));
      QuantizeOptions o;
      o.mx_rule = c.rule;
      expect_same(quant::fast::quantize_with(*k, x, c.key, o), quantize(x, c.key, o));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(QuantizeFast, InfAndNanGiveTheReferenceError) {
  for (const Kernels* k : quant::fast::usable_kernels()) {
    SCOPED_TRACE(std::string("kernels ") + k->name);
    for (double bad : {INFINITY, -INFINITY, NAN}) {
      for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
        std::vector<double> v(5 * 64, 1.0);
        v[3 * 64 + 40] = bad;
        const Tensor x = make_tensor(in, 5, 64, v);
        for (const Case& c : cases()) {
          QuantizeOptions o;
          o.mx_rule = c.rule;
          const auto fast = quant::fast::quantize_with(*k, x, c.key, o);
          EXPECT_FALSE(fast) << c.name;
          expect_same(fast, quantize(x, c.key, o));
        }
      }
    }
  }
}

TEST(QuantizeFast, LargeOperandOverThreads) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x = make_tensor(DType::kBF16, 700, 1024, test_values(700, 1024, DType::kBF16, kFp8StaticChannelSym, seed));
  for (const QuantKey& key : {kFp8StaticChannelSym, kFp8Static128BlockSym, kFp8StaticTensorSym, kInt8StaticChannelSym,
                              kMxfp4Static, kMxfp6E3M2Static, kMxfp8Static, kNvfp4Static}) {
    SCOPED_TRACE(key_name(key));
    expect_same(quantize_fast(x, key), quantize(x, key));
  }
}

// With QuantizeBufferReuse, outputs land in buffers earlier outputs left behind: poison each output before
// it is freed, so that a byte the kernels fail to write shows up against the reference.
TEST(QuantizeFast, ReusedOutputBuffersAreFullyWritten) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  QuantizeBufferReuse reuse;
  const int64_t rows = 1030, cols = 4128;  // ~4 M elements: every output of 8 MiB and more is pooled
  const Tensor x = make_tensor(DType::kF32, rows, cols, test_values(rows, cols, DType::kF32, kFp8StaticChannelSym, seed));
  for (int round = 0; round < 2; ++round) {
    for (const QuantKey& key : {kFp8StaticChannelSym, kFp8Static128BlockSym, kInt8StaticChannelSym, kMxfp8Static,
                                kMxfp6E2M3Static, kMxfp4Static, kNvfp4Static}) {
      SCOPED_TRACE(key_name(key));
      auto fast = quantize_fast(x, key);
      expect_same(fast, quantize(x, key));
      ASSERT_TRUE(fast);
      std::memset(fast->data.raw(), 0xA5, static_cast<size_t>(fast->data.nbytes()));
    }
  }
}

}  // namespace
}  // namespace qlinear
