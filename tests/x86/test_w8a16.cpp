// x86 FP8 / MXFP8 weight-only kernels (BF16 activations, vdpbf16ps, f32 accumulation) against the
// reference on the same quantized layers.
#include <cstring>

#include "backends/x86/x86_kernels.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

// f32 accumulation of K exact products (vdpbf16ps), one more rounding per K chunk, scale and bias.
double f32_sum_rel(int64_t k) { return static_cast<double>(k + 16) * 0x1p-24; }

// K at and off multiples of 32 (MX block: multiples only) and 128 (FP8 blocks: more than one block, since
// the reference cannot dequantize a single-block [1, 1] 128x128 scale yet).
std::vector<Case> sweep(bool mx) {
  std::vector<Case> cases;
  const int64_t ms[] = {1, 2, 3, 7, 16, 17, 64, 257};
  const DType outs[] = {DType::kBF16, DType::kF16, DType::kF32};
  int i = 0;
  for (int64_t m : ms) {
    const int64_t n = (i % 2) ? 67 : 96;
    const int64_t k = mx ? ((i % 3 == 0) ? 256 : (i % 3 == 1) ? 96 : 544) : ((i % 3 == 0) ? 256 : (i % 3 == 1) ? 300 : 161);
    cases.push_back({m, n, k, DType::kBF16, outs[i % 3], i % 2 == 0});
    ++i;
  }
  cases.push_back({5, 300, 128, DType::kBF16, DType::kF32, true});  // several column blocks and a tail
  return cases;
}

const Scheme kFp8Tensor{"fp8-w8a16-tensor", Family::kFp8WeightOnly, kFp8StaticTensorSym, std::nullopt, ""};
const Scheme kFp8Block{"fp8-w8a16-block", Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt, ""};

TEST(X86W8A16, Fp8WeightOnlyMatchesReference) {
  const LinearKernel& k = x86::kAvx512Bf16Fp8W8A16;
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 3000;
  for (const Scheme* s : {find_scheme("w8a16-fp8"), &kFp8Tensor, &kFp8Block}) {
    for (const Case& c : sweep(false)) x86_test::expect_matches_reference(k, *s, c, seed += 7, f32_sum_rel(c.k));
  }
  x86_test::expect_matches_reference(k, *find_scheme("w8a16-fp8"), {4, 33, 61, DType::kBF16, DType::kBF16, true}, 4,
                                     f32_sum_rel(61));
  x86_test::expect_matches_reference(k, kFp8Tensor, {7, 48, 64, DType::kBF16, DType::kBF16, true, {16, 16, 16}}, 5,
                                     f32_sum_rel(64));
  x86_test::expect_matches_reference(k, kFp8Block, {3, 300, 1000, DType::kBF16, DType::kF32, true}, 6,
                                     f32_sum_rel(1000));
  // M = 1 over two items of the weight stream (amx_bf16_stream.cpp: 32 panels, the last group 3), K past its
  // 2 KiB prefetch distance and off the 128-wide blocks (prefetches cannot change a result; the item and group
  // split can).
  for (const Scheme* s : {find_scheme("w8a16-fp8"), &kFp8Block}) {
    x86_test::expect_matches_reference(k, *s, {1, 1000, 4128, DType::kBF16, DType::kBF16, true}, 7, f32_sum_rel(4128));
  }
}

TEST(X86W8A16, Mxfp8WeightOnlyMatchesReference) {
  const LinearKernel& k = x86::kAvx512Bf16Mxfp8W8A16;
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 4000;
  for (const Case& c : sweep(true)) {
    x86_test::expect_matches_reference(k, *find_scheme("w8a16-mxfp8"), c, seed += 7, f32_sum_rel(c.k));
  }
  // M = 1 over two items of the weight stream, K past its prefetch distance (as in the FP8 test above).
  x86_test::expect_matches_reference(k, *find_scheme("w8a16-mxfp8"), {1, 1000, 4128}, seed += 7, f32_sum_rel(4128));
}

TEST(X86W8A16, Mxfp4WeightOnlyMatchesReference) {
  const LinearKernel& k = x86::kAvx512Bf16Mxfp4W4A16;
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 5000;
  for (const Case& c : sweep(true)) {
    x86_test::expect_matches_reference(k, *find_scheme("w4a16-mxfp4"), c, seed += 7, f32_sum_rel(c.k));
  }
  // M = 1 over two items of the weight stream, K past its prefetch distance (as in the FP8 test above).
  x86_test::expect_matches_reference(k, *find_scheme("w4a16-mxfp4"), {1, 1000, 4128}, seed += 7, f32_sum_rel(4128));
}

TEST(X86W8A16, MxScalesOutOfBf16RangeTakeTheExactPath) {
  const LinearKernel& k = x86::kAvx512Bf16Mxfp8W8A16;
  QL_SKIP_UNLESS_SUPPORTED(k);
  const Case c{5, 40, 96, DType::kBF16, DType::kF32, true};
  // 2^-125 and 2^120: folded into BF16 they would leave its normal range (row 1 then overflows f32: inf).
  auto r = x86_test::run_with_edited_scales(k, *find_scheme("w8a16-mxfp8"), c, 9, [](uint8_t* e, int64_t) {
    e[0] = 2;
    e[5] = 247;
  });
  ASSERT_TRUE(r);
  const Tensor* got = &r->got;
  const Tensor* want = &r->want;
  for (int64_t i = 0; i < c.m * c.n; ++i) {
    const double g = element_as_double(*got, i), r = element_as_double(*want, i);
    if (g == r) continue;  // includes the rows whose 2^120-scaled weights overflow f32 in both
    EXPECT_LE(std::fabs(g - r), x86_test::ulp_of(DType::kF32, r)) << i;  // FP64 sum, one rounding
  }
}

TEST(X86W8A16, ManyThreadsGiveBitIdenticalResults) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAvx512Bf16Fp8W8A16);
  x86_test::expect_thread_safe(x86::kAvx512Bf16Fp8W8A16, kFp8Block, {33, 200, 300}, 11);
  x86_test::expect_thread_safe(x86::kAvx512Bf16Mxfp8W8A16, *find_scheme("w8a16-mxfp8"), {20, 130, 320}, 12);
  x86_test::expect_thread_safe(x86::kAvx512Bf16Mxfp4W4A16, *find_scheme("w4a16-mxfp4"), {3, 130, 320}, 15);
}

TEST(X86W8A16, RowMajorWeightRoundTrips) {  // prepacking is baseline code: runs on any CPU
  x86_test::expect_round_trip(x86::kAvx512Bf16Fp8W8A16, *find_scheme("w8a16-fp8"), {1, 67, 61}, 13);
  x86_test::expect_round_trip(x86::kAvx512Bf16Mxfp8W8A16, *find_scheme("w8a16-mxfp8"), {1, 33, 96}, 14);
  x86_test::expect_round_trip(x86::kAvx512Bf16Mxfp4W4A16, *find_scheme("w4a16-mxfp4"), {1, 35, 160}, 16);
  x86_test::expect_round_trip(x86::kAvx512Bf16Fp8W8A16, *find_scheme("w8a16-fp8"), {1, 300, 300}, 17);
}

TEST(X86W8A16, RejectsWhatItCannotDo) {
  const LinearKernel& k = x86::kAvx512Bf16Fp8W8A16;
  LinearConfig c = make_config(*find_scheme("w8a16-fp8"), 64, 64, DType::kF32);
  Verdict v = k.can_implement(c);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("not bf16"), std::string::npos) << v.reason;
  c = make_config(*find_scheme("w8a8-mxfp8"), 64, 64);
  v = x86::kAvx512Bf16Mxfp8W8A16.can_implement(c);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("weight-only"), std::string::npos) << v.reason;
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = true;
  v = k.is_supported(Platform::synthetic_cpu(f));
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("BF16"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace qlinear
