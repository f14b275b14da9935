// Fused FP8 128x128 layers whose shards end in partial blocks (SmolLM2-135M's q/k/v: 576 | 192 | 192 rows),
// each shard keeping its own block grid (ScaleRowGrid): every x86 kernel that runs them against the reference
// on the same quantized layer (fresh weights, poisoned outputs, M = 1, 2, 3, 7, 17, 257), their processed
// weights through export / import, and the reasons of the kernels that decline a shard layout.
#include <cstring>
#include <random>

#include "backends/x86/x86_kernels.hpp"
#include "x86/x86_test_util.hpp"

namespace qlinear {
namespace {

using x86_test::Case;

double f32_sum_rel(int64_t k) { return static_cast<double>(k + 16) * 0x1p-24; }

const Scheme kFp8WoBlock{"fp8-w8a16-block", Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt, ""};

// q/k/v of SmolLM2-135M (K 576: four whole K blocks and a half one), a small layer with the same pattern, and
// shards of 16-row multiples that straddle the 128-row blocks in every way (first, middle, last partial).
std::vector<Case> cases(DType in, DType out) {
  std::vector<Case> c;
  for (int64_t m : {1, 2, 3, 7, 17, 257}) c.push_back({m, 208, 320, in, out, m % 2 == 1, {144, 32, 32}});
  for (int64_t m : {1, 7, 17}) c.push_back({m, 960, 576, in, out, m == 7, {576, 192, 192}});
  c.push_back({5, 400, 256, in, out, true, {48, 272, 80}});
  return c;
}

TEST(PartialBlocks, BlockScaledKernelsMatchTheReference) {
  uint64_t seed = 300 + std::random_device{}() % 1000;
  for (const LinearKernel* k : {static_cast<const LinearKernel*>(&x86::kAvx2Fp8BlockScaled),
                                static_cast<const LinearKernel*>(&x86::kAvx512Bf16Fp8BlockScaled)}) {
    if (!k->is_supported(Platform::host_cpu())) continue;
    for (const Case& c : cases(DType::kBF16, DType::kBF16)) {
      x86_test::expect_matches_reference(*k, *find_scheme("w8a8-fp8-block"), c, seed += 7, f32_sum_rel(c.k));
    }
    x86_test::expect_matches_reference(*k, *find_scheme("w8a8-fp8-block"),
                                       {3, 208, 320, DType::kF32, DType::kF32, true, {144, 32, 32}}, seed += 7,
                                       f32_sum_rel(320));
  }
}

TEST(PartialBlocks, WeightOnlyKernelsMatchTheReference) {
  uint64_t seed = 900 + std::random_device{}() % 1000;
  for (const LinearKernel* k : {static_cast<const LinearKernel*>(&x86::kAvx2Fp8WeightOnly),
                                static_cast<const LinearKernel*>(&x86::kAvx512Bf16Fp8W8A16)}) {
    if (!k->is_supported(Platform::host_cpu())) continue;
    for (const Case& c : cases(DType::kBF16, DType::kF32)) {
      x86_test::expect_matches_reference(*k, kFp8WoBlock, c, seed += 7, f32_sum_rel(c.k));
    }
  }
}

// The panels' scale rows are processed state: exported and imported (the weight cache), the layer computes
// the same bits.
TEST(PartialBlocks, ProcessedWeightsRoundTrip) {
  for (const LinearKernel* k : {static_cast<const LinearKernel*>(&x86::kAvx2Fp8BlockScaled),
                                static_cast<const LinearKernel*>(&x86::kAvx512Bf16Fp8BlockScaled),
                                static_cast<const LinearKernel*>(&x86::kAvx512Bf16Fp8W8A16)}) {
    if (!k->is_supported(Platform::host_cpu())) continue;
    const Scheme& s = k->family() == Family::kFp8BlockScaled ? *find_scheme("w8a8-fp8-block") : kFp8WoBlock;
    SCOPED_TRACE(std::string(k->name()));
    const Case c{7, 208, 320, DType::kBF16, DType::kBF16, false, {144, 32, 32}};
    LinearLayer a = x86_test::make_layer(s, c, 41);
    LinearLayer b = a;
    ASSERT_TRUE(k->process_weights_after_loading(a));
    auto w = k->export_processed(a);
    ASSERT_TRUE(w) << w.message();
    const Status is = k->import_processed(b, *w);
    ASSERT_TRUE(is) << is.message();
    const Tensor x = random_normal(DType::kBF16, {c.m, c.k}, 42, 1.0);
    auto ya = k->apply(a, Activation::dense(x));
    auto yb = k->apply(b, Activation::dense(x));
    ASSERT_TRUE(ya && yb);
    EXPECT_EQ(std::memcmp(ya->raw(), yb->raw(), static_cast<size_t>(ya->nbytes())), 0);
  }
}

// A shard boundary off the 16-column panels would give one panel two shards' scales: declined with the row.
TEST(PartialBlocks, ShardBoundariesOffThePanelsAreDeclined) {
  LinearConfig c = make_config(*find_scheme("w8a8-fp8-block"), 272, 256, DType::kBF16, DType::kBF16);
  c.logical_widths = {200, 72};
  const Verdict v = x86::kAvx2Fp8BlockScaled.can_implement(c);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("boundary at output row 200 is not a multiple of 16"), std::string::npos) << v.reason;
  // Shards on 128-row blocks have one grid: any boundary is fine.
  c.logical_widths = {128, 144};
  EXPECT_TRUE(x86::kAvx2Fp8BlockScaled.can_implement(c));
}

}  // namespace
}  // namespace qlinear
