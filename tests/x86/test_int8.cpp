// x86 INT8 W8A8 kernels against the reference on the same quantized layers, their activation quantizer
// against the reference quantizer (bit for bit), threads, round trips and rejections.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/x86/int8_isa.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

// INT8 sums are exact; the epilogue rounds three times in f32 (acc -> f32, sx * sw, the FMA with bias).
constexpr double kInt8Rel = 0x1p-22;

const char* const kInt8Schemes[] = {"w8a8-int8-dynamic", "w8a8-int8-static", "w8a8-int8-static-asym"};

std::vector<Case> sweep() {
  std::vector<Case> cases;
  const int64_t ms[] = {1, 2, 3, 7, 16, 17, 64, 257};
  const DType outs[] = {DType::kBF16, DType::kF16, DType::kF32};
  const DType ins[] = {DType::kBF16, DType::kF32, DType::kF16};
  int i = 0;
  for (int64_t m : ms) {
    const int64_t n = (i % 2) ? 67 : 80;              // odd N and a multiple of 16
    const int64_t k = (i % 3 == 0) ? 256 : (i % 3 == 1) ? 130 : 61;  // K at and off multiples of 4
    cases.push_back({m, n, k, ins[i % 3], outs[i % 3], i % 2 == 0});
    ++i;
  }
  cases.push_back({5, 300, 96, DType::kBF16, DType::kF32, true});  // several column blocks and a tail
  return cases;
}

const LinearKernel* const kInt8Kernels[] = {&x86::kAvx512VnniInt8, &x86::kAvx2Int8};

class Int8Kernels : public ::testing::TestWithParam<const LinearKernel*> {};

TEST_P(Int8Kernels, MatchesReferenceAcrossSchemesAndShapes) {
  const LinearKernel& k = *GetParam();
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 1000;
  for (const char* s : kInt8Schemes) {
    for (const Case& c : sweep()) x86_test::expect_matches_reference(k, *find_scheme(s), c, seed += 7, kInt8Rel);
  }
}

TEST_P(Int8Kernels, DynamicAsymmetricAndPerTensorShardScales) {
  const LinearKernel& k = *GetParam();
  QL_SKIP_UNLESS_SUPPORTED(k);
  // The families' other keys: dynamic asymmetric activations and per-tensor (per-shard) weight scales.
  const Scheme dyn_asym{"int8-dyn-asym", Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8DynamicTokenAsym, ""};
  const Scheme tensor_w{"int8-tensor-w", Family::kInt8ScaledMM, kInt8StaticTensorSym, kInt8DynamicTokenSym, ""};
  const Scheme tensor_w_static{"int8-tensor-w-static", Family::kInt8ScaledMM, kInt8StaticTensorSym,
                               kInt8StaticTensorAsym, ""};
  uint64_t seed = 2000;
  for (const Case& c : sweep()) x86_test::expect_matches_reference(k, dyn_asym, c, seed += 7, kInt8Rel);
  x86_test::expect_matches_reference(k, tensor_w, {7, 48, 64, DType::kBF16, DType::kBF16, true, {16, 16, 16}}, 31,
                                     kInt8Rel);
  x86_test::expect_matches_reference(k, tensor_w_static, {17, 40, 100, DType::kF32, DType::kF32, false, {8, 32}},
                                     32, kInt8Rel);
  x86_test::expect_matches_reference(k, tensor_w, {3, 33, 64, DType::kBF16, DType::kF16, true, {}}, 33, kInt8Rel);
}

// Integer sums are exact, so a row's output cannot depend on the batch: the AVX2 kernel's tiled path (M >=
// kInt8TiledMinM: 6- and 4-row tiles, widened weights) and its small-M path give the same bits, also for
// codes at +-127 in both operands (where a saturating vpmaddubsw would lose the sum).
TEST_P(Int8Kernels, RowsDoNotDependOnTheBatchAtExtremeCodes) {
  const LinearKernel& k = *GetParam();
  QL_SKIP_UNLESS_SUPPORTED(k);
  const int64_t m = 23, n = 40, kd = 264;
  for (const char* s : kInt8Schemes) {
    SCOPED_TRACE(s);
    LinearLayer layer = x86_test::make_layer(*find_scheme(s), {m, n, kd}, 41);
    Tensor& w = layer.params.at("weight");
    for (int64_t i = 0; i < n * kd; i += 3) w.data<int8_t>()[i] = (i / 3) % 2 ? 127 : -127;  // extreme weights
    ASSERT_TRUE(k.process_weights_after_loading(layer));
    Tensor x = random_normal(DType::kF32, {m, kd}, 42, 1.0);
    for (int64_t r = 0; r < m; r += 2) {  // every other row: +-amax throughout, codes +-127
      for (int64_t i = 0; i < kd; ++i) x.data<float>()[r * kd + i] = (i % 2 ? 2.5f : -2.5f);
    }
    auto all = k.apply(layer, Activation::dense(x));
    ASSERT_TRUE(all) << all.message();
    const size_t row_bytes = static_cast<size_t>(all->nbytes() / m);
    for (int64_t r0 = 0; r0 + 2 <= m; r0 += 5) {
      auto some = k.apply(layer, Activation::dense(x.narrow(0, r0, 2).value().contiguous()));
      ASSERT_TRUE(some) << some.message();
      EXPECT_EQ(std::memcmp(some->raw(), static_cast<const char*>(all->raw()) + r0 * row_bytes, 2 * row_bytes), 0)
          << "rows " << r0 << ".." << r0 + 1;
    }
    x86_test::expect_matches_reference(k, *find_scheme(s), {m, n, kd, DType::kF32, DType::kF32, true}, 43, kInt8Rel);
  }
}

TEST_P(Int8Kernels, PreQuantizedActivationMatchesDense) {
  const LinearKernel& k = *GetParam();
  QL_SKIP_UNLESS_SUPPORTED(k);
  for (const char* s : kInt8Schemes) x86_test::expect_prequantized_matches_dense(k, *find_scheme(s), {9, 40, 72}, 5);
}

TEST_P(Int8Kernels, ManyThreadsGiveBitIdenticalResults) {
  const LinearKernel& k = *GetParam();
  QL_SKIP_UNLESS_SUPPORTED(k);
  x86_test::expect_thread_safe(k, *find_scheme("w8a8-int8-dynamic"), {33, 200, 300}, 77);
}

TEST_P(Int8Kernels, RowMajorWeightRoundTrips) {  // prepacking is baseline code: runs on any CPU
  const LinearKernel& k = *GetParam();
  x86_test::expect_round_trip(k, *find_scheme("w8a8-int8-dynamic"), {1, 67, 61}, 8);
  x86_test::expect_round_trip(k, *find_scheme("w8a8-int8-static"), {1, 32, 128}, 9);
}

TEST_P(Int8Kernels, RejectsWhatItCannotDo) {
  const LinearKernel& k = *GetParam();
  LinearConfig c = make_config(*find_scheme("w8a8-int8-dynamic"), 64, 70000);
  Verdict v = k.can_implement(c);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("K=70000 exceeds 65536"), std::string::npos) << v.reason;
  c = make_config(*find_scheme("w8a16-fp8"), 64, 64);
  EXPECT_FALSE(k.can_implement(c));
  CpuFeatures none;
  none.avx2 = none.fma = none.f16c = true;
  v = k.is_supported(Platform::synthetic_cpu(none));
  if (k.name() == "x86_avx2_int8") {
    EXPECT_TRUE(v) << v.reason;
  } else {
    EXPECT_FALSE(v);
    EXPECT_NE(v.reason.find("AVX-512"), std::string::npos) << v.reason;
  }
  EXPECT_FALSE(k.is_supported(Platform::synthetic_cuda(90)));
}

INSTANTIATE_TEST_SUITE_P(X86, Int8Kernels, ::testing::ValuesIn(kInt8Kernels),
                         [](const auto& info) { return std::string(info.param->name()); });

TEST(X86Int8, ActivationQuantizerIsBitIdenticalToTheReference) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx2Int8);  // the quantizer is AVX2 code
  struct KeyCase {
    QuantKey key;
    float scale;
    int32_t zp;
  };
  const KeyCase keys[] = {{kInt8DynamicTokenSym, 0, 0},
                          {kInt8DynamicTokenAsym, 0, 0},
                          {kInt8StaticTensorSym, 0.0173f, 0},
                          {kInt8StaticTensorAsym, 0.0213f, -7}};
  const int64_t m = 37, k = 203;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const KeyCase& kc : keys) {
      for (bool offset : {false, true}) {
        SCOPED_TRACE(key_name(kc.key) + " " + std::string(name(dt)) + (offset ? " offset128" : ""));
        Tensor x = random_normal(dt, {m, k}, 11, 1.5);
        // Plant exact half-integer quotients (x / s = j + 0.5) and their f32 neighbours in row 0 (f32 only,
        // static scale: the quotient is known), plus a constant row and an all-zero row.
        if (dt == DType::kF32) {
          float* p = x.data<float>();
          if (kc.key.scale.is_static) {
            for (int j = 0; j < 60; ++j) {
              const float v = static_cast<float>((j - 30 + 0.5) * kc.scale);
              p[3 * j] = v;
              p[3 * j + 1] = std::nextafter(v, 1e9f);
              p[3 * j + 2] = std::nextafter(v, -1e9f);
            }
          }
          for (int64_t c = 0; c < k; ++c) p[1 * k + c] = 0.75f;
          for (int64_t c = 0; c < k; ++c) p[2 * k + c] = 0.0f;
        }
        QuantizeOptions qo;
        if (kc.key.scale.is_static) qo.static_scale = Tensor::scalar_f32(kc.scale).reshape({1}).value();
        if (kc.key.scale.is_static && !kc.key.symmetric) {
          qo.static_zero_point = Tensor::empty(DType::kI32, {1});
          qo.static_zero_point.data<int32_t>()[0] = kc.zp;
        }
        auto ref = quantize(x, kc.key, qo);
        ASSERT_TRUE(ref) << ref.message();

        const int64_t k_pad = (k + 3) / 4 * 4;
        std::vector<uint8_t> codes(m * k_pad), bad(m, 0);
        std::vector<float> scale(m);
        std::vector<int32_t> zp(m);
        x86::Int8ActQuant q;
        q.x = x.raw();
        q.x_kind = static_cast<x86::FloatKind>(x86::float_kind_of(dt));
        q.m = m;
        q.k = k;
        q.ldx = k;
        q.dynamic = !kc.key.scale.is_static;
        q.symmetric = kc.key.symmetric;
        q.static_scale = kc.scale;
        q.static_zp = kc.zp;
        q.offset128 = offset;
        q.codes = codes.data();
        q.k_pad = k_pad;
        q.scale = scale.data();
        q.zp = zp.data();
        q.bad_row = bad.data();
        x86::int8_quantize_activations_avx2(q);
        int mismatches = 0;
        for (int64_t r = 0; r < m; ++r) {
          const double ref_scale = element_as_double(ref->scale, ref->scale.numel() == 1 ? 0 : r);
          EXPECT_EQ(scale[r], static_cast<float>(ref_scale)) << "row " << r;
          if (!kc.key.symmetric) {
            EXPECT_EQ(zp[r], ref->zero_point.data<int32_t>()[ref->zero_point.numel() == 1 ? 0 : r]) << "row " << r;
          }
          for (int64_t c = 0; c < k; ++c) {
            const int8_t want = ref->data.data<int8_t>()[r * k + c];
            const int8_t got = static_cast<int8_t>(codes[r * k_pad + c] ^ (offset ? 0x80 : 0));
            if (want != got && mismatches++ < 5) ADD_FAILURE() << "code (" << r << "," << c << ") " << int(got) << " vs " << int(want);
          }
        }
        EXPECT_EQ(mismatches, 0);
      }
    }
  }
}

// The quantizer's fields for m rows of x (f32 [m, k]) into codes (k_pad per row, or the AMX tile order).
x86::Int8ActQuant quantizer_for(const Tensor& x, int64_t k_pad, bool tiles, uint8_t* codes, float* scale, int32_t* zp,
                                uint8_t* bad) {
  x86::Int8ActQuant q;
  q.x = x.raw();
  q.x_kind = x86::FloatKind::kF32;
  q.m = x.shape()[0];
  q.k = x.shape()[1];
  q.ldx = q.k;
  q.symmetric = false;
  q.codes = codes;
  q.k_pad = k_pad;
  q.amx_tiles = tiles;
  q.scale = scale;
  q.zp = zp;
  q.bad_row = bad;
  return q;
}

// The tile order (Int8ActQuant::amx_tiles) holds the same codes as the row order, padding columns included, at
// (r / 16) * 16 * k_pad + (k / 64) * 1024 + (r % 16) * 64 + k % 64: two row blocks, K off the 32-wide vector step.
TEST(X86Int8, ActivationTileOrderHoldsTheRowOrderCodes) {
  const int64_t m = 19, k = 130, k_pad = 192;
  const Tensor x = random_normal(DType::kF32, {m, k}, 31, 2.0);
  std::vector<uint8_t> rows(m * k_pad), tiles(32 * k_pad, 0x55), bad(m, 0);
  std::vector<float> scale(m);
  std::vector<int32_t> zp(m);
  x86::int8_quantize_activations_avx2(quantizer_for(x, k_pad, false, rows.data(), scale.data(), zp.data(), bad.data()));
  x86::int8_quantize_activations_avx2(quantizer_for(x, k_pad, true, tiles.data(), scale.data(), zp.data(), bad.data()));
  int mismatches = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k_pad; ++c) {
      const uint8_t got = tiles[r / 16 * 16 * k_pad + c / 64 * 1024 + r % 16 * 64 + c % 64];
      if (got != rows[r * k_pad + c] && mismatches++ < 5) ADD_FAILURE() << "code (" << r << "," << c << ")";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The amax pass keeps several max chains: a row's largest |x|, NaN or Inf is seen at every position (the chains'
// lanes, the 8-wide remainder and the scalar tail of K = 77).
TEST(X86Int8, ActivationRangeSeenAtEveryPosition) {
  const int64_t k = 77, k_pad = 80;
  for (const bool symmetric : {true, false}) {
    for (int64_t c = 0; c < k; ++c) {
      Tensor x = random_normal(DType::kF32, {3, k}, 40 + c, 1.0);
      float* p = x.data<float>();
      p[c] = -50.0f;                                           // row 0: the largest |x|, and the row's minimum
      p[k + c] = std::numeric_limits<float>::quiet_NaN();      // row 1
      p[2 * k + c] = std::numeric_limits<float>::infinity();   // row 2
      std::vector<uint8_t> codes(3 * k_pad), bad(3, 0);
      std::vector<float> scale(3);
      std::vector<int32_t> zp(3);
      x86::Int8ActQuant q = quantizer_for(x, k_pad, false, codes.data(), scale.data(), zp.data(), bad.data());
      q.symmetric = symmetric;
      x86::int8_quantize_activations_avx2(q);
      EXPECT_EQ(bad[0], 0) << "position " << c;
      EXPECT_EQ(bad[1], 1) << "NaN at " << c;
      EXPECT_EQ(bad[2], 1) << "Inf at " << c;
      const uint8_t lowest = symmetric ? 1 : 0;  // code -127 (symmetric) or -128, stored + 128
      EXPECT_EQ(codes[c], static_cast<uint8_t>(lowest)) << "position " << c << (symmetric ? " symmetric" : "");
      if (symmetric) {
        EXPECT_EQ(scale[0], static_cast<float>(50.0 / 127.0)) << "position " << c;
      }
    }
  }
}

// Prepacked weights from kHugePageWeightBytes on sit in whole, aligned 2 MiB pages (the huge-page advice is the
// OS's to take); smaller ones in 64-byte aligned buffers. Every byte is writable, and a layer that large computes
// what the reference does.
TEST(X86Int8, LargeWeightsInHugePageBuffers) {
  for (const int64_t bytes : {int64_t{100}, x86::kHugePageWeightBytes - 1, x86::kHugePageWeightBytes + 12345}) {
    x86::AlignedBytes b = x86::weight_bytes(bytes);
    ASSERT_NE(b.get(), nullptr);
    const uintptr_t align = bytes >= x86::kHugePageWeightBytes ? uintptr_t{1} << 21 : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % align, 0u) << bytes << " bytes";
    std::memset(b.get(), 0x5A, static_cast<size_t>(bytes));
    EXPECT_EQ(b.get()[bytes - 1], 0x5A);
  }
  const LinearKernel& k = x86::kAmxInt8.is_supported(Platform::host_cpu()).ok ? x86::kAmxInt8 : x86::kAvx512VnniInt8;
  QL_SKIP_UNLESS_SUPPORTED(k);
  // N 2064 x K 2100: 4.3 MB of panels.
  x86_test::expect_matches_reference(k, *find_scheme("w8a8-int8-dynamic"), {16, 2064, 2100}, 61, kInt8Rel);
}

TEST(X86Int8, SelectedOnThisCpu) {
  const Scheme& s = *find_scheme("w8a8-int8-dynamic");
  auto k = select_kernel(make_config(s, 4096, 4096), Platform::host_cpu());
  ASSERT_TRUE(k) << k.message();
  const CpuFeatures f = Platform::host_cpu().cpu;
  const bool vnni = f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  const bool amx = x86::kAmxInt8.is_supported(Platform::host_cpu()).ok;  // AMX-INT8 and the OS's grant
  EXPECT_EQ((*k)->name(), amx    ? "x86_amx_int8"
                          : vnni ? "x86_avx512vnni_int8"
                                 : (f.avx2 ? "x86_avx2_int8" : "reference_int8_scaled_mm"));
}

}  // namespace
}  // namespace qlinear
