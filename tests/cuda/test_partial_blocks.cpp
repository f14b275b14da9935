// Fused FP8 128x128 layers whose shards end in partial blocks (SmolLM2-135M's q/k/v: 576 | 192 | 192 rows),
// each shard keeping its own block grid (ScaleRowGrid), on the GPU: every CUDA kernel that runs them (the
// streaming kernel through its per-row scale-row table, cuBLASLt one call per shard) against the reference on
// the same quantized layer, fresh random weights whose magnitude changes with every shard's block (a kernel
// reading another block's scale cannot pass), poisoned outputs, M = 1, 2, 3, 7, 17, 257; processed weights
// through export / import. The host-side parts (the staged scale layout, the declines) run without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/layer_state.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"
#endif

namespace qlinear {
namespace {

#if QLINEAR_WITH_CUDA

using cuda_test::fresh_seed;

const Scheme kBlock = *find_scheme("w8a8-fp8-block");
const Scheme kWoBlock{"fp8-w8a16-block", Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt, ""};

struct PartialCase {
  int64_t m, k;
  std::vector<int64_t> shards;
  bool bias;
};

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (const int64_t x : v) s += x;
  return s;
}

// Weights whose magnitude is 2^((shard * 3 + block row in the shard * 5 + K block * 2) % 7 - 3).
LinearLayer partial_layer(const Scheme& s, const PartialCase& pc, uint64_t seed) {
  const int64_t n = sum_of(pc.shards);
  Tensor w = random_normal(DType::kF32, {n, pc.k}, seed, 0.05);
  for (int64_t sh = 0, r0 = 0; sh < static_cast<int64_t>(pc.shards.size()); r0 += pc.shards[sh++]) {
    for (int64_t j = 0; j < pc.shards[sh]; ++j) {
      for (int64_t c = 0; c < pc.k; ++c) {
        const int e = static_cast<int>((sh * 3 + (j / 128) * 5 + (c / 128) * 2) % 7) - 3;
        w.data<float>()[(r0 + j) * pc.k + c] *= std::ldexp(1.0f, e);
      }
    }
  }
  MakeLayerOptions opt;
  opt.logical_widths = pc.shards;
  auto layer = quantize_layer("partial", s, w, opt);
  EXPECT_TRUE(layer) << layer.message();
  return layer ? *layer : LinearLayer{};
}

bool have_sm90() {
  auto p = Platform::cuda_device(0);
  return p && p->cuda->compute_capability == 90;
}

// kernel vs the reference: |got - ref| <= 1 ULP(out) + c * sum_k |x w|, c = 2 K 2^-24 (FP32 sums), or 2^-10
// where cuBLASLt's tensor cores sum (their promotion interval; tests/cuda/test_cuda.cpp).
void check(const LinearKernel& kernel, const Scheme& s, const PartialCase& pc) {
  const uint64_t seed = fresh_seed();
  const int64_t n = sum_of(pc.shards), m = pc.m, k = pc.k;
  SCOPED_TRACE(std::string(kernel.name()) + " " + std::string(s.name) + " M=" + std::to_string(m) +
               " N=" + std::to_string(n) + " K=" + std::to_string(k) + " seed=" + std::to_string(seed));
  LinearLayer ref_layer = partial_layer(s, pc, seed);
  LinearLayer layer = ref_layer;
  const LinearKernel& ref = *find_kernel("reference_" + std::string(family_name(s.family)));
  ASSERT_TRUE(ref.process_weights_after_loading(ref_layer));
  const Verdict v = kernel.can_implement(layer.config);
  ASSERT_TRUE(v) << v.reason;
  const Status ps = kernel.process_weights_after_loading(layer);
  ASSERT_TRUE(ps.is_ok()) << ps.message();
  const Tensor x = cuda_test::to_dtype(random_normal(DType::kF32, {m, k}, seed + 1, 1.0), DType::kBF16);
  const Tensor bias = cuda_test::to_dtype(random_normal(DType::kF32, {n}, seed + 2, 0.5), DType::kBF16);
  const Tensor* b = pc.bias ? &bias : nullptr;
  Tensor want = Tensor::empty(DType::kBF16, {m, n});
  ASSERT_TRUE(ref.apply(ref_layer, Activation::dense(x), b, want).is_ok());
  const Tensor xd = cuda::to_device(x).value();
  const Tensor bd = cuda::to_device(bias).value();
  Tensor od = cuda::empty(DType::kBF16, {m, n}).value();
  ASSERT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());  // NaN
  const std::string route(kernel.apply_route(layer, Activation::dense(xd)));
  const Status as = kernel.apply(layer, Activation::dense(xd), pc.bias ? &bd : nullptr, od);
  ASSERT_TRUE(as.is_ok()) << as.message();
  const Tensor got = cuda::to_host(od).value();
  const bool tensor_cores = route.find("cublaslt") != std::string::npos;
  const double c = tensor_cores ? 1.0 / 1024 : 2.0 * k * 0x1p-24;
  const Tensor wd = reference::dequantized_weight(ref_layer).value();
  const Tensor xa = reference::effective_activation(ref_layer, Activation::dense(x)).value();
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double mag = 0;
      for (int64_t t = 0; t < k; ++t) mag += std::fabs(xa.data<double>()[i * k + t] * wd.data<double>()[j * k + t]);
      const double g = element_as_double(got, i * n + j), r = element_as_double(want, i * n + j);
      const double ulp = std::ldexp(1.0, std::max(std::ilogb(std::max(std::fabs(r), 0x1p-126)), -126) - 7);
      if (!(std::fabs(g - r) <= ulp + c * mag) && bad++ < 5) {
        ADD_FAILURE() << route << ": out(" << i << ", " << j << ") = " << g << ", reference " << r;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "on route " << route;
}

const std::vector<PartialCase> kCases = {
    {1, 576, {576, 192, 192}, true},  {2, 576, {576, 192, 192}, false}, {3, 320, {144, 32, 32}, true},
    {7, 576, {576, 192, 192}, true},  {17, 320, {144, 32, 32}, false},  {17, 576, {576, 192, 192}, false},
    {257, 320, {144, 32, 96}, true},  {257, 576, {576, 192, 192}, true},
};

TEST(CudaPartialBlocks, BlockScaledKernelsMatchTheReference) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const LinearKernel* kern : {static_cast<const LinearKernel*>(&cuda::kSm90Fp8BlockScaled),
                                   static_cast<const LinearKernel*>(&cuda::kCublasLtFp8BlockScaled),
                                   static_cast<const LinearKernel*>(&cuda::kSm90Fp8BlockScaledStream)}) {
    for (const PartialCase& pc : kCases) check(*kern, kBlock, pc);
  }
}

TEST(CudaPartialBlocks, WeightOnlyStreamingMatchesTheReference) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const LinearKernel* kern : {static_cast<const LinearKernel*>(&cuda::kSm90Fp8WeightOnly),
                                   static_cast<const LinearKernel*>(&cuda::kSm90Fp8WeightOnlyStream)}) {
    for (const PartialCase& pc : kCases) check(*kern, kWoBlock, pc);
  }
}

// Export then import (the weight cache): the imported layer rebuilds its scale-row table and gives the same bits.
TEST(CudaPartialBlocks, ProcessedWeightsRoundTrip) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const LinearKernel& kern = cuda::kSm90Fp8BlockScaled;
  const PartialCase pc{17, 576, {576, 192, 192}, false};
  LinearLayer a = partial_layer(kBlock, pc, 5);
  LinearLayer b = a;
  ASSERT_TRUE(kern.process_weights_after_loading(a).is_ok());
  auto w = kern.export_processed(a);
  ASSERT_TRUE(w) << w.message();
  ASSERT_TRUE(kern.import_processed(b, *w).is_ok());
  for (const int64_t m : {1, 17}) {
    const Tensor xd = cuda::to_device(random_normal(DType::kBF16, {m, pc.k}, 6, 1.0)).value();
    Tensor ya = cuda::empty(DType::kBF16, {m, 960}).value(), yb = cuda::empty(DType::kBF16, {m, 960}).value();
    ASSERT_TRUE(kern.apply(a, Activation::dense(xd), nullptr, ya).is_ok());
    ASSERT_TRUE(kern.apply(b, Activation::dense(xd), nullptr, yb).is_ok());
    const Tensor ha = cuda::to_host(ya).value(), hb = cuda::to_host(yb).value();
    EXPECT_EQ(std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())), 0) << "M=" << m;
  }
}

// Host side, no GPU: the staged scales are every shard's own rows, each padded to the 16-byte row cuBLASLt reads.
TEST(CudaPartialBlocks, StagedScalesKeepEachShardsRows) {
  const PartialCase pc{1, 320, {144, 32, 32}, false};
  const LinearLayer layer = partial_layer(kBlock, pc, 9);
  cuda::LayerState st;
  static_cast<cuda::LayoutPlan&>(st) = cuda::plan_layout(layer.config);
  EXPECT_FALSE(st.grid.uniform);
  EXPECT_EQ(st.scale_shape(), (Shape{4, 4}));  // 2 + 1 + 1 rows; 3 K blocks padded to 4
  ASSERT_TRUE(cuda::stage_from_checkpoint(layer, st).is_ok());
  const Tensor& ws = layer.params.at("weight_scale");
  ASSERT_EQ(ws.shape(), (Shape{4, 3}));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const float want = c < 3 ? ws.data<float>()[r * 3 + c] : 0.0f;
      EXPECT_EQ(st.w_scale.data<float>()[r * 4 + c], want) << r << ", " << c;
    }
  }
}

// Host side: cuBLASLt takes per-shard grids one shard per call, so every shard boundary must be a multiple of
// 16; otherwise the hybrid streams every M, and says why.
TEST(CudaPartialBlocks, CublasLtDeclinesShardsOffSixteenColumns) {
  LinearConfig c = make_config(kBlock, 272, 256, DType::kBF16, DType::kBF16);
  c.logical_widths = {200, 72};
  const Verdict v = cuda::kCublasLtFp8BlockScaled.can_implement(c);
  EXPECT_FALSE(v);
  EXPECT_NE(v.reason.find("boundary at output row 200 is not a multiple of 16"), std::string::npos) << v.reason;
  const std::vector<MRoute> routes = cuda::kSm90Fp8BlockScaled.m_routes(c);
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_EQ(routes[0].kernel, "sm90_fp8_block_scaled_stream");
  c.logical_widths = {240, 32};  // on 16 columns, off 128 rows
  EXPECT_TRUE(cuda::kCublasLtFp8BlockScaled.can_implement(c));
  const std::vector<MRoute> split = cuda::kSm90Fp8BlockScaled.m_routes(c);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_NE(split[1].why.find("one cuBLASLt FP8 GEMM per fused shard"), std::string::npos) << split[1].why;
}

#else
TEST(CudaPartialBlocks, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend"; }
#endif

}  // namespace
}  // namespace qlinear
