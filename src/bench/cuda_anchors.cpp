// CudaAnchor (cuda_anchors.hpp). Compiled only with the CUDA backend; anchors_stub.cpp stands in without it.
#include "bench/cuda_anchors.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/random.hpp"

namespace qlinear::bench {

namespace {

// Random bytes for a quantized operand (timing does not depend on the values, power draw a little does);
// E4M3 NaN codes (0x7F, 0xFF) replaced.
Tensor random_codes(DType dtype, Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw());
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = static_cast<uint8_t>(s);
    if (dtype == DType::kF8E4M3 && (p[i] & 0x7F) == 0x7F) p[i] = 0x3C;
  }
  return t;
}

Tensor f32_filled(Shape shape, float v) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  std::fill(t.data<float>(), t.data<float>() + t.numel(), v);
  return t;
}

enum class Kind { kBf16, kFp8Scalar, kFp8OuterVec, kFp8Block, kInt8 };

class CudaAnchorImpl final : public CudaAnchor {
 public:
  CudaAnchorImpl(Kind kind, std::string name, int64_t n, int64_t k, DeviceTimer& timer)
      : kind_(kind), name_(std::move(name)), n_(n), k_(k), timer_(timer) {}
  ~CudaAnchorImpl() override {
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  Status init() {
    const DType wt = kind_ == Kind::kBf16 ? DType::kBF16 : kind_ == Kind::kInt8 ? DType::kI8 : DType::kF8E4M3;
    // The bf16 anchor's weights are drawn as qlinear bench draws the layer it quantizes; the vendor's are
    // random valid codes. Drawing a model's largest projection on the host takes seconds, and timing does
    // not depend on the values, so a block of kBlockRows rows is drawn and repeated down the rows.
    constexpr int64_t kBlockRows = 512;
    const int64_t rows = n_ % kBlockRows == 0 ? std::min(n_, kBlockRows) : n_;
    const Tensor host = kind_ == Kind::kBf16 ? random_normal(DType::kBF16, {rows, k_}, 7, 0.02)
                                              : random_codes(wt, {rows, k_}, 7);
    const int copies = timer_.device_copies_for(host.nbytes() * (n_ / rows));
    for (int i = 0; i < copies; ++i) {
      QL_ASSIGN_OR_RETURN(Tensor w, cuda::empty(wt, {n_, k_}));
      for (int64_t r = 0; r < n_; r += rows) {
        QL_CUDA_CHECK(cudaMemcpy(static_cast<char*>(w.raw()) + r / rows * host.nbytes(), host.raw(),
                                 static_cast<size_t>(host.nbytes()), cudaMemcpyHostToDevice));
      }
      weights_.push_back(std::move(w));
    }
    if (kind_ == Kind::kFp8Block) {
      // [ceil(N/128), round_up(ceil(K/128), 4)] (cublaslt_gemm.hpp: rows padded to 16 bytes).
      const int64_t kb = (k_ + 127) / 128;
      QL_ASSIGN_OR_RETURN(w_scale_, cuda::to_device(f32_filled({(n_ + 127) / 128, (kb + 3) / 4 * 4}, 0.01f)));
    } else if (kind_ != Kind::kBf16 && kind_ != Kind::kInt8) {
      QL_ASSIGN_OR_RETURN(w_scale_, cuda::to_device(f32_filled({n_}, 0.01f)));
    }
    if (kind_ == Kind::kBf16) {
      if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) return Status::error("cublasCreate failed");
      // PyTorch hands cuBLAS a 32 MiB workspace on Hopper (CUBLAS_WORKSPACE_CONFIG's default :4096:8); without
      // one cuBLAS keeps a smaller default and picks other kernels at large M.
      QL_ASSIGN_OR_RETURN(workspace_, cuda::empty(DType::kU8, {kTorchWorkspaceBytes}));
      if (cublasSetWorkspace(blas_, workspace_.raw(), kTorchWorkspaceBytes) != CUBLAS_STATUS_SUCCESS) {
        return Status::error("cublasSetWorkspace (32 MiB) failed");
      }
    }
    return Status::ok();
  }

  const std::string& name() const override { return name_; }

  Result<Timing> time(int64_t m, int reps) override {
    const int64_t kb = (k_ + 127) / 128;
    Tensor x, x_scale, out;
    if (kind_ == Kind::kBf16) {
      QL_ASSIGN_OR_RETURN(x, cuda::to_device(random_rows(DType::kBF16, m, k_, 11, 1.0)));
    } else {
      QL_ASSIGN_OR_RETURN(x, cuda::to_device(random_codes(kind_ == Kind::kInt8 ? DType::kI8 : DType::kF8E4M3, {m, k_}, 11)));
      QL_ASSIGN_OR_RETURN(x_scale, cuda::to_device(f32_filled({std::max<int64_t>(m * kb, 1)}, 0.02f)));
    }
    QL_ASSIGN_OR_RETURN(out, cuda::empty(kind_ == Kind::kInt8 ? DType::kI32 : DType::kBF16, {m, n_}));
    TimedCall call;
    if (kind_ == Kind::kBf16) {
      // y[M, N] = x[M, K] W[N, K]^T, column-major: y^T[N, M] = W^T(op T of the [K, N] view) x^T.
      call = [&](int rep) -> Status {
        const float alpha = 1.0f, beta = 0.0f;
        cublasSetStream(blas_, cuda::current_stream());
        const cublasStatus_t st = cublasGemmEx(
            blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_), static_cast<int>(m), static_cast<int>(k_), &alpha,
            weights_[rep % weights_.size()].raw(), CUDA_R_16BF, static_cast<int>(k_), x.raw(), CUDA_R_16BF,
            static_cast<int>(k_), &beta, out.raw(), CUDA_R_16BF, static_cast<int>(n_), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
          return Status::error("cublasGemmEx (BF16, M=" + std::to_string(m) + " N=" + std::to_string(n_) +
                               " K=" + std::to_string(k_) + ") failed: status " + std::to_string(static_cast<int>(st)));
        }
        return Status::ok();
      };
    } else {
      cuda::LtGemm g;
      g.ab_dtype = kind_ == Kind::kInt8 ? DType::kI8 : DType::kF8E4M3;
      g.m = m;
      g.n = n_;
      g.k = k_;
      g.ld_w = k_;
      g.ld_x = k_;
      g.x = x.raw();
      g.out = out.raw();
      g.out_dtype = kind_ == Kind::kInt8 ? DType::kI32 : DType::kBF16;
      g.use_table = false;  // the vendor's own choice (cuBLASLt's heuristic), as torch._scaled_mm makes it
      if (kind_ != Kind::kInt8) {
        g.scale_mode = kind_ == Kind::kFp8Scalar    ? cuda::LtScaleMode::kScalar
                       : kind_ == Kind::kFp8Block ? cuda::LtScaleMode::kBlock
                                                  : cuda::LtScaleMode::kOuterVec;
        g.w_scale = w_scale_.data<float>();
        g.x_scale = x_scale.data<float>();
      }
      call = [this, g](int rep) mutable -> Status {
        g.w = weights_[rep % weights_.size()].raw();
        return cuda::lt_gemm(g, cuda::current_stream());
      };
    }
    return timer_.time(call, reps, static_cast<int>(weights_.size()));
  }

 private:
  Kind kind_;
  std::string name_;
  int64_t n_, k_;
  DeviceTimer& timer_;
  std::vector<Tensor> weights_;
  Tensor w_scale_;
  static constexpr int64_t kTorchWorkspaceBytes = int64_t{32} << 20;
  Tensor workspace_;
  cublasHandle_t blas_ = nullptr;
};

// The read floor (cuda_anchors.hpp): copies of the layer's bytes rotated as its weights are.
class ReadFloorAnchor final : public CudaAnchor {
 public:
  ReadFloorAnchor(int64_t weight_bytes, int64_t k, DeviceTimer& timer)
      : weight_bytes_(weight_bytes), k_(k), timer_(timer) {}
  const std::string& name() const override { return name_; }
  Result<Timing> time(int64_t m, int reps) override {
    const int64_t bytes = (weight_bytes_ + 2 * m * k_ + 15) / 16 * 16;
    const int copies = timer_.device_copies_for(bytes);
    std::vector<Tensor> bufs;
    for (int i = 0; i < copies; ++i) {
      QL_ASSIGN_OR_RETURN(Tensor b, cuda::empty(DType::kU8, {bytes}));
      QL_CUDA_CHECK(cudaMemset(b.raw(), i + 1, static_cast<size_t>(bytes)));
      bufs.push_back(std::move(b));
    }
    QL_ASSIGN_OR_RETURN(Tensor sink, cuda::empty(DType::kF32, {1}));
    return timer_.time(
        [&](int rep) {
          return cuda::dram_read_floor(bufs[rep % copies].raw(), static_cast<size_t>(bytes), sink.data<float>(),
                                       cuda::current_stream());
        },
        reps, copies);
  }

 private:
  const std::string name_ = "dram_read";
  int64_t weight_bytes_, k_;
  DeviceTimer& timer_;
};

}  // namespace

namespace {

struct Resolved {
  Kind kind;
  std::string name;
};

Result<Resolved> resolve(const std::string& kind, const Scheme& scheme, int64_t k) {
  if (kind == "bf16") return Resolved{Kind::kBf16, "cublas_bf16"};
  if (kind != "vendor") return Status::error("no CUDA anchor named '" + kind + "' (bf16, vendor)");
  switch (scheme.family) {
    case Family::kFp8ScaledMM:
      if (scheme.weight_key.scale.group.is_per_tensor() && scheme.activation_key &&
          scheme.activation_key->scale.group.is_per_tensor()) {
        return Resolved{Kind::kFp8Scalar, "cublaslt_fp8_tensor"};
      }
      return Resolved{Kind::kFp8OuterVec, "cublaslt_fp8_rowwise"};
    case Family::kFp8BlockScaled:
      return Resolved{Kind::kFp8Block, "cublaslt_fp8_block128"};
    case Family::kInt8ScaledMM:
      if (k % 4 != 0) return Status::error("cuBLASLt INT8 needs K a multiple of 4, K=" + std::to_string(k));
      return Resolved{Kind::kInt8, "cublaslt_int8"};
    case Family::kFp8WeightOnly:
    case Family::kMxfp8:
      return Resolved{Kind::kFp8OuterVec, "cublaslt_fp8_rowwise"};
    default:
      return Status::error(std::string("no vendor GEMM for ") + std::string(scheme.name) +
                           " on sm_90: cuBLASLt's MX/NVFP4 block-scale modes need sm_100 (Blackwell)");
  }
}

}  // namespace

Result<std::string> CudaAnchor::name_for(const std::string& kind, const Scheme& scheme, int64_t k) {
  QL_ASSIGN_OR_RETURN(Resolved r, resolve(kind, scheme, k));
  return r.name;
}

Result<std::unique_ptr<CudaAnchor>> CudaAnchor::create_read_floor(int64_t weight_bytes, int64_t k,
                                                                  DeviceTimer& timer) {
  return std::unique_ptr<CudaAnchor>(std::make_unique<ReadFloorAnchor>(weight_bytes, k, timer));
}

Result<std::unique_ptr<CudaAnchor>> CudaAnchor::create(const std::string& kind, const Scheme& scheme, int64_t n,
                                                       int64_t k, DeviceTimer& timer) {
  QL_ASSIGN_OR_RETURN(Resolved r, resolve(kind, scheme, k));
  auto a = std::make_unique<CudaAnchorImpl>(r.kind, r.name, n, k, timer);
  QL_RETURN_IF_ERROR(a->init());
  return std::unique_ptr<CudaAnchor>(std::move(a));
}

}  // namespace qlinear::bench
