// The CUDA backend against the reference, on the same quantized layers. Every GPU test skips, with the
// reason, when there is no usable sm_90 device (what CI sees); the program still builds and passes there.
//
//   * activation quantization: codes and scales bit-identical to the reference quantizers;
//   * every CUDA kernel (and each of its routes) vs the reference kernel: a layer from quantize_layer is
//     copied, one copy processed by the CUDA kernel, one by the reference on the host; fresh random data
//     each run (the seed is printed), outputs poisoned with NaN before each launch, M in
//     {1, 2, 7, 16, 17, 64, 257, 4096}, odd N / K where the kernel allows them. Bound per element (FP32
//     accumulation): |got - ref| <= c * K * 2^-24 * sum_k |x w| + 1 ULP(out), c = kAccumFactor;
//   * the reasons kernels give when they decline.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/fp8_mma_gemm.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "qlinear/cuda.hpp"
#include "cuda/cuda_test_util.hpp"
#endif

namespace qlinear {
namespace {

#if !QLINEAR_WITH_CUDA
TEST(Cuda, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend (no nvcc)"; }
#else

using cuda_test::fresh_seed;
using cuda_test::to_dtype;

#define QL_ASSERT_OK(expr)                       \
  do {                                                \
    const ::qlinear::Status s_ = (expr);              \
    ASSERT_TRUE(s_.is_ok()) << #expr << ": " << s_.message(); \
  } while (0)

constexpr double kAccumFactor = 2.0;
// INT8 on the GPU: the output within one ulp of the reference (a hair of FP64 slack, in the same units).
constexpr double kInt8Bound = 0.01;
// cuBLASLt FP8 (Hopper tensor cores, fast accumulation off) keeps ~14 bits between promotions: its bound
// is a fraction of sum|x w|, not K 2^-24 sum|x w| (README.md of the backend). Measured up to ~2^-13.5 on
// uniform weights; with weights whose magnitude varies 2^6 across blocks, one output in 524 288 reached
// 2^-11.9 (per-tensor, M = 4096, N = 128, K = 512, seed 2637279548): the bound is 2^-10.
constexpr double kTensorCoreFp8Bound = 1.0 / 1024;

// Does this kernel's apply at M run on the tensor cores with their FP8 / BF16-GEMM accumulation (cuBLASLt
// FP8, the BF16 GEMM of the dequantizing route, the own wgmma GEMMs)? A hybrid is asked for the route its
// declared M ranges name. The FP8 mma route is not one of them: ptxas runs its FP8 mma.sync as F16 HMMAs with
// FP32 accumulation, and over 182 cases on the H200 (M 1..257, K 320..8192, every activation mode) its worst
// error beyond one output rounding was 0.001 of the FP32 bound (K 2^-24 sum|x w|), so it keeps that bound.
bool takes_tensor_core_route(const LinearKernel* k, const LinearConfig& c, int64_t m) {
  const auto* ck = dynamic_cast<const cuda::CudaLinearKernel*>(k);
  if (ck == nullptr || c.family == Family::kInt8ScaledMM) return false;  // INT8 accumulates exactly
  if (ck->route() == cuda::Route::kAuto) {
    for (const MRoute& r : ck->m_routes(c)) {
      if (!r.contains(m)) continue;
      const LinearKernel* route = find_kernel(r.kernel);
      return route != nullptr && route != k && takes_tensor_core_route(route, c, m);
    }
    return false;
  }
  return ck->route() == cuda::Route::kCublasLt || ck->route() == cuda::Route::kDequantBf16 ||
         ck->route() == cuda::Route::kWgmma;
}


// Activations whose rows span several binades (one all-zero row, one tiny row) to reach every scale rule.
Tensor varied_activation(DType d, int64_t m, int64_t k, uint64_t seed) {
  Tensor x = random_normal(DType::kF32, {m, k}, seed, 1.0);
  for (int64_t r = 0; r < m; ++r) {
    // Row 1 all zeros, row 4 all negative zeros (codes keep the sign), row 2 tiny.
    const float f = r == 1 ? 0.0f : r == 4 ? -0.0f : (r == 2 ? 1e-6f : std::ldexp(1.0f, static_cast<int>(r % 9) - 4));
    for (int64_t c = 0; c < k; ++c) {
      float& v = x.data<float>()[r * k + c];
      v = r == 4 ? -0.0f : v * f;
    }
  }
  return to_dtype(x, d);
}

double ulp_of(DType d, double v) {
  const double a = std::fabs(v);
  int e = a > 0 ? std::ilogb(a) : -1000;
  switch (d) {
    case DType::kBF16: return std::ldexp(1.0, std::max(e, -126) - 7);
    case DType::kF16: return std::ldexp(1.0, std::max(e, -14) - 10);
    default: return std::ldexp(1.0, std::max(e, -126) - 23);
  }
}

// ---- Activation quantization --------------------------------------------------------------------------

struct QuantCase {
  cuda::ActQuantMode mode;
  QuantKey key;
  float scale_ub = 0.0f;
};

void check_act_quant(const QuantCase& qc, DType dtype, int64_t m, int64_t k, bool as_float) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(key_name(qc.key) + " " + std::string(name(dtype)) + " M=" + std::to_string(m) + " K=" +
               std::to_string(k) + (as_float ? " float codes" : " byte codes") + " seed=" + std::to_string(seed));
  const Tensor x = varied_activation(dtype, m, k, seed);
  QuantizeOptions opt;
  const float static_scale = 0.0123f;
  if (qc.mode == cuda::ActQuantMode::kStaticTensor) opt.static_scale = Tensor::scalar_f32(static_scale).reshape({1}).value();
  if (qc.scale_ub > 0) opt.scale_ub = qc.scale_ub;
  auto ref = quantize(x, qc.key, opt);
  ASSERT_TRUE(ref) << ref.message();

  const bool mx = qc.mode == cuda::ActQuantMode::kMx32;
  const int64_t ld_codes = (k + 31) / 32 * 32 + 32;  // one extra block of padding
  const int64_t groups = mx ? k / 32 : (k + 127) / 128;
  auto xd = cuda::to_device(x);
  ASSERT_TRUE(xd) << xd.message();
  auto codes = cuda::empty(as_float ? DType::kF32 : DType::kU8, {m, ld_codes});
  ASSERT_TRUE(codes) << codes.message();
  QL_ASSERT_OK(cuda::fill_bytes(*codes, 0xFF));
  const bool grouped = qc.mode == cuda::ActQuantMode::kDynamicGroup128 || mx;
  const int64_t nscales = grouped ? m * groups : (qc.mode == cuda::ActQuantMode::kDynamicToken ? m : 1);
  auto scales = cuda::empty(mx ? DType::kU8 : DType::kF32, {nscales});
  ASSERT_TRUE(scales) << scales.message();
  auto amax = cuda::empty(DType::kU8, {4});
  ASSERT_TRUE(amax) << amax.message();

  cuda::ActQuantArgs a;
  a.x = xd->raw();
  a.x_dtype = dtype;
  a.m = m;
  a.k = k;
  a.ld_x = k;
  a.mode = qc.mode;
  a.static_scale = static_scale;
  a.scale_ub = qc.scale_ub;
  a.codes = codes->raw();
  a.codes_as_float = as_float;
  a.ld_codes = ld_codes;
  a.scale = {scales->raw(), grouped ? groups : (qc.mode == cuda::ActQuantMode::kDynamicToken ? 1 : 0), grouped ? 1 : 0,
             false};
  a.amax_scratch = reinterpret_cast<uint32_t*>(amax->raw());
  QL_ASSERT_OK(cuda::launch_act_quant(a, cuda::current_stream()));
  auto got_codes = cuda::to_host(*codes);
  auto got_scales = cuda::to_host(*scales);
  ASSERT_TRUE(got_codes && got_scales);

  const uint8_t* rc = static_cast<const uint8_t*>(ref->data.raw());
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < ld_codes; ++c) {
      const uint32_t want = c < k ? rc[r * k + c] : 0u;
      bool ok;
      if (as_float) {
        const float g = got_codes->data<float>()[r * ld_codes + c];
        ok = g == g && static_cast<double>(g) == decode(DType::kF8E4M3, want) &&
             std::signbit(g) == std::signbit(decode(DType::kF8E4M3, want));
      } else {
        ok = got_codes->data<uint8_t>()[r * ld_codes + c] == want;
      }
      if (!ok && bad++ < 5) ADD_FAILURE() << "code (" << r << ", " << c << ") differs from the reference";
    }
  }
  EXPECT_EQ(bad, 0);
  for (int64_t i = 0; i < (qc.mode == cuda::ActQuantMode::kStaticTensor ? 1 : nscales); ++i) {
    if (mx) {
      EXPECT_EQ(got_scales->data<uint8_t>()[i], ref->scale.data<uint8_t>()[i]) << "scale " << i;
    } else {
      EXPECT_EQ(got_scales->data<float>()[i], ref->scale.data<float>()[i]) << "scale " << i;
    }
  }
}

TEST(CudaActQuant, CodesAndScalesAreBitIdenticalToTheReference) {
  QL_REQUIRE_SM90();
  const std::vector<QuantCase> cases = {
      {cuda::ActQuantMode::kStaticTensor, kFp8StaticTensorSym},
      {cuda::ActQuantMode::kDynamicTensor, kFp8DynamicTensorSym},
      {cuda::ActQuantMode::kDynamicToken, kFp8DynamicTokenSym},
      {cuda::ActQuantMode::kDynamicToken, kFp8DynamicTokenSym, 0.75f},
      {cuda::ActQuantMode::kDynamicGroup128, kFp8Dynamic128Sym},
      {cuda::ActQuantMode::kMx32, kMxfp8Dynamic},
  };
  for (const QuantCase& qc : cases) {
    for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
      // Odd K (unaligned rows: the scalar loads), rows longer than one pass of the per-token kernel (K >
      // 16384: 8 vectors per thread; K > 32768: the loop over passes), many short rows; M > 64 with K a
      // multiple of 8 runs the row kernel of the aligned BF16 layout (K = 40000: per-token past its one pass).
      for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 4096}, {7, 1000}, {17, 320}, {64, 4160}, {3, 33},
                          {5, 18016}, {2, 40000}, {8192, 136}, {300, 1000}, {257, 14336}, {65, 40000}}) {
        if (qc.mode == cuda::ActQuantMode::kMx32 && k % 32 != 0) continue;
        if (d == DType::kF32 && m * k > 1000000) continue;  // the f32 path is the same code; keep the test short
        check_act_quant(qc, d, m, k, false);
        check_act_quant(qc, d, m, k, true);
      }
    }
  }
}

// The INT8 quantizer: codes, scales and zero points bit-identical to the reference (int8_quant.cpp).
void check_int8_quant(cuda::Int8ActMode mode, const QuantKey& key, DType dtype, int64_t m, int64_t k) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(key_name(key) + " " + std::string(name(dtype)) + " M=" + std::to_string(m) + " K=" + std::to_string(k) +
               " seed=" + std::to_string(seed));
  Tensor xf = varied_activation(DType::kF32, m, k, seed);  // drawn in f32, converted once (to_dtype takes f32)
  if (m > 5) {  // a row of positive values only: its zero point is far from 0 (asymmetric)
    for (int64_t c = 0; c < k; ++c) xf.data<float>()[5 * k + c] = 100.0f + std::fabs(xf.data<float>()[5 * k + c]);
  }
  const Tensor x = to_dtype(xf, dtype);
  const bool is_static = mode == cuda::Int8ActMode::kStaticSym || mode == cuda::Int8ActMode::kStaticAsym;
  const float static_scale = 0.0123f;
  const int32_t static_zp = mode == cuda::Int8ActMode::kStaticAsym ? -7 : 0;
  QuantizeOptions opt;
  if (is_static) opt.static_scale = Tensor::scalar_f32(static_scale).reshape({1}).value();
  if (mode == cuda::Int8ActMode::kStaticAsym) {
    Tensor z = Tensor::empty(DType::kI32, {1});
    z.data<int32_t>()[0] = static_zp;
    opt.static_zero_point = z;
  }
  auto ref = quantize(x, key, opt);
  ASSERT_TRUE(ref) << ref.message();
  const int64_t ld_codes = (k + 31) / 32 * 32 + 32;
  auto xd = cuda::to_device(x);
  auto codes = cuda::empty(DType::kI8, {m, ld_codes});
  auto scales = cuda::empty(DType::kF32, {m});
  auto zps = cuda::empty(DType::kI32, {m});
  ASSERT_TRUE(xd && codes && scales && zps);
  QL_ASSERT_OK(cuda::fill_bytes(*codes, 0x5A));
  cuda::Int8QuantArgs a;
  a.x = xd->raw();
  a.x_dtype = dtype;
  a.m = m;
  a.k = k;
  a.ld_x = k;
  a.mode = mode;
  a.static_scale = static_scale;
  a.static_zero_point = static_zp;
  a.codes = static_cast<int8_t*>(codes->raw());
  a.ld_codes = ld_codes;
  a.scales = static_cast<float*>(scales->raw());
  a.zero_points = static_cast<int32_t*>(zps->raw());
  QL_ASSERT_OK(cuda::launch_int8_act_quant(a, cuda::current_stream()));
  auto got = cuda::to_host(*codes);
  auto got_s = cuda::to_host(*scales);
  auto got_z = cuda::to_host(*zps);
  ASSERT_TRUE(got && got_s && got_z);
  const int8_t* rc = static_cast<const int8_t*>(ref->data.raw());
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < ld_codes; ++c) {
      const int8_t want = c < k ? rc[r * k + c] : int8_t{0};
      const int8_t have = got->data<int8_t>()[r * ld_codes + c];
      if (have != want && bad++ < 5) {
        ADD_FAILURE() << "code (" << r << ", " << c << ") " << int{have} << ", reference " << int{want};
      }
    }
  }
  EXPECT_EQ(bad, 0);
  if (!is_static) {
    for (int64_t r = 0; r < m; ++r) {
      EXPECT_EQ(got_s->data<float>()[r], ref->scale.data<float>()[r]) << "scale of row " << r;
      if (mode == cuda::Int8ActMode::kDynamicTokenAsym) {
        EXPECT_EQ(got_z->data<int32_t>()[r], ref->zero_point.data<int32_t>()[r]) << "zero point of row " << r;
      }
    }
  }
}

TEST(CudaActQuant, Int8CodesScalesAndZeroPointsAreBitIdenticalToTheReference) {
  QL_REQUIRE_SM90();
  const std::vector<std::pair<cuda::Int8ActMode, QuantKey>> cases = {
      {cuda::Int8ActMode::kStaticSym, kInt8StaticTensorSym},
      {cuda::Int8ActMode::kStaticAsym, kInt8StaticTensorAsym},
      {cuda::Int8ActMode::kDynamicTokenSym, kInt8DynamicTokenSym},
      {cuda::Int8ActMode::kDynamicTokenAsym, kInt8DynamicTokenAsym},
  };
  for (const auto& [mode, key] : cases) {
    for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
      // M > 64 with K a multiple of 8: the row kernel of the aligned BF16 layout; {260, 9000} in F16 / F32
      // and {256, 40000} (a per-token row longer than one pass): the simple kernel (act_quant_simple.hpp).
      for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 4096}, {7, 1000}, {17, 320}, {3, 33}, {6, 18016},
                          {2, 40000}, {8192, 136}, {300, 1000}, {260, 9000}, {257, 4096}, {65, 8192},
                          {70, 20000}, {256, 40000}}) {
        if (d == DType::kF32 && m * k > 1000000) continue;
        check_int8_quant(mode, key, d, m, k);
      }
    }
  }
}

// The INT8 GEMM epilogue's vector kernel (N and the output stride multiples of 8: 8 outputs per thread) against
// its general kernel (taken when the output stride is not a multiple of 8) on the same INT32 sums: the same
// outputs bit for bit, for every output dtype, with and without zero-point correction, per-row or one
// activation scale and zero point, and a bias. Fresh random sums across the INT32 range (beyond 2^24, where
// their conversion matters), outputs poisoned.
TEST(CudaKernels, Int8EpilogueVectorKernelEqualsTheGeneralOne) {
  QL_REQUIRE_SM90();
  const uint64_t seed = cuda_test::fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t m = 37, n = 1048;
  Tensor acc = Tensor::empty(DType::kI32, {m, n});
  for (int64_t i = 0; i < m * n; ++i) {
    acc.data<int32_t>()[i] = static_cast<int32_t>(rng() >> (i % 3 == 0 ? 32 : 40)) * (i % 2 ? 1 : -1);
  }
  Tensor ws = random_normal(DType::kF32, {n}, seed + 1, 0.01);
  Tensor xs = random_normal(DType::kF32, {m}, seed + 2, 0.02);
  for (int64_t i = 0; i < m; ++i) xs.data<float>()[i] = std::fabs(xs.data<float>()[i]) + 1e-3f;
  Tensor colsum = Tensor::empty(DType::kI64, {n});
  for (int64_t i = 0; i < n; ++i) colsum.data<int64_t>()[i] = static_cast<int64_t>(rng() % 200000) - 100000;
  Tensor zps = Tensor::empty(DType::kI32, {m});
  for (int64_t i = 0; i < m; ++i) zps.data<int32_t>()[i] = static_cast<int32_t>(rng() % 255) - 128;
  Tensor bias = cuda_test::to_dtype(random_normal(DType::kF32, {n}, seed + 3, 0.5), DType::kBF16);
  auto acc_d = cuda::to_device(acc).value(), ws_d = cuda::to_device(ws).value(), xs_d = cuda::to_device(xs).value();
  auto colsum_d = cuda::to_device(colsum).value(), zps_d = cuda::to_device(zps).value();
  auto bias_d = cuda::to_device(bias).value();
  for (DType out : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int variant = 0; variant < 4; ++variant) {
      SCOPED_TRACE(std::string(name(out)) + " variant " + std::to_string(variant));
      cuda::Int8EpilogueArgs e;
      e.acc = acc_d.data<int32_t>();
      e.m = m;
      e.n = n;
      e.w_scale = ws_d.data<float>();
      e.out_dtype = out;
      if (variant % 2 == 0) {  // per-token scales and zero points, zero-point correction
        e.x_scale = xs_d.data<float>();
        e.x_scale_per_row = true;
        e.x_zero_point = zps_d.data<int32_t>();
        e.x_zero_point_per_row = true;
        e.w_colsum = colsum_d.data<int64_t>();
      } else {  // one scale, one zero point given by value
        e.x_scale_value = 0.0173f;
        e.x_zero_point_value = -7;
        e.w_colsum = variant == 1 ? colsum_d.data<int64_t>() : nullptr;
      }
      if (variant >= 2) {
        e.bias = bias_d.raw();
        e.bias_dtype = DType::kBF16;
      }
      Tensor got[2];
      for (int general = 0; general < 2; ++general) {
        const int64_t ld = general ? n + 4 : n + 8;  // + 4: not a multiple of 8, the general kernel
        auto o = cuda::empty(out, {m, ld}).value();
        ASSERT_TRUE(cuda::fill_bytes(o, 0xFF).is_ok());
        e.out = o.raw();
        e.ld_out = ld;
        ASSERT_TRUE(cuda::launch_int8_epilogue(e, cuda::current_stream()).is_ok());
        got[general] = cuda::to_host(o).value().narrow(1, 0, n).value().contiguous();
      }
      EXPECT_EQ(std::memcmp(got[0].raw(), got[1].raw(), static_cast<size_t>(got[0].nbytes())), 0);
    }
  }
}

// ---- Kernels vs the reference ---------------------------------------------------------------------------

struct KernelCase {
  const LinearKernel* kernel;
  Scheme scheme;
  int64_t m, n, k;
  DType in = DType::kBF16;
  DType out = DType::kBF16;
  std::optional<DType> bias;
  std::vector<int64_t> shards;
};

Scheme custom(Family f, QuantKey w, std::optional<QuantKey> a) { return Scheme{"custom", f, w, a, ""}; }

// Returns the worst (|got - ref| - 1 ULP) / (K 2^-24 sum|x w|) seen, for the log.
double check_kernel(const KernelCase& kc) {
  const uint64_t seed = fresh_seed();
  const std::string what = std::string(kc.kernel->name()) + " " +
                           (kc.scheme.name == std::string_view("custom") ? kc.scheme.weight_key.to_string()
                                                                         : std::string(kc.scheme.name)) +
                           " a=" + (kc.scheme.activation_key ? key_name(*kc.scheme.activation_key) : "dense") +
                           " M=" + std::to_string(kc.m) + " N=" + std::to_string(kc.n) + " K=" + std::to_string(kc.k) +
                           " in=" + std::string(name(kc.in)) + " out=" + std::string(name(kc.out)) +
                           (kc.bias ? " bias=" + std::string(name(*kc.bias)) : "") +
                           (kc.shards.empty() ? "" : " shards=" + std::to_string(kc.shards.size())) +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  MakeLayerOptions opt;
  opt.out_dtype = kc.out;
  opt.input_dtype = kc.in;
  opt.logical_widths = kc.shards;
  opt.input_min = -3.0f;
  opt.input_max = 3.0f;
  // Weights whose magnitude changes by powers of two across 128x128 blocks (up to 2^3 either way), so a
  // kernel that reads a block's scale from the wrong place cannot pass (uniform random weights give
  // nearly equal scales everywhere and hid exactly that once).
  Tensor w = random_normal(DType::kF32, {kc.n, kc.k}, seed, 0.05);
  for (int64_t r = 0; r < kc.n; ++r) {
    for (int64_t c = 0; c < kc.k; ++c) {
      w.data<float>()[r * kc.k + c] *= std::ldexp(1.0f, static_cast<int>(((r / 128) * 5 + (c / 128) * 3) % 7) - 3);
    }
  }
  auto layer = quantize_layer("cuda_test", kc.scheme, w, opt);
  EXPECT_TRUE(layer) << layer.message();
  if (!layer) return 0;
  cuda_test::relabel_mx_weight_scales(kc.scheme, *layer);
  LinearLayer mine = *layer;
  const LinearKernel& ref = *find_kernel("reference_" + std::string(family_name(kc.scheme.family)));
  EXPECT_TRUE(ref.process_weights_after_loading(*layer));
  const Verdict v = kc.kernel->can_implement(mine.config);
  EXPECT_TRUE(v) << v.reason;
  const Status ps = kc.kernel->process_weights_after_loading(mine);
  EXPECT_TRUE(ps.is_ok()) << ps.message();
  if (!ps.is_ok()) return 0;

  const Tensor x = to_dtype(random_normal(DType::kF32, {kc.m, kc.k}, seed + 1, 1.0), kc.in);
  const Tensor bias = kc.bias ? to_dtype(random_normal(DType::kF32, {kc.n}, seed + 2, 0.5), *kc.bias) : Tensor();
  Tensor ref_out = Tensor::empty(kc.out, {kc.m, kc.n});
  const Status rs = ref.apply(*layer, Activation::dense(x), kc.bias ? &bias : nullptr, ref_out);
  EXPECT_TRUE(rs.is_ok()) << rs.message();

  auto xd = cuda::to_device(x).value();
  Tensor bd = kc.bias ? cuda::to_device(bias).value() : Tensor();
  auto od = cuda::empty(kc.out, {kc.m, kc.n}).value();
  EXPECT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());  // NaN in every float dtype
  const Status as = kc.kernel->apply(mine, Activation::dense(xd), kc.bias ? &bd : nullptr, od);
  EXPECT_TRUE(as.is_ok()) << as.message();
  if (!as.is_ok()) return 0;
  auto got = cuda::to_host(od);
  EXPECT_TRUE(got) << got.message();
  if (!got) return 0;

  // sum_k |x w| with the operands the numerics define.
  const Tensor wd = reference::dequantized_weight(*layer).value();
  const Tensor xa = reference::effective_activation(*layer, Activation::dense(x)).value();
  const double* wp = wd.data<double>();
  const double* xp = xa.data<double>();
  const int64_t m = kc.m, n = kc.n, k = kc.k;
  // INT8 sums are exact (INT32) and the epilogue works in FP64: one output rounding away from the reference,
  // nothing more (measured: worst 0.000 over 43 cases on the H200).
  const double bound = kc.scheme.family == Family::kInt8ScaledMM
                           ? kInt8Bound
                           : std::max(kAccumFactor, takes_tensor_core_route(kc.kernel, mine.config, m)
                                                        ? kTensorCoreFp8Bound / (k * std::ldexp(1.0, -24))
                                                        : 0.0);
  std::vector<double> ratio(static_cast<size_t>(m * n), 0.0);
  std::vector<uint8_t> fail(static_cast<size_t>(m * n), 0);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += std::fabs(xp[i * k + c] * wp[j * k + c]);
      const double g = element_as_double(*got, i * n + j);
      const double r = element_as_double(ref_out, i * n + j);
      const double slack = std::fabs(g - r) - ulp_of(kc.out, std::max(std::fabs(g), std::fabs(r)));
      const double unit = k * std::ldexp(1.0, -24) * s;
      ratio[i * n + j] = slack <= 0 ? 0.0 : (unit > 0 ? slack / unit : HUGE_VAL);
      fail[i * n + j] = !(std::isfinite(g) && ratio[i * n + j] <= bound);
    }
  }
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    worst = std::max(worst, ratio[i]);
    if (fail[i] && bad++ < 5) {
      ADD_FAILURE() << "out(" << i / n << ", " << i % n << ") = " << element_as_double(*got, i)
                    << ", reference " << element_as_double(ref_out, i) << " (ratio " << ratio[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("[ check ] %-110s worst %.3f (bound %.3f)\n", what.c_str(), worst, bound);
  return worst;
}

// Route-forced copies of the production kernels, so each route is tested on every M.
const cuda::CudaLinearKernel kStreamFp8(Family::kFp8ScaledMM, "test_stream_fp8_scaled_mm", "", cuda::Route::kStream);
const cuda::CudaLinearKernel kStreamBlock(Family::kFp8BlockScaled, "test_stream_fp8_block_scaled", "",
                                          cuda::Route::kStream);

const std::vector<int64_t> kMs = {1, 2, 7, 16, 17, 64, 257};

TEST(CudaKernels, Fp8ScaledMMMatchesTheReference) {
  QL_REQUIRE_SM90();
  const Scheme tensor = *find_scheme("w8a8-fp8-tensor");
  const Scheme channel = *find_scheme("w8a8-fp8-channel");
  const Scheme dyn_tensor = custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTensorSym);
  const Scheme tensor_w_token_a = custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTokenSym);
  for (int64_t m : kMs) {
    for (const LinearKernel* kern : {static_cast<const LinearKernel*>(&cuda::kSm90Fp8ScaledMM),
                                     static_cast<const LinearKernel*>(&cuda::kCublasLtFp8ScaledMM),
                                     static_cast<const LinearKernel*>(&kStreamFp8)}) {
      check_kernel({kern, tensor, m, 256, 1024});
      check_kernel({kern, channel, m, 192, 4096, DType::kBF16, DType::kBF16, DType::kBF16});
      check_kernel({kern, dyn_tensor, m, 128, 1000, DType::kF16, DType::kF16, DType::kF32});
      check_kernel({kern, tensor_w_token_a, m, 96, 520, DType::kF32, DType::kF32, DType::kBF16});
      check_kernel({kern, tensor, m, 96, 320, DType::kBF16, DType::kBF16, std::nullopt, {32, 64}});
      if (kern != &cuda::kCublasLtFp8ScaledMM) check_kernel({kern, channel, m, 75, 999});  // odd N and K
    }
  }
  check_kernel({&cuda::kSm90Fp8ScaledMM, channel, 4096, 256, 1024});
  check_kernel({&cuda::kSm90Fp8ScaledMM, tensor, 4096, 128, 512, DType::kBF16, DType::kF32, DType::kF32});
}

// The own wgmma GEMM's route on the small shapes of every FP8 activation mode and on prefill M with N and
// K off every tile (128 x 128/192/256, 128-element K slices), each output dtype and bias dtype.
TEST(CudaKernels, Fp8WgmmaRouteMatchesTheReference) {
  QL_REQUIRE_SM90();
  const Scheme tensor = *find_scheme("w8a8-fp8-tensor");
  const Scheme channel = *find_scheme("w8a8-fp8-channel");
  const Scheme dyn_tensor = custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTensorSym);
  const Scheme tensor_w_token_a = custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTokenSym);
  const LinearKernel* kern = &cuda::kSm90Fp8ScaledMMWgmma;
  for (int64_t m : {1, 7, 17, 257}) {
    check_kernel({kern, tensor, m, 256, 1024});
    check_kernel({kern, channel, m, 75, 999});
    check_kernel({kern, dyn_tensor, m, 128, 1000, DType::kF16, DType::kF16, DType::kF32});
    check_kernel({kern, tensor_w_token_a, m, 96, 520, DType::kF32, DType::kF32, DType::kBF16});
    check_kernel({kern, tensor, m, 96, 320, DType::kBF16, DType::kBF16, std::nullopt, {32, 64}});
  }
  for (int64_t m : {256, 1000, 1024, 4096}) {
    check_kernel({kern, channel, m, m < 4096 ? 1000 : 200, 1000, DType::kBF16, DType::kBF16, DType::kBF16});
    check_kernel({kern, tensor, m, 328, m < 4096 ? 2056 : 520, DType::kBF16, DType::kF32, DType::kF32});
  }
  check_kernel({kern, channel, 1024, 4200, 384, DType::kF16, DType::kF16, DType::kF16});
}

// The FP8 mma.sync GEMM's route (the small-M route of sm90_fp8_scaled_mm) at every token tile (8, 16, 32, 64
// tokens, and the 64-token tiles beyond), N off the 64-row blocks, K off the 256-K stages, with split-K
// (small N, long K) and without, every FP8 activation mode, output and bias dtype.
TEST(CudaKernels, Fp8MmaRouteMatchesTheReference) {
  QL_REQUIRE_SM90();
  const Scheme tensor = *find_scheme("w8a8-fp8-tensor");
  const Scheme channel = *find_scheme("w8a8-fp8-channel");
  const Scheme dyn_tensor = custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTensorSym);
  const Scheme tensor_w_token_a = custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTokenSym);
  const LinearKernel* kern = &cuda::kSm90Fp8ScaledMMMma;
  for (int64_t m : {1, 2, 3, 7, 9, 16, 17, 33, 63, 64, 65, 257}) {
    check_kernel({kern, tensor, m, 256, 1024});
    check_kernel({kern, channel, m, 75, 999});
    check_kernel({kern, channel, m, 128, 8192, DType::kBF16, DType::kBF16, DType::kBF16});  // split K
    check_kernel({kern, dyn_tensor, m, 200, 1000, DType::kF16, DType::kF16, DType::kF32});
    check_kernel({kern, dyn_tensor, m, 200, 1000, DType::kBF16, DType::kF16, DType::kF32});
    check_kernel({kern, tensor_w_token_a, m, 96, 520, DType::kF32, DType::kF32, DType::kBF16});
    check_kernel({kern, tensor_w_token_a, m, 96, 520, DType::kBF16, DType::kF32, DType::kBF16});
    check_kernel({kern, tensor, m, 96, 320, DType::kBF16, DType::kBF16, std::nullopt, {32, 64}});
    check_kernel({kern, channel, m, 64, 1004});
  }
  check_kernel({kern, channel, 16, 4096, 4096});
}

// Every variant of the FP8 mma GEMM (token tiles, K split counts) on split and unsplit shapes: each within
// the tensor-core bound.
TEST(CudaKernels, Fp8MmaForcedVariantsMatchTheReference) {
  QL_REQUIRE_SM90();
  const Scheme tensor = *find_scheme("w8a8-fp8-tensor");
  const Scheme channel = *find_scheme("w8a8-fp8-channel");
  struct Variant {
    const char* name;
    cuda::Fp8MmaForce force;
  };
  const Variant variants[] = {
      {"unsplit", {1, 0}}, {"3 splits", {3, 0}}, {"8 splits", {8, 0}}, {"8 tokens", {0, 1}}, {"64 tokens", {0, 8}},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    cuda::fp8_mma_force(v.force);
    for (int64_t m : {1, 5, 16, 40}) {
      check_kernel({&cuda::kSm90Fp8ScaledMMMma, channel, m, 136, 8200, DType::kBF16, DType::kBF16, DType::kBF16});
      check_kernel({&cuda::kSm90Fp8ScaledMMMma, tensor, m, 200, 2000});
    }
  }
  cuda::fp8_mma_force({});
}

TEST(CudaKernels, Fp8BlockScaledMatchesTheReference) {
  QL_REQUIRE_SM90();
  const Scheme block = *find_scheme("w8a8-fp8-block");
  for (int64_t m : kMs) {
    for (const LinearKernel* kern : {static_cast<const LinearKernel*>(&cuda::kSm90Fp8BlockScaled),
                                     static_cast<const LinearKernel*>(&cuda::kCublasLtFp8BlockScaled),
                                     static_cast<const LinearKernel*>(&kStreamBlock)}) {
      check_kernel({kern, block, m, 256, 1024});
      check_kernel({kern, block, m, 384, 1536, DType::kF16, DType::kF16, DType::kF16});
      check_kernel({kern, block, m, 128, 2048, DType::kBF16, DType::kF32, DType::kBF16});
      check_kernel({kern, block, m, 1152, 384});  // 3 K blocks: cuBLASLt's padded scale rows (MiniLM's qkv)
      if (kern != &cuda::kCublasLtFp8BlockScaled) check_kernel({kern, block, m, 200, 1000});  // partial blocks
    }
  }
  check_kernel({&cuda::kSm90Fp8BlockScaled, block, 4096, 256, 1024});
}

// INT8: exact INT32 accumulation, so the only difference from the reference is the output rounding
// (kInt8Bound).
TEST(CudaKernels, Int8ScaledMMMatchesTheReference) {
  QL_REQUIRE_SM90();
  const Scheme dynamic = *find_scheme("w8a8-int8-dynamic");
  const Scheme stat = *find_scheme("w8a8-int8-static");
  const Scheme asym = *find_scheme("w8a8-int8-static-asym");
  const Scheme dyn_asym = custom(Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8DynamicTokenAsym);
  const Scheme tensor_w = custom(Family::kInt8ScaledMM, kInt8StaticTensorSym, kInt8DynamicTokenSym);
  const LinearKernel* kern = &cuda::kSm90Int8ScaledMM;
  for (int64_t m : kMs) {
    check_kernel({kern, dynamic, m, 256, 1024});
    check_kernel({kern, stat, m, 192, 4096, DType::kBF16, DType::kBF16, DType::kBF16});
    check_kernel({kern, asym, m, 128, 1000, DType::kF16, DType::kF16, DType::kF32});
    check_kernel({kern, dyn_asym, m, 96, 520, DType::kF32, DType::kF32, DType::kBF16});
    check_kernel({kern, tensor_w, m, 96, 320, DType::kBF16, DType::kBF16, std::nullopt, {32, 64}});
    check_kernel({kern, asym, m, 76, 999});  // K off every multiple
  }
  check_kernel({kern, dynamic, 4096, 256, 1024});
  // N % 4 != 0 is declined with its reason (the reference takes those layers).
  LinearConfig odd;
  odd.family = Family::kInt8ScaledMM;
  odd.weight_key = kInt8StaticChannelSym;
  odd.activation_key = kInt8DynamicTokenSym;
  odd.n = 75;
  odd.k = 64;
  const Verdict v = kern->can_implement(odd);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("multiple of 4"), std::string::npos) << v.reason;
}

// Pre-quantized activations (input_quant_key): quantized on the host by the reference quantizer, uploaded,
// applied; the output equals the dense path's bit for bit (the GPU quantizer is bit-identical to it).
TEST(CudaKernels, PreQuantizedActivationsGiveTheDensePathsOutput) {
  QL_REQUIRE_SM90();
  struct Case {
    const LinearKernel* kernel;
    Scheme scheme;
    int64_t n, k;
  };
  const std::vector<Case> cases = {
      {&cuda::kSm90Fp8ScaledMM, *find_scheme("w8a8-fp8-channel"), 256, 1000},
      {&cuda::kSm90Fp8ScaledMM, *find_scheme("w8a8-fp8-tensor"), 128, 512},
      {&cuda::kCublasLtFp8ScaledMM, custom(Family::kFp8ScaledMM, kFp8StaticTensorSym, kFp8DynamicTokenSym), 96, 320},
      {&cuda::kSm90Int8ScaledMM, *find_scheme("w8a8-int8-dynamic"), 256, 1000},
      {&cuda::kSm90Int8ScaledMM, *find_scheme("w8a8-int8-static-asym"), 128, 512},
      {&cuda::kSm90Int8ScaledMM, custom(Family::kInt8ScaledMM, kInt8StaticChannelSym, kInt8DynamicTokenAsym), 64, 96},
  };
  for (const Case& c : cases) {
    for (int64_t m : {1, 7, 64}) {
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(c.kernel->name()) + " " + c.scheme.weight_key.to_string() + " a=" +
                   key_name(*c.scheme.activation_key) + " M=" + std::to_string(m) + " seed=" + std::to_string(seed));
      MakeLayerOptions opt;
      opt.input_min = -3.0f;
      opt.input_max = 3.0f;
      auto layer = quantize_layer("prequant", c.scheme, random_normal(DType::kF32, {c.n, c.k}, seed, 0.05), opt);
      ASSERT_TRUE(layer) << layer.message();
      ASSERT_TRUE(c.kernel->process_weights_after_loading(*layer).is_ok());
      const std::optional<QuantKey> key = c.kernel->input_quant_key(layer->config);
      ASSERT_TRUE(key.has_value());
      EXPECT_TRUE(*key == *c.scheme.activation_key);

      const Tensor x = to_dtype(random_normal(DType::kF32, {m, c.k}, seed + 1, 1.0), DType::kBF16);
      QuantizeOptions qo;
      if (key->scale.is_static) {
        qo.static_scale = Tensor::scalar_f32(*std::max_element(layer->params.at("input_scale").data<float>(),
                                                               layer->params.at("input_scale").data<float>() +
                                                                   layer->params.at("input_scale").numel()))
                              .reshape({1})
                              .value();
        if (!key->symmetric) qo.static_zero_point = layer->params.at("input_zero_point");
      }
      auto q = quantize(x, *key, qo);
      ASSERT_TRUE(q) << q.message();
      QuantizedTensor qd = *q;
      qd.data = cuda::to_device(q->data).value();
      qd.scale = cuda::to_device(q->scale).value();
      if (q->zero_point.defined()) qd.zero_point = cuda::to_device(q->zero_point).value();

      auto xd = cuda::to_device(x).value();
      auto dense = cuda::empty(DType::kBF16, {m, c.n}).value();
      auto pre = cuda::empty(DType::kBF16, {m, c.n}).value();
      ASSERT_TRUE(cuda::fill_bytes(dense, 0xFF).is_ok());
      ASSERT_TRUE(cuda::fill_bytes(pre, 0xFF).is_ok());
      const Status s1 = c.kernel->apply(*layer, Activation::dense(xd), nullptr, dense);
      const Status s2 = c.kernel->apply(*layer, Activation::quantized(qd, DType::kBF16), nullptr, pre);
      ASSERT_TRUE(s1.is_ok()) << s1.message();
      ASSERT_TRUE(s2.is_ok()) << s2.message();
      const Tensor a = cuda::to_host(dense).value(), b = cuda::to_host(pre).value();
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())), 0);

      // A mismatching key is refused with both keys named.
      QuantizedTensor wrong = qd;
      wrong.key = key->dtype == DType::kI8 ? kFp8DynamicTokenSym : kInt8DynamicTokenSym;
      const Status s3 = c.kernel->apply(*layer, Activation::quantized(wrong, DType::kBF16), nullptr, pre);
      EXPECT_FALSE(s3.is_ok());
      EXPECT_NE(s3.message().find("input_quant_key"), std::string::npos) << s3.message();
    }
  }
}

const cuda::CudaLinearKernel kDequantMxfp8(Family::kMxfp8, "test_dequant_mxfp8", "", cuda::Route::kDequantBf16);
const cuda::CudaLinearKernel kDequantMxfp6(Family::kMxfp6, "test_dequant_mxfp6", "", cuda::Route::kDequantBf16);
const cuda::CudaLinearKernel kDequantMxfp4(Family::kMxfp4, "test_dequant_mxfp4", "", cuda::Route::kDequantBf16);
const cuda::CudaLinearKernel kDequantFp8WeightOnly(Family::kFp8WeightOnly, "test_dequant_fp8_weight_only", "",
                                                   cuda::Route::kDequantBf16);

// The BF16-GEMM route on every M (forced), and the hybrids at the M where they switch to it.
TEST(CudaKernels, DequantizingBf16RouteMatchesTheReference) {
  QL_REQUIRE_SM90();
  struct Case {
    const LinearKernel* forced;
    const LinearKernel* hybrid;
    Scheme scheme;
  };
  const std::vector<Case> cases = {
      {&kDequantMxfp8, &cuda::kSm90Mxfp8, *find_scheme("w8a16-mxfp8")},
      {&kDequantMxfp8, &cuda::kSm90Mxfp8, *find_scheme("w8a8-mxfp8")},
      {&kDequantMxfp6, &cuda::kSm90Mxfp6, *find_scheme("w6a16-mxfp6-e2m3")},
      {&kDequantMxfp6, &cuda::kSm90Mxfp6, *find_scheme("w6a16-mxfp6-e3m2")},
      {&kDequantMxfp4, &cuda::kSm90Mxfp4, *find_scheme("w4a16-mxfp4")},
      {&kDequantFp8WeightOnly, &cuda::kSm90Fp8WeightOnly, *find_scheme("w8a16-fp8")},
      {&kDequantFp8WeightOnly, &cuda::kSm90Fp8WeightOnly, custom(Family::kFp8WeightOnly, kFp8StaticTensorSym, std::nullopt)},
  };
  for (const Case& c : cases) {
    for (int64_t m : {1, 7, 17, 257}) {
      check_kernel({c.forced, c.scheme, m, 256, 1024});
      check_kernel({c.forced, c.scheme, m, 200, 512, DType::kBF16, DType::kBF16, DType::kF32});  // f32 bias: epilogue
    }
    check_kernel({c.hybrid, c.scheme, 17, 384, 2048, DType::kBF16, DType::kBF16, DType::kBF16});
    check_kernel({c.hybrid, c.scheme, 1024, 256, 1024});
  }
  check_kernel({&kDequantFp8WeightOnly, *find_scheme("w8a16-fp8"), 33, 96, 1000});  // K off 32 (padded rows)
  // Declines: F16 activations, 128x128 weight blocks.
  LinearConfig f16 = make_config(*find_scheme("w8a16-mxfp8"), 256, 1024, DType::kF16);
  EXPECT_FALSE(kDequantMxfp8.can_implement(f16).ok);
  LinearConfig block = make_config(custom(Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt), 256, 1024);
  EXPECT_FALSE(kDequantFp8WeightOnly.can_implement(block).ok);
}

TEST(CudaKernels, WeightOnlyAndMxStreamKernelsMatchTheReference) {
  QL_REQUIRE_SM90();
  const std::vector<Scheme> schemes = {
      *find_scheme("w8a16-fp8"),
      custom(Family::kFp8WeightOnly, kFp8StaticTensorSym, std::nullopt),
      custom(Family::kFp8WeightOnly, kFp8Static128BlockSym, std::nullopt),
      *find_scheme("w8a8-mxfp8"),
      *find_scheme("w8a16-mxfp8"),
      *find_scheme("w6a16-mxfp6-e2m3"),
      *find_scheme("w6a16-mxfp6-e3m2"),
      custom(Family::kMxfp6, kMxfp6E2M3Static, kMxfp8Dynamic),
      *find_scheme("w4a16-mxfp4"),
      custom(Family::kMxfp4, kMxfp4Static, kMxfp8Dynamic),
  };
  // The kernel selection picks for each case's config: the tensor-core decode kernels take BF16 activations
  // with K % 8 == 0, the hybrids the rest.
  const Platform gpu = Platform::cuda_device(0).value();
  for (const Scheme& s : schemes) {
    const auto pick = [&](int64_t n, int64_t k, DType in, DType out) {
      return select_kernel(make_config(s, n, k, in, out), gpu).value();
    };
    for (int64_t m : kMs) {
      check_kernel({pick(256, 1024, DType::kBF16, DType::kBF16), s, m, 256, 1024});
      check_kernel({pick(72, 2080, DType::kF32, DType::kF32), s, m, 72, 2080, DType::kF32, DType::kF32, DType::kF32});
      check_kernel({pick(33, 320, DType::kF16, DType::kF16), s, m, 33, 320, DType::kF16, DType::kF16, DType::kBF16});
      if (s.family == Family::kFp8WeightOnly) check_kernel({pick(75, 999, DType::kBF16, DType::kBF16), s, m, 75, 999});
    }
  }
}

// A few shapes for compute-sanitizer (run with --gtest_filter=CudaSanitizer.*).
TEST(CudaSanitizer, SmallShapesOfEveryRoute) {
  QL_REQUIRE_SM90();
  check_kernel({&cuda::kSm90Fp8ScaledMM, *find_scheme("w8a8-fp8-channel"), 3, 75, 999});
  check_kernel({&cuda::kCublasLtFp8ScaledMM, *find_scheme("w8a8-fp8-tensor"), 17, 64, 256});
  check_kernel({&cuda::kSm90Fp8BlockScaled, *find_scheme("w8a8-fp8-block"), 1, 200, 1000});
  check_kernel({&cuda::kCublasLtFp8BlockScaled, *find_scheme("w8a8-fp8-block"), 9, 256, 512});
  check_kernel({&cuda::kSm90Mxfp8Stream, *find_scheme("w8a8-mxfp8"), 5, 40, 2080, DType::kBF16, DType::kBF16,
                DType::kF32});
  check_kernel({&cuda::kSm90Mxfp6Stream, *find_scheme("w6a16-mxfp6-e3m2"), 9, 33, 96});
  check_kernel({&cuda::kSm90Mxfp4Stream, *find_scheme("w4a16-mxfp4"), 2, 65, 1024});
  // INT8 (cuBLASLt IMMA + FP64 epilogue), dynamic and static-asymmetric activations.
  check_kernel({&cuda::kSm90Int8ScaledMM, *find_scheme("w8a8-int8-dynamic"), 7, 36, 520});
  check_kernel({&cuda::kSm90Int8ScaledMM, *find_scheme("w8a8-int8-static-asym"), 17, 64, 96});
  // The hybrids above their switch points take the BF16 route (widen to BF16 + cuBLASLt).
  check_kernel({&cuda::kSm90Fp8WeightOnly, *find_scheme("w8a16-fp8"), 33, 72, 256});
  check_kernel({&cuda::kSm90Mxfp8, *find_scheme("w8a8-mxfp8"), 24, 40, 160});
  check_kernel({&cuda::kSm90Mxfp6, *find_scheme("w6a16-mxfp6-e2m3"), 19, 48, 96});
  check_kernel({&cuda::kSm90Mxfp4, *find_scheme("w4a16-mxfp4"), 9, 64, 64});
}

// ---- Processed weights: export, import (the weight cache) ------------------------------------------------

// A layer processed by a CUDA kernel, exported to host tensors and imported into an unprocessed copy, gives
// byte-identical outputs; a tampered layout field is refused with its name.
TEST(CudaKernels, ProcessedWeightsRoundTrip) {
  QL_REQUIRE_SM90();
  struct Case {
    const LinearKernel* kernel;
    const char* scheme;
    int64_t m, n, k;
  };
  const std::vector<Case> cases = {
      {&cuda::kSm90Fp8ScaledMM, "w8a8-fp8-tensor", 17, 64, 256},   {&cuda::kSm90Fp8ScaledMM, "w8a8-fp8-channel", 3, 75, 999},
      {&cuda::kSm90Fp8BlockScaled, "w8a8-fp8-block", 33, 256, 384}, {&cuda::kSm90Int8ScaledMM, "w8a8-int8-static-asym", 9, 64, 96},
      {&cuda::kSm90Fp8WeightOnly, "w8a16-fp8", 40, 72, 256},        {&cuda::kSm90Mxfp8, "w8a16-mxfp8", 24, 40, 160},
      {&cuda::kSm90Mxfp6, "w6a16-mxfp6-e3m2", 2, 48, 96},           {&cuda::kSm90Mxfp4, "w4a16-mxfp4", 9, 64, 64},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.kernel->name()) + " " + c.scheme);
    ASSERT_TRUE(c.kernel->supports_pre_processed_weights());
    MakeLayerOptions opt;
    auto layer = quantize_layer("cache_test", *find_scheme(c.scheme), random_normal(DType::kF32, {c.n, c.k}, 41, 0.05), opt);
    ASSERT_TRUE(layer) << layer.message();
    cuda_test::relabel_mx_weight_scales(*find_scheme(c.scheme), *layer);
    LinearLayer fresh = *layer;
    LinearLayer tampered = *layer;
    ASSERT_TRUE(c.kernel->process_weights_after_loading(*layer));
    auto exported = c.kernel->export_processed(*layer);
    ASSERT_TRUE(exported) << exported.message();
    const Status is = c.kernel->import_processed(fresh, *exported);
    ASSERT_TRUE(is) << is.message();

    const Tensor xd = cuda::to_device(to_dtype(random_normal(DType::kF32, {c.m, c.k}, 42, 1.0), DType::kBF16)).value();
    Tensor a = cuda::empty(DType::kBF16, {c.m, c.n}).value(), b = cuda::empty(DType::kBF16, {c.m, c.n}).value();
    ASSERT_TRUE(cuda::fill_bytes(a, 0xFF).is_ok() && cuda::fill_bytes(b, 0x7F).is_ok());  // different poisons
    const Status sa = c.kernel->apply(*layer, Activation::dense(xd), nullptr, a);
    const Status sb = c.kernel->apply(fresh, Activation::dense(xd), nullptr, b);
    ASSERT_TRUE(sa && sb) << (sa ? sb.message() : sa.message());
    const Tensor ha = cuda::to_host(a).value(), hb = cuda::to_host(b).value();
    EXPECT_EQ(std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())), 0);

    ProcessedWeights bad = *exported;
    for (auto& [name, t] : bad.tensors) {
      if (name == "meta") {
        t = t.clone();
        t.data<int64_t>()[2] += 32;  // row_bytes
      }
    }
    const Status ts = c.kernel->import_processed(tampered, bad);
    ASSERT_FALSE(ts);
    EXPECT_NE(ts.message().find("processed field row_bytes"), std::string::npos) << ts.message();
  }
}

// ---- Declining, with reasons -------------------------------------------------------------------------

TEST(CudaKernels, DeclineWithReasons) {
  // No GPU needed: platform and config checks.
  const Verdict cc = cuda::kSm90Fp8ScaledMM.is_supported(Platform::synthetic_cuda(80));
  EXPECT_FALSE(cc);
  EXPECT_NE(cc.reason.find("sm_90a"), std::string::npos) << cc.reason;
  EXPECT_FALSE(cuda::kSm90Fp8ScaledMM.is_supported(Platform::host_cpu()));
  EXPECT_TRUE(cuda::kSm90Fp8ScaledMM.is_supported(Platform::synthetic_cuda(90)));
  const Verdict odd = cuda::kCublasLtFp8ScaledMM.can_implement(make_config(*find_scheme("w8a8-fp8-tensor"), 200, 512));
  EXPECT_FALSE(odd);
  EXPECT_NE(odd.reason.find("N=200 is not a multiple of 16"), std::string::npos) << odd.reason;
  EXPECT_TRUE(cuda::kSm90Fp8ScaledMM.can_implement(make_config(*find_scheme("w8a8-fp8-tensor"), 200, 512)));
  const Verdict mx4act =
      cuda::kSm90Mxfp6Stream.can_implement(make_config(custom(Family::kMxfp6, kMxfp6E2M3Static, kMxfp4Dynamic), 64, 64));
  EXPECT_FALSE(mx4act);
  EXPECT_NE(mx4act.reason.find("not implemented on the GPU"), std::string::npos) << mx4act.reason;
  // On an sm_90 platform the CUDA kernels come first.
  EXPECT_EQ(select_kernel(make_config(*find_scheme("w4a16-mxfp4"), 64, 64), Platform::synthetic_cuda(90)).value()->name(),
            "sm90_mma_decode_mxfp4");
}

TEST(CudaKernels, ApplyRefusesHostTensors) {
  QL_REQUIRE_SM90();
  auto layer = quantize_layer("l", *find_scheme("w8a8-fp8-block"), random_normal(DType::kF32, {128, 256}, 1, 0.1)).value();
  ASSERT_TRUE(cuda::kCublasLtFp8BlockScaled.process_weights_after_loading(layer));
  const Tensor x = random_normal(DType::kBF16, {1, 256}, 2);
  Tensor host_out = Tensor::empty(DType::kBF16, {1, 128});
  const Status on_host = cuda::kCublasLtFp8BlockScaled.apply(layer, Activation::dense(x), nullptr, host_out);
  ASSERT_FALSE(on_host.is_ok());
  EXPECT_NE(on_host.message().find("is on cpu"), std::string::npos) << on_host.message();
}

// Device allocation failure is an error naming the size and the tensor, and leaves the device usable. (The
// failing cudaMalloc is an API error to compute-sanitizer: tools/gpu_sanitize.sh runs this test outside it.)
TEST(CudaMemory, AllocationFailureIsAnError) {
  QL_REQUIRE_SM90();
  const auto huge = cuda::empty(DType::kF32, {int64_t{1} << 40}, 0);  // 4 TiB
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.message().find("cudaMalloc(4398046511104 bytes for f32[1099511627776])"), std::string::npos)
      << huge.message();
  EXPECT_NE(huge.message().find("cudaErrorMemoryAllocation"), std::string::npos) << huge.message();
  EXPECT_TRUE(cuda::to_device(random_normal(DType::kF32, {3, 5}, 9)).is_ok());
}

TEST(CudaMemory, RoundTripAndStreams) {
  QL_REQUIRE_SM90();
  const Tensor h = random_normal(DType::kF32, {3, 5}, 9);
  auto d = cuda::to_device(h);
  ASSERT_TRUE(d) << d.message();
  EXPECT_EQ(d->device().kind, DeviceKind::kCuda);
  auto back = cuda::to_host(*d);
  ASSERT_TRUE(back) << back.message();
  EXPECT_EQ(std::memcmp(back->raw(), h.raw(), h.nbytes()), 0);
  EXPECT_FALSE(cuda::to_host(h).is_ok());
  const auto no_device = cuda::empty(DType::kF32, {1}, 999);
  ASSERT_FALSE(no_device.is_ok());
  EXPECT_NE(no_device.message().find("CUDA device 999 does not exist"), std::string::npos) << no_device.message();

  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  {
    cuda::StreamGuard g(s);
    EXPECT_EQ(cuda::current_stream(), s);
    auto again = cuda::to_host(*d);
    ASSERT_TRUE(again);
  }
  EXPECT_EQ(cuda::current_stream(), cudaStreamPerThread);
  cudaStreamDestroy(s);
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
