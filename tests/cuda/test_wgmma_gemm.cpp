// The own persistent wgmma GEMMs. FP8 (wgmma_fp8_gemm.hpp) at the GEMM level: every tile width, cluster
// and rasterization gives the same output bit for bit (the same promotion every 128 K, whatever the tile),
// within the tensor-core FP8 bound of an FP64 sum on the host; its route captured in a CUDA graph replays a
// direct call bit for bit. INT8 (wgmma_int8_gemm.hpp): its route gives the cuBLASLt route's output bit for
// bit (exact S32 sums, the same FP64 epilogue) for every activation mode, dtype and tile.
// The route against the reference backend is in test_cuda.cpp (Fp8WgmmaRouteMatchesTheReference).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "cuda/graph_replay.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/wgmma_fp8_gemm.hpp"
#include "backends/cuda/wgmma_int8_gemm.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/make_layer.hpp"

namespace qlinear {
namespace {

using cuda_test::fresh_seed;
using cuda_test::to_dtype;

// Random E4M3 codes (NaN codes replaced) in [rows, ld] with zeros past `cols`.
Tensor random_e4m3(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  Tensor t = Tensor::empty(DType::kU8, {rows, ld});
  uint64_t st = seed | 1;
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld; ++c) {
      st ^= st << 13;
      st ^= st >> 7;
      st ^= st << 17;
      uint8_t b = static_cast<uint8_t>(st);
      if ((b & 0x7F) == 0x7F) b = 0x3C;
      p[r * ld + c] = c < cols ? b : 0;
    }
  }
  return t;
}

// Scales spanning 2^-20 .. 2^10.
Tensor spread_scales(int64_t n, uint64_t seed) {
  Tensor t = Tensor::empty(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) {
    const float mantissa = 1.0f + static_cast<float>((seed + 7 * i) % 13) / 16;
    t.data<float>()[i] = std::ldexp(mantissa, static_cast<int>((i * 11 + seed) % 31) - 20);
  }
  return t;
}

float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CudaWgmmaFp8, EveryTileGivesTheSameOutputWithinTheFp8Bound) {
  QL_REQUIRE_SM90();
  const cuda::Stream s = cuda::current_stream();
  struct Case {
    int64_t m, n, k;
  };
  for (const Case& c : {Case{300, 1000, 1000}, Case{1000, 456, 4100}, Case{7, 200, 96}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                 " seed=" + std::to_string(seed));
    const int64_t ld = (c.k + 15) / 16 * 16;
    const Tensor x = random_e4m3(c.m, c.k, ld, seed);
    const Tensor w = random_e4m3(c.n, c.k, ld, seed + 1);
    const Tensor xs = spread_scales(c.m, seed);
    const Tensor ws = spread_scales(c.n, seed + 3);
    auto xd = cuda::to_device(x).value();
    auto wd = cuda::to_device(w).value();
    auto xsd = cuda::to_device(xs).value();
    auto wsd = cuda::to_device(ws).value();
    auto out = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    cuda::WgmmaFp8Args a;
    a.x = xd.raw();
    a.ld_x = ld;
    a.w = wd.raw();
    a.ld_w = ld;
    a.m = c.m;
    a.n = c.n;
    a.k = c.k;
    a.x_scale = static_cast<const float*>(xsd.raw());
    a.x_scale_per_row = true;
    a.w_scale = static_cast<const float*>(wsd.raw());
    a.w_scale_per_col = true;
    a.out = out.raw();
    std::vector<Tensor> got;
    struct Variant {
      cuda::WgmmaFp8Tile tile;
      int cluster, group;
    };
    for (const Variant& v : {Variant{cuda::WgmmaFp8Tile::kN128, 1, 0}, Variant{cuda::WgmmaFp8Tile::kN192, 1, 1},
                             Variant{cuda::WgmmaFp8Tile::kN256, 1, 3}, Variant{cuda::WgmmaFp8Tile::kN128, 2, 0},
                             Variant{cuda::WgmmaFp8Tile::kN256, 2, 1}, Variant{cuda::WgmmaFp8Tile::kN192, 2, 2}}) {
      a.tile = v.tile;
      a.cluster_m = v.cluster;
      a.group_m = v.group;  // other rasterizations too
      ASSERT_TRUE(cuda::fill_bytes(out, 0xFF).is_ok());
      const Status st = cuda::launch_wgmma_fp8_gemm(a, s);
      ASSERT_TRUE(st.is_ok()) << st.message();
      got.push_back(cuda::to_host(out).value());
    }
    for (size_t i = 1; i < got.size(); ++i) {
      EXPECT_EQ(std::memcmp(got[0].raw(), got[i].raw(), static_cast<size_t>(got[0].nbytes())), 0) << "variant " << i;
    }
    // The host sum in FP64 of the exact products; the tensor cores keep ~14 bits between promotions
    // (kTensorCoreFp8Bound of test_cuda.cpp: 2^-10 sum|x w|), then one BF16 rounding.
    const int64_t rows = std::min<int64_t>(c.m, 64);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          const double p = decode(DType::kF8E4M3, x.data<uint8_t>()[i * ld + q]) *
                           decode(DType::kF8E4M3, w.data<uint8_t>()[j * ld + q]);
          sum += p;
          abs_sum += std::fabs(p);
        }
        const double scale = static_cast<double>(xs.data<float>()[i]) * ws.data<float>()[j];
        const double want = sum * scale;
        const double g = bf16_value(got[0].data<uint16_t>()[i * c.n + j]);
        const double bound = abs_sum * scale / 1024 + std::fabs(want) * std::ldexp(1.0, -8) + 1e-30;
        if (!(std::fabs(g - want) <= bound) && bad++ < 5) {
          ADD_FAILURE() << "out(" << i << ", " << j << ") = " << g << ", want " << want << " (bound " << bound << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// Captured once into a CUDA graph (after a warm-up call outside capture) and replayed on new inputs written
// into the same buffer: the replay's output equals a direct call's, bit for bit.
TEST(CudaWgmmaGemm, RoutesCaptureAndReplayInACudaGraph) {
  QL_REQUIRE_SM90();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(stream);
  struct Route {
    const LinearKernel& kernel;
    const char* scheme;
    int64_t m = 1024, k = 1000;
  };
  // The small-M FP8 mma route too: a programmatic launch after the quantizer, and K split over blocks with
  // partial sums in stream-ordered scratch (K = 4000).
  for (const Route& r : {Route{cuda::kSm90Fp8ScaledMMWgmma, "w8a8-fp8-channel"},
                         Route{cuda::kSm90Fp8ScaledMMWgmma, "w8a8-fp8-tensor"},
                         Route{cuda::kSm90Int8ScaledMMWgmma, "w8a8-int8-static-asym"},
                         Route{cuda::kSm90Fp8ScaledMMMma, "w8a8-fp8-channel", 5, 4000},
                         Route{cuda::kSm90Fp8ScaledMMMma, "w8a8-fp8-tensor", 16, 1000}}) {
    const LinearKernel& kernel = r.kernel;
    const char* scheme_name = r.scheme;
    const int64_t m = r.m, n = 456, k = r.k;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(kernel.name()) + " " + scheme_name + " M=" + std::to_string(m) + " seed=" +
                 std::to_string(seed));
    MakeLayerOptions opt;
    opt.out_dtype = DType::kBF16;
    opt.input_dtype = DType::kBF16;
    opt.input_min = -3.0f;
    opt.input_max = 3.0f;
    const Tensor w = random_normal(DType::kF32, {n, k}, seed, 0.05);
    auto layer = quantize_layer("graph", *find_scheme(scheme_name), w, opt);
    ASSERT_TRUE(layer) << layer.message();
    ASSERT_TRUE(kernel.process_weights_after_loading(*layer).is_ok());
    const Tensor bias = to_dtype(random_normal(DType::kF32, {n}, seed + 2, 0.5), DType::kBF16);
    auto bd = cuda::to_device(bias).value();
    auto xd = cuda::empty(DType::kBF16, {m, k}).value();
    auto od = cuda::empty(DType::kBF16, {m, n}).value();
    auto direct = cuda::empty(DType::kBF16, {m, n}).value();
    auto upload_x = [&](uint64_t sd) {
      const Tensor x = to_dtype(random_normal(DType::kF32, {m, k}, sd, 1.0), DType::kBF16);
      EXPECT_EQ(cudaMemcpyAsync(xd.raw(), x.raw(), static_cast<size_t>(x.nbytes()), cudaMemcpyHostToDevice, stream),
                cudaSuccess);
    };
    upload_x(seed + 10);
    cuda_test::replay_captured_call(
        stream, 2, [&] { return kernel.apply(*layer, Activation::dense(xd), &bd, od); },
        [&](int replay) {
          upload_x(seed + 20 + replay);
          ASSERT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());
        },
        [&](int replay) {
          ASSERT_TRUE(kernel.apply(*layer, Activation::dense(xd), &bd, direct).is_ok());
          auto got = cuda::to_host(od).value();
          auto want = cuda::to_host(direct).value();
          EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(got.nbytes())), 0) << "replay " << replay;
          int64_t nan = 0;
          for (int64_t i = 0; i < m * n; ++i) nan += std::isnan(bf16_value(got.data<uint16_t>()[i]));
          EXPECT_EQ(nan, 0) << "replay " << replay << ": outputs left unwritten";
        });
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

// The quantization fused into the FP8 GEMM (static per-tensor, per-token) against the quantizer kernel +
// the same GEMM: codes, scales and outputs bit for bit, on rows that span binades (a zero row, a tiny row).
TEST(CudaWgmmaFp8, FusedQuantizationGivesTheQuantizerKernelsCodesAndOutput) {
  QL_REQUIRE_SM90();
  const cuda::Stream s = cuda::current_stream();
  struct Case {
    int64_t m, n, k;
    bool token;
    cuda::WgmmaFp8Tile tile;
    int cluster;
  };
  for (const Case& c : {Case{300, 456, 1000, true, cuda::WgmmaFp8Tile::kN256, 1},
                        Case{1024, 1000, 4096, false, cuda::WgmmaFp8Tile::kN192, 1},
                        Case{1000, 200, 4104, true, cuda::WgmmaFp8Tile::kN128, 2},
                        Case{4096, 384, 520, true, cuda::WgmmaFp8Tile::kN256, 2},
                        Case{3, 64, 8, false, cuda::WgmmaFp8Tile::kN128, 1}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                 (c.token ? " per-token" : " static") + " seed=" + std::to_string(seed));
    Tensor xf = random_normal(DType::kF32, {c.m, c.k}, seed, 1.0);
    for (int64_t r = 0; r < c.m; ++r) {
      const float f = r == 1 ? 0.0f : r == 2 ? 1e-6f : std::ldexp(1.0f, static_cast<int>(r % 9) - 4);
      for (int64_t q = 0; q < c.k; ++q) xf.data<float>()[r * c.k + q] *= f;
    }
    const int64_t ld = (c.k + 31) / 32 * 32;
    auto xd = cuda::to_device(to_dtype(xf, DType::kBF16)).value();
    auto wd = cuda::to_device(random_e4m3(c.n, c.k, ld, seed + 1)).value();
    auto wsd = cuda::to_device(spread_scales(c.n, seed + 3)).value();
    auto codes1 = cuda::empty(DType::kU8, {c.m, ld}).value();
    auto codes2 = cuda::empty(DType::kU8, {c.m, ld}).value();
    auto sc1 = cuda::empty(DType::kF32, {c.m}).value();
    auto sc2 = cuda::empty(DType::kF32, {c.m}).value();
    auto out1 = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    auto out2 = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    const int64_t blocks = (c.m + 127) / 128;
    auto ready = cuda::empty(DType::kI32, {blocks}).value();
    for (Tensor* t : {&codes2, &sc2, &out2}) ASSERT_TRUE(cuda::fill_bytes(*t, 0xFF).is_ok());
    ASSERT_TRUE(cuda::fill_bytes(ready, 0).is_ok());
    const float static_scale = 0.0123f;
    cuda::ActQuantArgs q;
    q.x = xd.raw();
    q.m = c.m;
    q.k = c.k;
    q.ld_x = c.k;
    q.mode = c.token ? cuda::ActQuantMode::kDynamicToken : cuda::ActQuantMode::kStaticTensor;
    q.static_scale = static_scale;
    q.codes = codes1.raw();
    q.ld_codes = ld;
    q.scale = {sc1.raw(), c.token ? 1 : 0, 0, false};
    ASSERT_TRUE(cuda::launch_act_quant(q, s).is_ok());
    cuda::WgmmaFp8Args a;
    a.x = codes1.raw();
    a.ld_x = ld;
    a.w = wd.raw();
    a.ld_w = ld;
    a.m = c.m;
    a.n = c.n;
    a.k = c.k;
    a.x_scale = static_cast<const float*>(sc1.raw());
    a.x_scale_per_row = c.token;
    a.w_scale = static_cast<const float*>(wsd.raw());
    a.w_scale_per_col = true;
    a.out = out1.raw();
    a.tile = c.tile;
    a.cluster_m = c.cluster;
    ASSERT_TRUE(cuda::launch_wgmma_fp8_gemm(a, s).is_ok());
    a.x = codes2.raw();
    a.x_scale = c.token ? static_cast<const float*>(sc2.raw()) : nullptr;
    a.out = out2.raw();
    a.q_mode = c.token ? cuda::WgmmaFp8Args::FusedQuant::kToken : cuda::WgmmaFp8Args::FusedQuant::kStatic;
    a.q_src = xd.raw();
    a.q_ld_src = c.k;
    a.q_static_scale = static_scale;
    a.ready = static_cast<int*>(ready.raw());
    const Status st = cuda::launch_wgmma_fp8_gemm(a, s);
    ASSERT_TRUE(st.is_ok()) << st.message();
    auto c1 = cuda::to_host(codes1).value();
    auto c2 = cuda::to_host(codes2).value();
    int64_t bad = 0;
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t q2 = 0; q2 < c.k; ++q2) {
        if (c1.data<uint8_t>()[r * ld + q2] != c2.data<uint8_t>()[r * ld + q2] && bad++ < 5) {
          ADD_FAILURE() << "code (" << r << ", " << q2 << ") differs";
        }
      }
    }
    EXPECT_EQ(bad, 0);
    if (c.token) {
      auto s1 = cuda::to_host(sc1).value();
      auto s2 = cuda::to_host(sc2).value();
      EXPECT_EQ(std::memcmp(s1.raw(), s2.raw(), static_cast<size_t>(s1.nbytes())), 0) << "scales differ";
    }
    auto o1 = cuda::to_host(out1).value();
    auto o2 = cuda::to_host(out2).value();
    EXPECT_EQ(std::memcmp(o1.raw(), o2.raw(), static_cast<size_t>(o1.nbytes())), 0) << "outputs differ";
  }
}

// The INT8 wgmma route against the cuBLASLt route on the same layer and input: bit for bit.
TEST(CudaWgmmaInt8, RouteGivesTheCublasLtRoutesOutputBitForBit) {
  QL_REQUIRE_SM90();
  struct Case {
    const char* scheme;
    int64_t m, n, k;
    DType in, out;
    bool bias;
  };
  for (const Case& c : {Case{"w8a8-int8-dynamic", 1000, 456, 1000, DType::kBF16, DType::kBF16, true},
                        Case{"w8a8-int8-static-asym", 257, 200, 4100, DType::kF16, DType::kF16, true},
                        Case{"w8a8-int8-static", 4096, 1024, 520, DType::kBF16, DType::kF32, false},
                        Case{"w8a8-int8-dynamic", 7, 76, 999, DType::kF32, DType::kBF16, false},
                        Case{"w8a8-int8-static-asym", 1024, 3000, 256, DType::kBF16, DType::kBF16, true}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(c.scheme) + " M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) + " K=" +
                 std::to_string(c.k) + " seed=" + std::to_string(seed));
    MakeLayerOptions opt;
    opt.out_dtype = c.out;
    opt.input_dtype = c.in;
    opt.input_min = -2.0f;
    opt.input_max = 3.0f;
    auto made = quantize_layer("int8", *find_scheme(c.scheme), random_normal(DType::kF32, {c.n, c.k}, seed, 0.05), opt);
    ASSERT_TRUE(made) << made.message();
    LinearLayer lt = *made, wg = *made;
    ASSERT_TRUE(cuda::kSm90Int8ScaledMM.process_weights_after_loading(lt).is_ok());
    ASSERT_TRUE(cuda::kSm90Int8ScaledMMWgmma.process_weights_after_loading(wg).is_ok());
    auto xd = cuda::to_device(to_dtype(random_normal(DType::kF32, {c.m, c.k}, seed + 1, 1.0), c.in)).value();
    auto bd = cuda::to_device(to_dtype(random_normal(DType::kF32, {c.n}, seed + 2, 0.5), DType::kBF16)).value();
    auto o_lt = cuda::empty(c.out, {c.m, c.n}).value();
    auto o_wg = cuda::empty(c.out, {c.m, c.n}).value();
    ASSERT_TRUE(cuda::fill_bytes(o_wg, 0xFF).is_ok());
    const Tensor* bias = c.bias ? &bd : nullptr;
    const Status s1 = cuda::kSm90Int8ScaledMM.apply(lt, Activation::dense(xd), bias, o_lt);
    const Status s2 = cuda::kSm90Int8ScaledMMWgmma.apply(wg, Activation::dense(xd), bias, o_wg);
    ASSERT_TRUE(s1.is_ok()) << s1.message();
    ASSERT_TRUE(s2.is_ok()) << s2.message();
    auto a = cuda::to_host(o_lt).value();
    auto b = cuda::to_host(o_wg).value();
    const int64_t bytes = element_size(c.out);
    int64_t differing = 0;
    for (int64_t i = 0; i < c.m * c.n; ++i) {
      const auto* pa = static_cast<const uint8_t*>(a.raw()) + i * bytes;
      const auto* pb = static_cast<const uint8_t*>(b.raw()) + i * bytes;
      if (std::memcmp(pa, pb, static_cast<size_t>(bytes)) != 0 &&
          differing++ < 5) {
        ADD_FAILURE() << "output " << i / c.n << ", " << i % c.n << " differs";
      }
    }
    EXPECT_EQ(differing, 0);
  }
}

}  // namespace
}  // namespace qlinear

#else
TEST(CudaWgmmaGemm, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend"; }
#endif
