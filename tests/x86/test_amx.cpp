// x86 AMX kernels (x86_amx_int8, x86_amx_bf16_*) against the reference on the same quantized layers, at M
// around the 16-row tile and 32-row block edges, K and N off the tile multiples; INT8 also bit for bit
// against the AVX-512 VNNI kernel (same codes, exact int32 sums, same epilogue). Skipped, with the reason,
// where the CPU or the OS gives no AMX.
#include <cstring>

#include "backends/x86/amx_isa.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "core/threads.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/registry.hpp"
#include "x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

constexpr int64_t kMs[] = {1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129};

// INT8 sums are exact; the epilogue rounds three times in f32.
constexpr double kInt8Rel = 0x1p-22;
// f32 accumulation of K exact BF16 products (tdpbf16ps), the scale and the bias.
double f32_sum_rel(int64_t k) { return static_cast<double>(k + 16) * 0x1p-24; }

// 129 rows x K = 4160 (2 bytes each) pass 1 MiB in every thread's share: the BF16 kernels' K-outer path.
const Case kKOuter{129, 200, 4160, DType::kBF16, DType::kBF16, true};

const Scheme kInt8DynAsym{"int8-dyn-asym", Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8DynamicTokenAsym, ""};
const Scheme kFp8Tensor{"fp8-w8a16-tensor", Family::kFp8WeightOnly, kFp8StaticTensorSym, std::nullopt, ""};

// Every M of kMs with N and K cycling through tile multiples and off them, outputs and bias varied.
std::vector<Case> sweep(const int64_t* ns, const int64_t* ks, int count) {
  std::vector<Case> cases;
  const DType outs[] = {DType::kBF16, DType::kF16, DType::kF32};
  int i = 0;
  for (int64_t m : kMs) {
    cases.push_back({m, ns[i % count], ks[(i + 1) % count], DType::kBF16, outs[i % 3], i % 2 == 0});
    ++i;
  }
  return cases;
}

std::vector<Case> int8_sweep() {
  static const int64_t ns[] = {67, 80, 33, 129};    // one panel short, whole blocks, a lone panel, a tail
  static const int64_t ks[] = {61, 256, 130, 200};  // below, at and off multiples of 64 (the tile's K)
  std::vector<Case> cases = sweep(ns, ks, 4);
  cases[1].in = DType::kF32;
  cases[4].in = DType::kF16;
  return cases;
}

std::vector<Case> bf16_sweep(bool mx) {
  static const int64_t ns[] = {67, 96, 33, 129};
  static const int64_t ks_mx[] = {96, 256, 544, 32};  // MX: multiples of 32 only
  static const int64_t ks[] = {161, 256, 300, 40};
  return sweep(ns, mx ? ks_mx : ks, 4);
}

// The two kernels' outputs on copies of one processed layer and one activation are identical bytes.
void expect_bitwise_equal(const LinearKernel& a, const LinearKernel& b, const Scheme& scheme, const Case& c,
                          uint64_t seed) {
  SCOPED_TRACE(std::string(a.name()) + " vs " + std::string(b.name()) + " " + x86_test::describe(c));
  LinearLayer la = x86_test::make_layer(scheme, c, seed);
  LinearLayer lb = la;
  ASSERT_TRUE(a.process_weights_after_loading(la));
  ASSERT_TRUE(b.process_weights_after_loading(lb));
  const Tensor x = random_normal(c.in, {c.m, c.k}, seed + 1, 1.0);
  const Tensor bias = random_normal(DType::kF32, {c.n}, seed + 2, 0.5);
  Tensor ya = x86_test::poisoned(c.out, c.m, c.n), yb = x86_test::poisoned(c.out, c.m, c.n);
  ASSERT_TRUE(a.apply(la, Activation::dense(x), c.bias ? &bias : nullptr, ya));
  ASSERT_TRUE(b.apply(lb, Activation::dense(x), c.bias ? &bias : nullptr, yb));
  EXPECT_EQ(std::memcmp(ya.raw(), yb.raw(), static_cast<size_t>(ya.nbytes())), 0);
}

TEST(X86Amx, Int8MatchesReferenceAndVnniBitForBit) {
  const LinearKernel& k = x86::kAmxInt8;
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 7000;
  for (const Scheme* s : {find_scheme("w8a8-int8-dynamic"), find_scheme("w8a8-int8-static"),
                          find_scheme("w8a8-int8-static-asym"), &kInt8DynAsym}) {
    for (const Case& c : int8_sweep()) {
      x86_test::expect_matches_reference(k, *s, c, seed += 7, kInt8Rel);
      expect_bitwise_equal(k, x86::kAvx512VnniInt8, *s, c, seed += 7);
    }
  }
  // Activation rows over 1 MiB per thread: the K-outer path (chunks of 2048 and a tail).
  expect_bitwise_equal(k, x86::kAvx512VnniInt8, *find_scheme("w8a8-int8-dynamic"), {129, 200, 8300}, 70);
  x86_test::expect_matches_reference(k, kInt8DynAsym, {129, 200, 8300}, 69, kInt8Rel);
  // Many rows, few columns: the threads split rows.
  x86_test::expect_matches_reference(k, *find_scheme("w8a8-int8-dynamic"), {300, 40, 1000}, 71, kInt8Rel);
  expect_bitwise_equal(k, x86::kAvx512VnniInt8, *find_scheme("w8a8-int8-dynamic"), {300, 40, 1000}, 72);
}

// Up to 16 rows the INT8 kernel takes two 32-column blocks at once (4 panels, accumulate4 in amx_int8_gemm.cpp)
// and runs each block's epilogue between the next block's k steps: M around the row tile, N with a partial
// 4-panel block (50), 4 + 2 + 1 panels (112), several 4-panel blocks and a lone panel (200), K below, off and
// on the 64-wide k step (under 4 steps: the next-block prefetch starts late); against the reference and bit for
// bit against the VNNI kernel; on two threads, whose column items may split a 4-panel pair.
TEST(X86Amx, Int8FourPanelBlocksUpToSixteenRows) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAmxInt8);
  const Scheme& s = *find_scheme("w8a8-int8-dynamic");
  const int64_t ks[] = {61, 130, 1024};
  uint64_t seed = 7800;
  int i = 0;
  for (const int64_t m : {1, 2, 8, 15, 16, 17, 31, 32, 33}) {
    for (const int64_t n : {50, 112, 200}) {
      const Case c{m, n, ks[i % 3], DType::kBF16, i % 2 == 0 ? DType::kF32 : DType::kBF16, n != 50};
      ++i;
      x86_test::expect_matches_reference(x86::kAmxInt8, s, c, seed += 7, kInt8Rel);
      expect_bitwise_equal(x86::kAmxInt8, x86::kAvx512VnniInt8, s, c, seed += 7);
    }
  }
  threads::set_min_ns_per_thread_for_testing(1.0);
  for (const Case& c : {Case{16, 464, 512}, Case{12, 4200, 130, DType::kBF16, DType::kF32, true}}) {
    x86_test::expect_matches_reference(x86::kAmxInt8, s, c, seed += 7, kInt8Rel);
    expect_bitwise_equal(x86::kAmxInt8, x86::kAvx512VnniInt8, s, c, seed += 7);
    x86_test::expect_thread_safe(x86::kAmxInt8, s, c, seed += 7);
  }
  threads::set_min_ns_per_thread_for_testing(0.0);
}

// Long panels at M around the row tile: K = 4100 (65 k steps of 64, the last one mostly padding; 64 KiB+ panels,
// so the line prefetch runs across pages and on into the next 4-panel group's panels), N = 213 (three 4-panel
// groups, a lone panel, 5 columns of it real); fresh random data per M. A k step dropped or taken twice, or an
// activation tile read from the wrong place, changes the sums.
TEST(X86Amx, Int8LongPanelsAroundTheRowTile) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAmxInt8);
  const Scheme& s = *find_scheme("w8a8-int8-dynamic");
  uint64_t seed = 7900;
  for (const int64_t m : {15, 16, 17}) {
    const Case c{m, 213, 4100, DType::kBF16, DType::kF32, m != 16};
    x86_test::expect_matches_reference(x86::kAmxInt8, s, c, seed += 7, kInt8Rel);
    expect_bitwise_equal(x86::kAmxInt8, x86::kAvx512VnniInt8, s, c, seed += 7);
  }
}

// Pre-quantized activations go into the same tile order as the ones the kernel quantizes: M below, at and past
// the 16-row tile, K off the 64-wide tile.
TEST(X86Amx, Int8PreQuantizedActivationsMatchDense) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAmxInt8);
  for (const char* name : {"w8a8-int8-dynamic", "w8a8-int8-static-asym"}) {
    for (const int64_t m : {9, 16, 17, 33}) {
      x86_test::expect_prequantized_matches_dense(x86::kAmxInt8, *find_scheme(name), {m, 40, 130}, 80 + m);
    }
  }
}

TEST(X86Amx, Int8ThreadsAndRoundTrip) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAmxInt8);
  x86_test::expect_thread_safe(x86::kAmxInt8, *find_scheme("w8a8-int8-dynamic"), {33, 130, 320}, 73);
  x86_test::expect_round_trip(x86::kAmxInt8, *find_scheme("w8a8-int8-static"), {1, 35, 130}, 74);
}

// Enough column blocks for the INT8 kernel's claimed items (runs of >= 4 blocks, up to 8 per thread; up to 16 rows
// items that shrink towards the end, here also 4 blocks at least at K = 4100, and an odd panel count), on 4
// threads forced for these small layers: the same bits as the VNNI kernel and one AMX thread.
TEST(X86Amx, Int8ColumnItemsOnManyThreads) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAmxInt8);
  const Scheme& s = *find_scheme("w8a8-int8-dynamic");
  for (const Case& c : {Case{16, 4200, 130}, Case{33, 1100, 256, DType::kBF16, DType::kF32, true}, Case{9, 700, 64},
                        Case{15, 1200, 4100, DType::kBF16, DType::kBF16, true}}) {
    LinearLayer layer = x86_test::make_layer(s, c, 91);
    ASSERT_TRUE(x86::kAmxInt8.process_weights_after_loading(layer));
    const Tensor x = random_normal(c.in, {c.m, c.k}, 92, 1.0);
    set_cpu_threads(1);
    auto one = x86::kAmxInt8.apply(layer, Activation::dense(x));
    set_cpu_threads(4);
    threads::set_min_ns_per_thread_for_testing(1.0);
    auto many = x86::kAmxInt8.apply(layer, Activation::dense(x));
    threads::set_min_ns_per_thread_for_testing(0);
    set_cpu_threads(0);
    ASSERT_TRUE(one && many);
    EXPECT_EQ(std::memcmp(one->raw(), many->raw(), static_cast<size_t>(one->nbytes())), 0) << x86_test::describe(c);
    x86_test::expect_matches_reference(x86::kAmxInt8, s, c, 93, kInt8Rel);
    set_cpu_threads(4);
    threads::set_min_ns_per_thread_for_testing(1.0);
    expect_bitwise_equal(x86::kAmxInt8, x86::kAvx512VnniInt8, s, c, 94);
    threads::set_min_ns_per_thread_for_testing(0);
    set_cpu_threads(0);
  }
}

TEST(X86Amx, Fp8WeightOnlyMatchesReference) {
  const LinearKernel& k = x86::kAmxBf16Fp8W8A16;
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 7100;
  for (const Scheme* s : {find_scheme("w8a16-fp8"), &kFp8Tensor}) {
    for (const Case& c : bf16_sweep(false)) x86_test::expect_matches_reference(k, *s, c, seed += 7, f32_sum_rel(c.k));
  }
  x86_test::expect_matches_reference(k, kFp8Tensor, {40, 48, 64, DType::kBF16, DType::kBF16, true, {16, 16, 16}}, 75,
                                     f32_sum_rel(64));
  x86_test::expect_matches_reference(k, *find_scheme("w8a16-fp8"), {300, 40, 1000}, 76, f32_sum_rel(1000));
  // Activation rows over 1 MiB per thread: the K-outer path (chunks of 1024 and a tail of 64).
  x86_test::expect_matches_reference(k, *find_scheme("w8a16-fp8"), kKOuter, 86, f32_sum_rel(kKOuter.k));
}

TEST(X86Amx, Mxfp8AndMxfp4WeightOnlyMatchReference) {
  uint64_t seed = 7200;
  for (const auto& [kernel, scheme] : {std::pair{&x86::kAmxBf16Mxfp8W8A16, "w8a16-mxfp8"},
                                       std::pair{&x86::kAmxBf16Mxfp4W4A16, "w4a16-mxfp4"}}) {
    const Verdict v = kernel->is_supported(Platform::host_cpu());
    if (!v) GTEST_SKIP() << kernel->name() << " does not run on this CPU: " << v.reason;
    for (const Case& c : bf16_sweep(true)) {
      x86_test::expect_matches_reference(*kernel, *find_scheme(scheme), c, seed += 7, f32_sum_rel(c.k));
    }
    x86_test::expect_matches_reference(*kernel, *find_scheme(scheme), {300, 40, 1024}, seed += 7, f32_sum_rel(1024));
    x86_test::expect_matches_reference(*kernel, *find_scheme(scheme), kKOuter, seed += 7, f32_sum_rel(kKOuter.k));
  }
}

TEST(X86Amx, Fp8W8A8MatchesReference) {
  const LinearKernel& k = x86::kAmxBf16Fp8ScaledMM;
  QL_SKIP_UNLESS_SUPPORTED(k);
  // Per-channel weights with dynamic per-token activations, per-tensor with static, per-tensor dynamic.
  const Scheme dyn_tensor{"fp8-dyn-tensor", Family::kFp8ScaledMM, kFp8StaticChannelSym, kFp8DynamicTensorSym, ""};
  uint64_t seed = 7300;
  for (const Scheme* s : {find_scheme("w8a8-fp8-channel"), find_scheme("w8a8-fp8-tensor"), &dyn_tensor}) {
    std::vector<Case> cases = bf16_sweep(false);
    cases[3].in = DType::kF32;  // quantized first: the AMX path sees E4M3 values whatever the input dtype
    for (const Case& c : cases) x86_test::expect_matches_reference(k, *s, c, seed += 7, f32_sum_rel(c.k));
  }
  x86_test::expect_matches_reference(k, *find_scheme("w8a8-fp8-tensor"),
                                     {40, 48, 64, DType::kBF16, DType::kBF16, true, {16, 16, 16}}, 83, f32_sum_rel(64));
  x86_test::expect_matches_reference(k, *find_scheme("w8a8-fp8-channel"), kKOuter, 87, f32_sum_rel(kKOuter.k));
  x86_test::expect_thread_safe(k, *find_scheme("w8a8-fp8-channel"), {65, 70, 300}, 84);
  x86_test::expect_round_trip(k, *find_scheme("w8a8-fp8-channel"), {1, 35, 160}, 85);
}

TEST(X86Amx, Mxfp8W8A8AndA16MatchReference) {
  const LinearKernel& k = x86::kAmxBf16Mxfp8;
  QL_SKIP_UNLESS_SUPPORTED(k);
  uint64_t seed = 7400;
  for (const char* s : {"w8a8-mxfp8", "w8a16-mxfp8"}) {
    for (const Case& c : bf16_sweep(true)) x86_test::expect_matches_reference(k, *find_scheme(s), c, seed += 7, f32_sum_rel(c.k));
    x86_test::expect_matches_reference(k, *find_scheme(s), kKOuter, seed += 7, f32_sum_rel(kKOuter.k));
  }
  x86_test::expect_thread_safe(k, *find_scheme("w8a8-mxfp8"), {65, 70, 320}, 88);
  // f32 activations of a weight-only layer are not BF16 values: refused, the AVX2 kernel takes them.
  LinearLayer f32_in = x86_test::make_layer(*find_scheme("w8a16-mxfp8"), {16, 32, 64, DType::kF32, DType::kF32}, 89);
  EXPECT_FALSE(k.can_implement(f32_in.config));
}

// Up to 16 rows the tile path takes two 32-column blocks at once (4 panels, amx_w8a16_gemm.cpp): N with a
// partial 4-panel block (50), 4 + 2 + 1 panels (112), several 4-panel blocks and a lone panel (200), K off the
// tile step where the format allows; and on two threads, whose column items may split a 4-panel pair.
TEST(X86Amx, FourPanelBlocksUpToSixteenRows) {
  const std::pair<const LinearKernel*, const char*> kernels[] = {
      {&x86::kAmxBf16Fp8W8A16, "w8a16-fp8"}, {&x86::kAmxBf16Mxfp8W8A16, "w8a16-mxfp8"},
      {&x86::kAmxBf16Mxfp4W4A16, "w4a16-mxfp4"}, {&x86::kAmxBf16Fp8ScaledMM, "w8a8-fp8-channel"}};
  uint64_t seed = 7700;
  for (const auto& [kernel, scheme] : kernels) {
    const Verdict v = kernel->is_supported(Platform::host_cpu());
    if (!v) GTEST_SKIP() << kernel->name() << " does not run on this CPU: " << v.reason;
    const bool mx = std::string_view(scheme).find("mx") != std::string_view::npos;
    const int64_t ks[] = {mx ? 96 : 161, 1024};
    for (const int64_t m : {2, 15, 16}) {
      for (const int64_t n : {50, 112, 200}) {
        const Case c{m, n, ks[(m + n) % 2], DType::kBF16, n == 112 ? DType::kF32 : DType::kBF16, n != 50};
        x86_test::expect_matches_reference(*kernel, *find_scheme(scheme), c, seed += 7, f32_sum_rel(c.k));
      }
    }
    threads::set_min_ns_per_thread_for_testing(1.0);
    x86_test::expect_matches_reference(*kernel, *find_scheme(scheme), {16, 208, 512}, seed += 7, f32_sum_rel(512));
    x86_test::expect_thread_safe(*kernel, *find_scheme(scheme), {16, 208, 512}, seed += 7);
    threads::set_min_ns_per_thread_for_testing(0.0);
  }
}

TEST(X86Amx, WeightOnlyThreadsAndRoundTrip) {
  QL_SKIP_UNLESS_SUPPORTED(x86::kAmxBf16Mxfp4W4A16);
  x86_test::expect_thread_safe(x86::kAmxBf16Mxfp4W4A16, *find_scheme("w4a16-mxfp4"), {33, 130, 320}, 77);
  x86_test::expect_thread_safe(x86::kAmxBf16Fp8W8A16, *find_scheme("w8a16-fp8"), {65, 70, 300}, 78);
  x86_test::expect_round_trip(x86::kAmxBf16Mxfp8W8A16, *find_scheme("w8a16-mxfp8"), {1, 35, 160}, 79);
}

// Below the tile range (M = 1) the AMX-BF16 kernels stream their weights (amx_bf16_stream.cpp; NVFP4 runs the
// AVX2 code there, test_amx_fp.cpp): each weight layout and MX scale, N off the 16-column panels and the 4-panel groups, K off the tile step, against the
// reference; the weight-only FP8 / MXFP8 / MXFP4 rows also bit for bit against the AVX-512 BF16 kernel (same
// decoded words, same order of vdpbf16ps).
TEST(X86Amx, StreamBelowTheTileRangeMatchesReference) {
  const std::pair<const LinearKernel*, const Scheme*> cases[] = {
      {&x86::kAmxBf16Fp8W8A16, find_scheme("w8a16-fp8")},
      {&x86::kAmxBf16Fp8W8A16, &kFp8Tensor},
      {&x86::kAmxBf16Mxfp8W8A16, find_scheme("w8a16-mxfp8")},
      {&x86::kAmxBf16Mxfp4W4A16, find_scheme("w4a16-mxfp4")},
      {&x86::kAmxBf16Fp8ScaledMM, find_scheme("w8a8-fp8-channel")},
      {&x86::kAmxBf16Fp8ScaledMM, find_scheme("w8a8-fp8-tensor")},
      {&x86::kAmxBf16Mxfp8, find_scheme("w8a8-mxfp8")},
      {&x86::kAmxBf16Mxfp6, find_scheme("w6a16-mxfp6-e2m3")},
      {&x86::kAmxBf16Mxfp6, find_scheme("w6a6-mxfp6-e3m2")},
      {&x86::kAmxBf16Mxfp4, find_scheme("w4a4-mxfp4")},
      {&x86::kAmxBf16Nvfp4, find_scheme("w4a4-nvfp4")},
  };
  const int64_t shapes[][2] = {{67, 96}, {33, 544}, {129, 32}, {200, 1056}, {16, 160}};
  uint64_t seed = 7500;
  for (const auto& [kernel, scheme] : cases) {
    ASSERT_NE(scheme, nullptr);
    const Verdict v = kernel->is_supported(Platform::host_cpu());
    if (!v) GTEST_SKIP() << kernel->name() << " does not run on this CPU: " << v.reason;
    int i = 0;
    for (const auto& [n, k] : shapes) {
      const Case c{1, n, k, DType::kBF16, i % 2 ? DType::kF32 : DType::kBF16, i % 2 == 0};
      ++i;
      const int64_t tiles = x86::amx_bf16_gemms_on_this_thread(), streams = x86::amx_bf16_streams_on_this_thread();
      x86_test::expect_matches_reference(*kernel, *scheme, c, seed += 7, f32_sum_rel(c.k));
      EXPECT_EQ(x86::amx_bf16_streams_on_this_thread() - streams, 1) << kernel->name() << " " << scheme->name;
      EXPECT_EQ(x86::amx_bf16_gemms_on_this_thread() - tiles, 0) << kernel->name() << " " << scheme->name;
    }
  }
  // Per-column scales: the AVX-512 kernel's summation order (MX streams sum per 32-k block, so only the
  // reference tolerance above holds for them).
  expect_bitwise_equal(x86::kAmxBf16Fp8W8A16, x86::kAvx512Bf16Fp8W8A16, *find_scheme("w8a16-fp8"), {1, 200, 1056}, 7590);
}

TEST(X86Amx, RefusesFloatActivationsAndBlockScales) {
  LinearLayer f32_in = x86_test::make_layer(*find_scheme("w8a16-fp8"), {16, 32, 64, DType::kF32, DType::kF32}, 80);
  const Verdict v = x86::kAmxBf16Fp8W8A16.can_implement(f32_in.config);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("bf16"), std::string::npos) << v.reason;
  const Scheme block{"fp8-w8a16-block", Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt, ""};
  LinearLayer blocked = x86_test::make_layer(block, {16, 256, 256}, 81);
  EXPECT_FALSE(x86::kAmxBf16Fp8W8A16.can_implement(blocked.config));
}

TEST(X86Amx, VerdictNamesWhatIsMissing) {
  CpuFeatures f = detect_cpu_features();
  f.amx_tile = f.amx_int8 = f.amx_bf16 = false;
  const Platform no_amx = Platform::synthetic_cpu(f);
  if (f.avx512vnni) {
    const Verdict v = x86::kAmxInt8.is_supported(no_amx);
    EXPECT_FALSE(v);
    EXPECT_NE(v.reason.find("AMX"), std::string::npos) << v.reason;
  }
  // Where AMX runs, the priority list picks the AMX kernels for their families.
  if (x86::kAmxInt8.is_supported(Platform::host_cpu())) {
    LinearLayer l = x86_test::make_layer(*find_scheme("w8a8-int8-dynamic"), {16, 64, 64}, 82);
    auto chosen = select_kernel(l.config, Platform::host_cpu());
    ASSERT_TRUE(chosen) << chosen.message();
    EXPECT_EQ((*chosen)->name(), "x86_amx_int8");
  }
}

}  // namespace
}  // namespace qlinear
