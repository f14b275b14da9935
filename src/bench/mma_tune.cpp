// tune_mma_decode (mma_tune.hpp). Compiled only with the CUDA backend.
#include "bench/mma_tune.hpp"

#include <random>

#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_decode_kernels.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::bench {

namespace {

// The decode kernel of a weight-only scheme's family, or null.
const cuda::MmaDecodeLinearKernel* decode_kernel(Family f) {
  switch (f) {
    case Family::kFp8WeightOnly: return &cuda::kSm90MmaDecodeFp8WeightOnly;
    case Family::kMxfp8: return &cuda::kSm90MmaDecodeMxfp8;
    case Family::kMxfp6: return &cuda::kSm90MmaDecodeMxfp6;
    case Family::kMxfp4: return &cuda::kSm90MmaDecodeMxfp4;
    case Family::kNvfp4: return &cuda::kSm90MmaDecodeNvfp4;
    default: return nullptr;
  }
}

cuda::MmaCode code_of(DType d) {
  switch (d) {
    case DType::kF6E2M3: return cuda::MmaCode::kE2M3;
    case DType::kF6E3M2: return cuda::MmaCode::kE3M2;
    case DType::kF4E2M1: return cuda::MmaCode::kE2M1;
    default: return cuda::MmaCode::kE4M3;
  }
}

// Random bytes in [lo, hi] (E4M3 NaN codes replaced): timing does not depend on the values.
Tensor random_bytes(DType dtype, Shape shape, uint64_t seed, uint8_t lo, uint8_t hi, bool e4m3) {
  Tensor t = Tensor::empty(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.raw());
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    uint8_t b = static_cast<uint8_t>(lo + rng() % (static_cast<unsigned>(hi - lo) + 1));
    if (e4m3 && (b & 0x7F) == 0x7F) b = 0x7E;
    p[i] = b;
  }
  return t;
}

// A checkpoint layer of random valid codes and scales (as CudaMmaDecodeBench makes them): E8M0 scales in
// 2^-9 .. 2^-1, which fold into the BF16 weights for every code, so the layer runs the routes being tuned.
LinearLayer synthetic_layer(const Scheme& s, int64_t n, int64_t k) {
  LinearLayer l;
  l.name = "tune";
  l.config = make_config(s, n, k);
  const DType wd = s.weight_key.dtype;
  const bool packed = wd == DType::kF6E2M3 || wd == DType::kF6E3M2 || wd == DType::kF4E2M1;
  l.params["weight"] = random_bytes(packed ? DType::kU8 : DType::kF8E4M3, {n, storage_bytes(wd, k)}, 1, 0, 255,
                                    wd == DType::kF8E4M3);
  if (s.weight_key.scale.dtype == DType::kE8M0) {
    l.params["weight_scale"] = random_bytes(DType::kE8M0, {n, k / 32}, 2, 118, 126, false);
  } else if (s.weight_key.scale.dtype == DType::kF8E4M3) {
    l.params["weight_scale"] = random_bytes(DType::kF8E4M3, {n, k / 16}, 3, 0x20, 0x50, true);
    Tensor g = Tensor::empty(DType::kF32, {1});
    g.data<float>()[0] = 448.0f * 6.0f;
    l.params["weight_global_scale"] = g;
  } else {
    Tensor sc = Tensor::empty(DType::kF32, {n, 1});
    for (int64_t i = 0; i < n; ++i) sc.data<float>()[i] = 1e-3f * static_cast<float>(1 + i % 7);
    l.params["weight_scale"] = sc;
  }
  return l;
}

// Restores the built-in choices however the measurement ends.
struct ForceReset {
  ~ForceReset() { cuda::mma_decode_force({}); }
};

}  // namespace

Result<std::vector<MmaTuneResult>> tune_mma_decode(const MmaTuneOptions& opt, DeviceTimer& timer,
                                                   const std::function<void(const MmaTuneResult&)>& progress) {
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  QL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  ForceReset reset;
  std::vector<MmaTuneResult> results;
  for (const std::string& name : opt.schemes) {
    const Scheme* s = find_scheme(name);
    const cuda::MmaDecodeLinearKernel* kernel = s != nullptr ? decode_kernel(s->family) : nullptr;
    if (s == nullptr || kernel == nullptr || s->activation_key) {
      return Status::error("scheme '" + name + "' is not a weight-only scheme of the tensor-core decode kernels");
    }
    for (const LayerShape& shape : opt.layers) {
      const std::string what = shape.name + " " + name;
      LinearLayer layer = synthetic_layer(*s, shape.n, shape.k);
      const Verdict v = kernel->can_implement(layer.config);
      if (!v.ok) return Status::error(what + ": " + v.reason);
      if (Status st = kernel->process_weights_after_loading(layer); !st.is_ok()) {
        return Status::error(what + ": " + st.message());
      }
      layer.params.clear();  // the host copies are not needed for timing
      if (!cuda::mma_decode_folds_scales(layer)) return Status::error(what + ": the block scales do not fold");
      for (const int64_t m : opt.ms) {
        const std::string at = what + " M=" + std::to_string(m);
        QL_ASSIGN_OR_RETURN(Tensor x, cuda::empty(DType::kBF16, {m, shape.k}));
        QL_RETURN_IF_ERROR(cuda::fill_bytes(x, 0x3C));  // BF16 0x3C3C: timing does not depend on the values
        QL_ASSIGN_OR_RETURN(Tensor y, cuda::empty(DType::kBF16, {m, shape.n}));
        const Activation act = Activation::dense(x);
        // One candidate's median time, or why it did not run.
        auto time_of = [&](const cuda::MmaDecodeTunedEntry& c) -> Result<double> {
          cuda::mma_decode_force(cuda::mma_decode_force_of(c));
          auto t = timer.time([&](int) { return kernel->apply(layer, act, nullptr, y); }, opt.reps);
          cuda::mma_decode_force({});
          if (!t) return Status::error(cuda::describe(c) + ": " + t.message());
          return t->median_ms * 1000.0;
        };
        MmaTuneResult r;
        r.layer = shape;
        r.scheme = name;
        r.m = m;
        r.device_name = prop.name;
        const cuda::MmaDecodeTunedEntry rule{"", code_of(s->weight_key.dtype), shape.n, shape.k, m,
                                             cuda::MmaDecodeRoute::kRule};
        cuda::mma_decode_force(cuda::mma_decode_force_of(rule));  // the built-in rules' choice, not the table's
        r.rule_route = cuda::mma_decode_route_for(layer, m);
        cuda::mma_decode_force({});
        auto rule_us = time_of(rule);
        if (!rule_us) return Status::error(at + ": " + rule_us.message());
        r.rule_us = *rule_us;
        r.best_us = 1e30;
        // A candidate that fails is skipped and named (as lt_tune skips what cuBLASLt refuses): one bad
        // candidate should not cost the rest of a long run.
        for (cuda::MmaDecodeTunedEntry c : cuda::mma_decode_candidates(m)) {
          c.code = rule.code == cuda::MmaCode::kE3M2 ? cuda::MmaCode::kE2M3 : rule.code;  // FP6 keyed E2M3
          c.n = shape.n;
          c.k = shape.k;
          auto us = time_of(c);
          if (!us) {
            r.failed.push_back(us.message());
          } else if (*us < r.best_us) {
            r.best_us = *us;
            r.best = c;
          }
        }
        if (r.best_us >= 1e30) return Status::error(at + ": no candidate ran (" + r.failed.front() + ")");
        results.push_back(r);
        if (progress) progress(results.back());
      }
    }
  }
  return results;
}

}  // namespace qlinear::bench
