// The tensor-core decode kernels (src/backends/cuda/mma_decode*) against the reference on the same quantized
// layers: fresh random data (seed printed), outputs poisoned with NaN, M across the tile buckets and beyond
// (1 .. 1024), N and K off the tile multiples, block scales inside and outside the range where they fold into
// the BF16 weights (the test asserts which path the layer took), bias and output dtypes, fused shards; the
// weight cache round trip; and CUDA-graph capture and replay. Bound per element: the tensor-core bound of
// test_cuda.cpp (2^-10 of sum |x w|; FP32 accumulation inside the MMA) plus one output ULP.
// Skips, with the reason, without an sm_90 device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/mma_decode_kernels.hpp"
#include "backends/cuda/mma_decode_wgmma.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "qlinear/cuda.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/graph_replay.hpp"
#include "cuda/mma_reference_check.hpp"
#include "cuda/mma_variants.hpp"
#endif

namespace qlinear {
namespace {

#if !QLINEAR_WITH_CUDA
TEST(CudaMmaDecode, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend (no nvcc)"; }
#else

using cuda_test::fresh_seed;
using cuda_test::to_dtype;

using cuda_test::kTensorCoreBound;

Scheme scheme_named(const char* name) { return *find_scheme(name); }
Scheme nvfp4_a16() { return Scheme{"w4a16-nvfp4", Family::kNvfp4, kNvfp4Static, std::nullopt, ""}; }

// How the weights' magnitudes vary: by up to 2^3 across 128x128 blocks (scales fold), or by 2^-110 .. 2^90
// across rows and 32-wide groups (E8M0 scales outside the fold range: the promoted path).
enum class Spread { kNarrow, kWide };

struct Case {
  const cuda::MmaDecodeLinearKernel* kernel;
  Scheme scheme;
  int64_t m, n, k;
  Spread spread = Spread::kNarrow;
  DType out = DType::kBF16;
  std::optional<DType> bias;
  std::vector<int64_t> shards;
};

struct Prepared {
  LinearLayer raw, ref, mine;  // as quantized; processed by the reference; processed by the kernel
};

std::optional<Prepared> prepare(const Case& c, uint64_t seed) {
  MakeLayerOptions opt;
  opt.out_dtype = c.out;
  opt.input_dtype = DType::kBF16;
  opt.logical_widths = c.shards;
  Tensor w = random_normal(DType::kF32, {c.n, c.k}, seed, 0.05);
  for (int64_t r = 0; r < c.n; ++r) {
    for (int64_t j = 0; j < c.k; ++j) {
      const int e = c.spread == Spread::kNarrow ? static_cast<int>(((r / 128) * 5 + (j / 128) * 3) % 7) - 3
                                                : static_cast<int>((r * 37 + (j / 32) * 53) % 201) - 110;
      w.data<float>()[r * c.k + j] *= std::ldexp(1.0f, e);
    }
  }
  auto layer = quantize_layer("mma_test", c.scheme, w, opt);
  EXPECT_TRUE(layer) << layer.message();
  if (!layer) return std::nullopt;
  cuda_test::relabel_mx_weight_scales(c.scheme, *layer);
  Prepared p{*layer, *layer, *layer};
  const LinearKernel& ref = *find_kernel("reference_" + std::string(family_name(c.scheme.family)));
  EXPECT_TRUE(ref.process_weights_after_loading(p.ref));
  const Verdict v = c.kernel->can_implement(p.mine.config);
  EXPECT_TRUE(v) << v.reason;
  const Status ps = c.kernel->process_weights_after_loading(p.mine);
  EXPECT_TRUE(ps.is_ok()) << ps.message();
  if (!v || !ps.is_ok()) return std::nullopt;
  return p;
}

// Failures of `got` (host copy of the kernel's output) against the reference's output for x.
int64_t compare(const Case& c, const Prepared& p, const Tensor& x, const Tensor* bias, const Tensor& got,
                double* worst_out) {
  return cuda_test::compare_with_reference(c.scheme.family, p.ref, c.out, c.m, c.n, c.k, x, bias, got, worst_out);
}

std::string describe(const Case& c, uint64_t seed) {
  return std::string(c.kernel->name()) + " " + std::string(c.scheme.name) + " M=" + std::to_string(c.m) +
         " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
         (c.spread == Spread::kWide ? " wide-scales" : "") + " out=" + std::string(name(c.out)) +
         (c.bias ? " bias=" + std::string(name(*c.bias)) : "") +
         (c.shards.empty() ? "" : " shards=" + std::to_string(c.shards.size())) + " seed=" + std::to_string(seed);
}

void check(const Case& c) {
  const uint64_t seed = fresh_seed();
  const std::string what = describe(c, seed);
  SCOPED_TRACE(what);
  auto p = prepare(c, seed);
  if (!p) return;
  if (c.kernel->family() != Family::kFp8WeightOnly && c.kernel->family() != Family::kNvfp4) {
    // The scale range decides the path; make sure the case exercises the one it is meant to.
    EXPECT_EQ(cuda::mma_decode_folds_scales(p->mine), c.spread == Spread::kNarrow);
  }
  const Tensor x = to_dtype(random_normal(DType::kF32, {c.m, c.k}, seed + 1, 1.0), DType::kBF16);
  const Tensor bias = c.bias ? to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), *c.bias) : Tensor();
  auto xd = cuda::to_device(x).value();
  Tensor bd = c.bias ? cuda::to_device(bias).value() : Tensor();
  auto od = cuda::empty(c.out, {c.m, c.n}).value();
  ASSERT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());  // NaN in every float dtype
  const Status as = c.kernel->apply(p->mine, Activation::dense(xd), c.bias ? &bd : nullptr, od);
  ASSERT_TRUE(as.is_ok()) << as.message();
  auto got = cuda::to_host(od);
  ASSERT_TRUE(got) << got.message();
  double worst = 0;
  EXPECT_EQ(compare(c, *p, x, c.bias ? &bias : nullptr, *got, &worst), 0);
  std::printf("[ check ] %-100s worst %.2e (bound %.2e)\n", what.c_str(), worst, kTensorCoreBound);
}

const std::vector<int64_t> kMs = {1, 2, 7, 16, 17, 63, 64, 65, 255, 256, 1024};

struct KernelScheme {
  const cuda::MmaDecodeLinearKernel* kernel;
  const char* scheme;  // null: NVFP4 A16
};
const KernelScheme kAll[] = {
    {&cuda::kSm90MmaDecodeFp8WeightOnly, "w8a16-fp8"},
    {&cuda::kSm90MmaDecodeMxfp8, "w8a16-mxfp8"},
    {&cuda::kSm90MmaDecodeMxfp8, "w8a8-mxfp8"},
    {&cuda::kSm90MmaDecodeMxfp6, "w6a16-mxfp6-e2m3"},
    {&cuda::kSm90MmaDecodeMxfp6, "w6a16-mxfp6-e3m2"},
    {&cuda::kSm90MmaDecodeMxfp4, "w4a16-mxfp4"},
    {&cuda::kSm90MmaDecodeNvfp4, nullptr},
};

Scheme scheme_of(const KernelScheme& ks) { return ks.scheme ? scheme_named(ks.scheme) : nvfp4_a16(); }

TEST(CudaMmaDecode, MatchesTheReferenceOverM) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    const Scheme s = scheme_of(ks);
    for (int64_t m : kMs) {
      check({ks.kernel, s, m, 256, 1024});
      check({ks.kernel, s, m, 200, 800});  // N and K off the tiles (K still a multiple of 32 for MX)
    }
  }
}

// Which route each M takes (host code only: runs without a GPU): the wgmma kernel at 17..128 on every layer
// and at 129..256 only where K and N are both >= 8192; the widen route above that, and at 129..256 on the
// smaller layers (mma_decode_wgmma.cu says what was measured).
TEST(CudaMmaDecode, WgmmaRouteCoversLargeMOnlyOnLargeLayers) {
  struct Shape {
    int64_t n, k;
    bool large;
  };
  for (const Shape sh : {Shape{6144, 4096, false}, Shape{4096, 14336, false}, Shape{28672, 4096, false},
                         Shape{10240, 8192, true}, Shape{8192, 28672, true}}) {
    for (const cuda::MmaCode code : {cuda::MmaCode::kE4M3, cuda::MmaCode::kE2M1}) {
      cuda::MmaDecodeArgs a;
      a.layout.code = code;
      a.layout.scale = code == cuda::MmaCode::kE4M3 ? cuda::MmaScale::kRow : cuda::MmaScale::kMx32;
      a.layout.n = sh.n;
      a.layout.k = sh.k;
      for (const int64_t m : {1, 16, 17, 64, 128, 129, 200, 256, 257, 1024}) {
        a.m = m;
        const bool wgmma = m >= 17 && m <= (sh.large ? 256 : 128);
        EXPECT_EQ(cuda::mma_takes_wgmma_route(a), wgmma) << sh.n << "x" << sh.k << " M=" << m;
        if (!wgmma) {
          EXPECT_EQ(cuda::mma_takes_widen_route(a), m > 128) << sh.n << "x" << sh.k << " M=" << m;
        }
      }
    }
  }
}

TEST(CudaMmaDecode, ScalesOutsideTheFoldRangeTakeThePromotedPath) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    if (ks.kernel == &cuda::kSm90MmaDecodeNvfp4) continue;  // E4M3 scales always fold
    for (int64_t m : {1, 16, 64, 100, 300}) check({ks.kernel, scheme_of(ks), m, 144, 1056, Spread::kWide});
  }
}

TEST(CudaMmaDecode, SplitKBiasOutputDtypesAndShards) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    const Scheme s = scheme_of(ks);
    for (int64_t m : {1, 5, 16, 40}) {
      check({ks.kernel, s, m, 128, 8192});  // few N blocks, long K: split-K with the fixed-order reduction
      check({ks.kernel, s, m, 96, 512, Spread::kNarrow, DType::kF32, DType::kBF16});
      check({ks.kernel, s, m, 96, 512, Spread::kNarrow, DType::kF16, DType::kF32});
      check({ks.kernel, s, m, 96, 320, Spread::kNarrow, DType::kBF16, std::nullopt, {32, 64}});
    }
  }
  // FP8 per-channel: K only a multiple of 8.
  check({&cuda::kSm90MmaDecodeFp8WeightOnly, scheme_named("w8a16-fp8"), 3, 75, 1000});
  check({&cuda::kSm90MmaDecodeFp8WeightOnly, scheme_named("w8a16-fp8"), 33, 75, 1000});
}

// Every variant the benchmark times (cuda_test::mma_variants: kernels, tiles, splits, widen routes, forced)
// passes the same check in its M range, on shapes with several N blocks, split K and ragged edges.
TEST(CudaMmaDecode, EveryForcedVariantMatchesTheReference) {
  QL_REQUIRE_SM90();
  std::vector<cuda_test::MmaVariant> variants = cuda_test::mma_variants();
  cuda_test::MmaVariant small_blocks = variants.back();  // the widen route in 1 MiB row blocks: several blocks
  small_blocks.name = "wfrag1";
  small_blocks.force.widen_block_mib = 1;
  variants.push_back(small_blocks);
  // QL_MMA_TEST_VARIANTS="cl2,p3": only these (a device script short of time); unset: every variant.
  const char* only = std::getenv("QL_MMA_TEST_VARIANTS");
  const std::string list = only ? std::string(",") + only + "," : "";
  for (const cuda_test::MmaVariant& v : variants) {
    if (only && list.find("," + v.name + ",") == std::string::npos) continue;
    SCOPED_TRACE("variant " + v.name);
    cuda_test::ForceScope force(v.force);
    const bool small = v.max_m <= 16;
    for (const KernelScheme& ks : kAll) {
      const Scheme s = scheme_of(ks);
      for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17}, int64_t{65}, int64_t{256}}) {
        if (m < v.min_m || m > v.max_m) continue;
        check({ks.kernel, s, m, 200, 800});
        if (m != 7 && m < 256) check({ks.kernel, s, m, 1040, 1024});  // several N blocks
        if (small) check({ks.kernel, s, m, 128, 8192});               // split K
      }
    }
  }
}

// The swap-AB wgmma kernel forced at every M from 17 (token tiles 64 / 128 / 256 by M, several token tiles
// at 300), on N and K off its 128-row and 64-K tiles, split K, bias and output dtypes, every code (FP6
// included); each token tile, the ring depth, the grid (persistent or one block per unit), the schedule
// (split-K or stream-K), 256-row units and the L2 hints forced on their own too (MX scales outside the fold
// range keep the mma.sync kernel).
TEST(CudaMmaDecode, WgmmaKernelMatchesTheReference) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    const Scheme s = scheme_of(ks);
    {
      cuda::MmaDecodeForce f;
      f.wgmma = 1;
      cuda_test::ForceScope force(f);
      LinearConfig config;  // the route explain shows for M = 64 is the wgmma kernel's
      config.family = ks.kernel->family();
      config.weight_key = s.weight_key;
      config.n = 200;
      config.k = 800;
      bool named = false;
      for (const MRoute& r : ks.kernel->m_routes(config)) {
        if (r.contains(64)) named = r.why.find("wgmma") != std::string::npos;
      }
      EXPECT_TRUE(named) << s.name;
      for (int64_t m : {17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300}) {
        check({ks.kernel, s, m, 200, 800});
        if (m == 64 || m == 65 || m == 257) check({ks.kernel, s, m, 1040, 1088});  // 9 N blocks, the last partial
      }
      for (int64_t m : {24, 130}) {
        check({ks.kernel, s, m, 128, 8192});  // one N block: split K
        check({ks.kernel, s, m, 136, 512, Spread::kNarrow, DType::kF32, DType::kBF16});
        check({ks.kernel, s, m, 96, 320, Spread::kNarrow, DType::kF16, DType::kF32, {32, 64}});
      }
    }
    for (int tokens : {64, 128, 256}) {
      cuda::MmaDecodeForce f;
      f.wgmma = 1;
      f.wgmma_tokens = tokens;
      cuda_test::ForceScope force(f);
      check({ks.kernel, s, 200, 272, 1024});
    }
    // The knobs: at most 3 blocks in flight (several units per block on these small layers) unless said.
    for (int variant = 0; variant < 8; ++variant) {
      cuda::MmaDecodeForce f;
      f.wgmma = 1;
      f.wgmma_persist = 3;
      if (variant == 0) f.wgmma_stages = 2;    // the ring wraps every other stage
      if (variant == 1) f.wgmma_persist = -1;  // one block per unit
      if (variant == 2) f.wgmma_persist = 0;   // as many blocks as SMs
      if (variant == 3) f.splits = 3;          // three splits
      if (variant == 4) f.wgmma_rows = 256;    // 256 rows per unit (64-token tiles)
      if (variant == 5) f.wgmma_no_hint = f.wgmma_drain = true;
      if (variant == 6) f.wgmma_stream_k = 1;  // stream-K: 9 or 18 tiles on 3 blocks, pieces added by the fixup
      if (variant == 7) {                      // stream-K with a wave of whole tiles first (9 tiles, 4 blocks)
        f.wgmma_stream_k = 1;
        f.wgmma_persist = 4;
      }
      cuda_test::ForceScope force(f);
      SCOPED_TRACE("wgmma variant " + std::to_string(variant));
      if (variant % 2 == 0) {
        check({ks.kernel, s, 70, 1040, 2304});   // 9 row blocks, one token tile of 128
        check({ks.kernel, s, 140, 528, 1600});   // 5 row blocks (the last partial), 256-token tile
      } else {
        check({ks.kernel, s, 300, 1040, 1024});  // 9 row blocks x 2 token tiles of 256
        check({ks.kernel, s, 40, 2064, 512});    // 17 row blocks (9 of 256 rows), 64-token tile
      }
    }
  }
}

// Blocks sharing each activation box by TMA multicast (thread-block clusters of 2 and 4): every code, row-
// block counts off the cluster size (the last group takes rows past N), split K, several units per cluster,
// one cluster per unit, 256-row units.
TEST(CudaMmaDecode, WgmmaBlockPairsMatchTheReference) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    const Scheme s = scheme_of(ks);
    for (int variant = 0; variant < 6; ++variant) {
      cuda::MmaDecodeForce f;
      f.wgmma = 1;
      f.wgmma_cluster = variant < 4 ? 2 : 4;
      f.wgmma_persist = variant == 0 || variant == 4 ? 4 : (variant == 1 ? -1 : 0);
      if (variant == 3) f.splits = 2;
      if (variant == 5) f.wgmma_rows = 256;
      cuda_test::ForceScope force(f);
      SCOPED_TRACE("block pairs, variant " + std::to_string(variant));
      check({ks.kernel, s, 70, 1040, 2304});   // 9 row blocks: 5 pairs, 3 groups of 4
      check({ks.kernel, s, 40, 2064, 512});    // 17 row blocks, 64-token tile
      if (variant % 2 == 0) check({ks.kernel, s, 300, 256, 1024});  // 2 row blocks x 2 token tiles of 256
    }
  }
}

// M <= 16 split-K: the splits added in a thread-block cluster and through FP32 partial sums plus the
// reduction launch give the same output bit for bit (both add in split order), for 2 .. 8 splits, and a
// second call gives it again.
TEST(CudaMmaDecode, ClusterAndPartialSumSplitsAgreeBitForBit) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    for (int64_t m : {1, 7, 16}) {
      const Case c{ks.kernel, scheme_of(ks), m, 144, 8448, Spread::kNarrow, DType::kBF16, DType::kF32};
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(describe(c, seed));
      auto p = prepare(c, seed);
      ASSERT_TRUE(p);
      const Tensor x = to_dtype(random_normal(DType::kF32, {m, c.k}, seed + 1, 1.0), DType::kBF16);
      const Tensor bias = to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), DType::kF32);
      auto xd = cuda::to_device(x).value();
      auto bd = cuda::to_device(bias).value();
      auto run = [&](cuda::MmaSplitReduce how, int splits) {
        cuda::MmaDecodeForce f;
        f.split_reduce = how;
        f.splits = splits;
        cuda_test::ForceScope force(f);
        auto od = cuda::empty(DType::kBF16, {m, c.n}).value();
        EXPECT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());
        const Status as = c.kernel->apply(p->mine, Activation::dense(xd), &bd, od);
        EXPECT_TRUE(as.is_ok()) << as.message();
        return cuda::to_host(od).value();
      };
      for (int splits : {2, 3, 8}) {
        const Tensor a = run(cuda::MmaSplitReduce::kCluster, splits);
        const Tensor b = run(cuda::MmaSplitReduce::kPartials, splits);
        const Tensor again = run(cuda::MmaSplitReduce::kCluster, splits);
        EXPECT_EQ(std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())), 0) << splits << " splits";
        EXPECT_EQ(std::memcmp(a.raw(), again.raw(), static_cast<size_t>(a.nbytes())), 0) << splits << " splits";
        EXPECT_EQ(compare(c, *p, x, &bias, a, nullptr), 0) << splits << " splits";
      }
    }
  }
}

// Captured once into a CUDA graph (after a warm-up call outside capture) and replayed on new inputs
// written into the same buffers: the replay's output equals a direct call's, bit for bit.
TEST(CudaMmaDecode, CapturesAndReplaysInACudaGraph) {
  QL_REQUIRE_SM90();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(stream);
  for (const KernelScheme& ks : kAll) {
    for (int64_t m : {1, 16, 64, 256, -64}) {  // 256: the widening route or the wgmma kernel; -64: wgmma forced
      cuda::MmaDecodeForce f;
      f.wgmma = m < 0 ? 1 : 0;
      f.splits = m < 0 ? 2 : 0;  // its split-K reduction in the graph too
      cuda_test::ForceScope force(f);
      m = m < 0 ? -m : m;
      const Case c{ks.kernel, scheme_of(ks), m, 128, 4096, Spread::kNarrow, DType::kBF16, DType::kBF16};
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(describe(c, seed));
      auto p = prepare(c, seed);
      ASSERT_TRUE(p);
      const Tensor bias = to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), DType::kBF16);
      auto bd = cuda::to_device(bias).value();
      auto xd = cuda::empty(DType::kBF16, {m, c.k}).value();
      auto od = cuda::empty(DType::kBF16, {m, c.n}).value();
      auto direct = cuda::empty(DType::kBF16, {m, c.n}).value();
      auto upload_x = [&](uint64_t s) {
        const Tensor x = to_dtype(random_normal(DType::kF32, {m, c.k}, s, 1.0), DType::kBF16);
        EXPECT_EQ(cudaMemcpyAsync(xd.raw(), x.raw(), static_cast<size_t>(x.nbytes()), cudaMemcpyHostToDevice, stream),
                  cudaSuccess);
        return x;
      };
      upload_x(seed + 10);
      Tensor x;
      cuda_test::replay_captured_call(
          stream, 3, [&] { return c.kernel->apply(p->mine, Activation::dense(xd), &bd, od); },
          [&](int replay) {
            x = upload_x(seed + 20 + replay);
            ASSERT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());
          },
          [&](int replay) {
            ASSERT_TRUE(c.kernel->apply(p->mine, Activation::dense(xd), &bd, direct).is_ok());
            auto got = cuda::to_host(od).value();
            auto want = cuda::to_host(direct).value();
            EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(got.nbytes())), 0)
                << "replay " << replay;
            EXPECT_EQ(compare(c, *p, x, &bias, got, nullptr), 0) << "replay " << replay;
          });
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

// export_processed -> import_processed on an unprocessed copy gives the same outputs bit for bit.
TEST(CudaMmaDecode, ProcessedWeightsRoundTrip) {
  QL_REQUIRE_SM90();
  for (const KernelScheme& ks : kAll) {
    const Case c{ks.kernel, scheme_of(ks), 7, 200, 800};
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    auto p = prepare(c, seed);
    ASSERT_TRUE(p);
    auto exported = c.kernel->export_processed(p->mine);
    ASSERT_TRUE(exported) << exported.message();
    LinearLayer imported = p->raw;  // unprocessed, the same checkpoint tensors
    const Status is = c.kernel->import_processed(imported, *exported);
    ASSERT_TRUE(is.is_ok()) << is.message();
    const Tensor x = to_dtype(random_normal(DType::kF32, {c.m, c.k}, seed + 1, 1.0), DType::kBF16);
    auto xd = cuda::to_device(x).value();
    auto a = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    auto b = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    ASSERT_TRUE(c.kernel->apply(p->mine, Activation::dense(xd), nullptr, a).is_ok());
    ASSERT_TRUE(c.kernel->apply(imported, Activation::dense(xd), nullptr, b).is_ok());
    auto ha = cuda::to_host(a).value();
    auto hb = cuda::to_host(b).value();
    EXPECT_EQ(std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())), 0);
  }
}

TEST(CudaMmaDecode, DeclinesWhatItCannotRunWithAReason) {
  LinearConfig c;
  c.family = Family::kMxfp4;
  c.weight_key = kMxfp4Static;
  c.n = 64;
  c.k = 64;
  c.input_dtype = DType::kF16;
  Verdict v = cuda::kSm90MmaDecodeMxfp4.can_implement(c);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("BF16"), std::string::npos) << v.reason;
  c.input_dtype = DType::kBF16;
  c.activation_key = kFp8StaticTensorSym;  // static FP8 activations: on MXFP4 weights only
  c.family = Family::kMxfp6;
  c.weight_key = kMxfp6E2M3Static;
  v = cuda::kSm90MmaDecodeMxfp6.can_implement(c);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("quantized activations"), std::string::npos) << v.reason;
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
