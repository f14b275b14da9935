// cuBLASLt plumbing: per-thread handles, descriptors, a per-shape algorithm cache.
#include "backends/cuda/cublaslt_gemm.hpp"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

namespace qlinear::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

Status lt_check(cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::error(std::string(call) + " failed: " + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) +
                       ")");
}
#define QL_LT_CHECK(call) QL_RETURN_IF_ERROR(lt_check((call), #call))

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kI8: return CUDA_R_8I;
    case DType::kI32: return CUDA_R_32I;
    default: return CUDA_R_32F;
  }
}

// One handle per thread and device (cuBLASLt handles are cheap; this avoids sharing across threads).
Result<cublasLtHandle_t> handle_for(int device) {
  thread_local std::map<int, cublasLtHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  QL_LT_CHECK(cublasLtCreate(&h));
  handles[device] = h;
  return h;
}

struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

using AlgoKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool>;
std::mutex g_algo_mutex;
std::map<AlgoKey, cublasLtMatmulAlgo_t> g_algos;

template <class T>
Status set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  return lt_check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), what);
}

}  // namespace

DType bias_dtype_for(DType ab_dtype, DType out_dtype) {
  if (ab_dtype == DType::kF8E4M3 && out_dtype == DType::kF32) return DType::kBF16;
  return out_dtype;
}

Status lt_gemm(const LtGemm& g, Stream stream) {
  if (g.m == 0 || g.n == 0) return Status::ok();
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  QL_ASSIGN_OR_RETURN(cublasLtHandle_t handle, handle_for(device));

  const bool fp8 = g.ab_dtype == DType::kF8E4M3;
  // INT8 runs exactly (IMMA, INT32 accumulation and output, integer alpha/beta); the others in FP32.
  const bool int8 = g.ab_dtype == DType::kI8;
  if (int8 && (g.out_dtype != DType::kI32 || g.scale_mode != LtScaleMode::kNone || g.bias != nullptr)) {
    return Status::error("lt_gemm: INT8 GEMMs write INT32 without scales or bias (the epilogue applies them)");
  }
  const cublasComputeType_t compute = int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
  Descs d;
  QL_LT_CHECK(cublasLtMatmulDescCreate(&d.op, compute, int8 ? CUDA_R_32I : CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, "set TRANSA"));
  QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, "set TRANSB"));
  if (fp8) {
    const int8_t fast = g.fast_accum ? 1 : 0;
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast, "set FAST_ACCUM"));
  }
  if (g.scale_mode != LtScaleMode::kNone) {
    int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    if (g.scale_mode == LtScaleMode::kOuterVec) {
      a_mode = b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    } else if (g.scale_mode == LtScaleMode::kBlock) {
      a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    }
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode, "set A_SCALE_MODE"));
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode, "set B_SCALE_MODE"));
    const void* ap = g.w_scale;
    const void* bp = g.x_scale;
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ap, "set A_SCALE_POINTER"));
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, bp, "set B_SCALE_POINTER"));
  }
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, "set EPILOGUE"));
    const void* bp = g.bias;
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp, "set BIAS_POINTER"));
    const int32_t bt = cuda_type(bias_dtype_for(g.ab_dtype, g.out_dtype));
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt, "set BIAS_DATA_TYPE"));
  }
  const cudaDataType_t ab = cuda_type(g.ab_dtype), out = cuda_type(g.out_dtype);
  // Column-major views: A = W as K x N (ld ld_w), B = x as K x M (ld ld_x), D = y^T as N x M (ld N).
  QL_LT_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab, static_cast<uint64_t>(g.k), static_cast<uint64_t>(g.n), g.ld_w));
  QL_LT_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab, static_cast<uint64_t>(g.k), static_cast<uint64_t>(g.m), g.ld_x));
  const int64_t ld_out = g.ld_out > 0 ? g.ld_out : g.n;
  QL_LT_CHECK(cublasLtMatrixLayoutCreate(&d.d, out, static_cast<uint64_t>(g.n), static_cast<uint64_t>(g.m), ld_out));

  const AlgoKey key{device, static_cast<int>(g.ab_dtype), g.m, g.n, g.k, g.ld_w, g.ld_x, ld_out,
                    static_cast<int>(g.scale_mode) * 16 + static_cast<int>(g.out_dtype),
                    g.bias != nullptr ? 1 : 0, g.fast_accum};
  cublasLtMatmulAlgo_t algo{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (!cached) {
    QL_LT_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t ws = kWorkspaceBytes;
    QL_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    QL_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.d, d.d, d.pref, 1, &result, &found));
    if (found == 0) {
      return Status::error("cuBLASLt has no algorithm for " + std::string(name(g.ab_dtype)) + " M=" +
                           std::to_string(g.m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) +
                           " out=" + std::string(name(g.out_dtype)) + (g.bias ? " with bias" : ""));
    }
    algo = result.algo;
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algos[key] = algo;
  }
  QL_ASSIGN_OR_RETURN(Scratch workspace, Scratch::make(kWorkspaceBytes, stream));
  const float alpha = 1.0f, beta = 0.0f;
  const int32_t alpha_i = 1, beta_i = 0;
  QL_LT_CHECK(cublasLtMatmul(handle, d.op, int8 ? static_cast<const void*>(&alpha_i) : &alpha, g.w, d.a, g.x, d.b,
                             int8 ? static_cast<const void*>(&beta_i) : &beta, g.out, d.d, g.out, d.d, &algo,
                             workspace.get(), kWorkspaceBytes, stream));
  return Status::ok();
}

}  // namespace qlinear::cuda
