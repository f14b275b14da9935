// tune_cublaslt (lt_tune.hpp). Compiled only with the CUDA backend.
#include "bench/lt_tune.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "qlinear/cuda.hpp"

namespace qlinear::bench {

namespace {

// Random bytes (E4M3 NaN codes replaced): timing does not depend on the values.
Tensor random_codes(DType d, int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::empty(d, {rows, cols});
  auto* p = static_cast<uint8_t*>(t.raw());
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = static_cast<uint8_t>(s);
    if (d == DType::kF8E4M3 && (p[i] & 0x7F) == 0x7F) p[i] = 0x3C;
  }
  return t;
}

Tensor f32_filled(int64_t n, float v) {
  Tensor t = Tensor::empty(DType::kF32, {n});
  std::fill(t.data<float>(), t.data<float>() + n, v);
  return t;
}

Result<double> median_us(DeviceTimer& timer, const cuda::LtGemm& g, int reps) {
  const cuda::Stream s = cuda::current_stream();
  QL_ASSIGN_OR_RETURN(Timing t, timer.time([&](int) { return cuda::lt_gemm(g, s); }, reps));
  return t.median_ms * 1000.0;
}

// One layer's operands on the device, for every M up to the largest.
struct Operands {
  Tensor w, w_scale, x, x_scale, out;
};

Result<Operands> make_operands(cuda::LtKind kind, const LayerShape& l, int64_t max_m) {
  const DType ab = kind == cuda::LtKind::kInt8 ? DType::kI8 : DType::kF8E4M3;
  Operands o;
  QL_ASSIGN_OR_RETURN(o.w, cuda::to_device(random_codes(ab, l.n, l.k, 7)));
  QL_ASSIGN_OR_RETURN(o.x, cuda::to_device(random_codes(ab, max_m, l.k, 11)));
  const int64_t kb = (l.k + 127) / 128;
  if (kind == cuda::LtKind::kFp8Block) {
    QL_ASSIGN_OR_RETURN(o.w_scale, cuda::to_device(f32_filled((l.n + 127) / 128 * ((kb + 3) / 4 * 4), 0.01f)));
    QL_ASSIGN_OR_RETURN(o.x_scale, cuda::to_device(f32_filled(max_m * kb, 0.02f)));
  } else {
    QL_ASSIGN_OR_RETURN(o.w_scale, cuda::to_device(f32_filled(l.n, 0.01f)));
    QL_ASSIGN_OR_RETURN(o.x_scale, cuda::to_device(f32_filled(max_m, 0.02f)));
  }
  QL_ASSIGN_OR_RETURN(o.out, cuda::empty(kind == cuda::LtKind::kInt8 ? DType::kI32 : DType::kBF16, {max_m, l.n}));
  return o;
}

cuda::LtGemm gemm_for(cuda::LtKind kind, const LayerShape& l, int64_t m, Operands& o) {
  cuda::LtGemm g;
  g.ab_dtype = kind == cuda::LtKind::kInt8 ? DType::kI8 : DType::kF8E4M3;
  g.w = o.w.raw();
  g.ld_w = l.k;
  g.x = o.x.raw();
  g.ld_x = l.k;
  g.m = m;
  g.n = l.n;
  g.k = l.k;
  g.out = o.out.raw();
  g.out_dtype = kind == cuda::LtKind::kInt8 ? DType::kI32 : DType::kBF16;
  g.use_table = false;
  g.w_scale = static_cast<const float*>(o.w_scale.raw());
  g.x_scale = static_cast<const float*>(o.x_scale.raw());
  switch (kind) {
    case cuda::LtKind::kFp8Tensor: g.scale_mode = cuda::LtScaleMode::kScalar; break;
    case cuda::LtKind::kFp8Rowwise: g.scale_mode = cuda::LtScaleMode::kOuterVec; break;
    case cuda::LtKind::kFp8Block: g.scale_mode = cuda::LtScaleMode::kBlock; break;
    case cuda::LtKind::kInt8: g.scale_mode = cuda::LtScaleMode::kNone; break;
  }
  return g;
}

}  // namespace

Result<std::vector<LtTuneResult>> tune_cublaslt(const LtTuneOptions& opt, DeviceTimer& timer,
                                                const std::function<void(const LtTuneResult&)>& progress) {
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  QL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const int64_t max_m = *std::max_element(opt.ms.begin(), opt.ms.end());
  std::vector<LtTuneResult> results;
  for (const cuda::LtKind kind : opt.kinds) {
    for (const LayerShape& l : opt.layers) {
      QL_ASSIGN_OR_RETURN(Operands o, make_operands(kind, l, max_m));
      for (const int64_t m0 : opt.ms) {
        // cuBLASLt's block-scaled mode runs only M that are multiples of 16 (route_cublaslt_fp8.cpp).
        const int64_t m = kind == cuda::LtKind::kFp8Block ? (m0 + 15) / 16 * 16 : m0;
        const std::string what = std::string(cuda::lt_kind_name(kind)) + " " + l.name + " M=" + std::to_string(m);
        cuda::LtGemm g = gemm_for(kind, l, m, o);
        auto cands = cuda::lt_candidates(g, opt.candidates, opt.max_workspace);
        if (!cands) return Status::error(what + ": " + cands.message());
        if (cands->empty()) return Status::error(what + ": cuBLASLt has no algorithm");
        LtTuneResult r;
        r.kind = kind;
        r.layer = l;
        r.m = m0;
        r.candidates = static_cast<int>(cands->size());
        r.device_name = prop.name;
        QL_ASSIGN_OR_RETURN(r.heuristic_us, median_us(timer, g, opt.reps));
        // Round 1: every candidate, few repetitions (a candidate cuBLASLt then refuses is skipped).
        std::vector<double> quick(cands->size(), 1e30);
        for (size_t i = 0; i < cands->size(); ++i) {
          cuda::LtGemm gi = g;
          gi.algo = &(*cands)[i];
          auto us = median_us(timer, gi, opt.quick_reps);
          if (us) quick[i] = *us;
        }
        std::vector<size_t> order(cands->size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return quick[a] < quick[b]; });
        // Round 2: the finalists with the full count; the heuristic's first is always among them.
        std::vector<size_t> finalists(order.begin(), order.begin() + std::min<size_t>(opt.finalists, order.size()));
        if (std::find(finalists.begin(), finalists.end(), size_t{0}) == finalists.end()) finalists.push_back(0);
        r.best_us = 1e30;
        for (const size_t i : finalists) {
          cuda::LtGemm gi = g;
          gi.algo = &(*cands)[i];
          auto us = median_us(timer, gi, opt.reps);
          if (us && *us < r.best_us) {
            r.best_us = *us;
            r.best_rank = static_cast<int>(i);
          }
        }
        if (r.best_us >= 1e30) return Status::error(what + ": no candidate ran");
        r.entry = cuda::LtTunedEntry{nullptr, kind, l.n, l.k, m0, (*cands)[static_cast<size_t>(r.best_rank)]};
        results.push_back(r);
        if (progress) progress(results.back());
      }
    }
  }
  return results;
}

}  // namespace qlinear::bench
