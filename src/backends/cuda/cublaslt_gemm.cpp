// cuBLASLt plumbing: per-thread handles, descriptors, a per-shape algorithm cache.
#include "backends/cuda/cublaslt_gemm.hpp"

#include <cublasLt.h>

#include <cstdlib>
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
struct CachedAlgo {
  cublasLtMatmulAlgo_t algo{};
  uint64_t workspace = 0;
};
std::map<AlgoKey, CachedAlgo> g_algos;

template <class T>
Status set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  return lt_check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), what);
}

}  // namespace

DType bias_dtype_for(DType ab_dtype, DType out_dtype) {
  if (ab_dtype == DType::kF8E4M3 && out_dtype == DType::kF32) return DType::kBF16;
  return out_dtype;
}

namespace {

// The descriptors of g (operation, layouts), shared by lt_gemm and lt_candidates.
Status build_descs(const LtGemm& g, Descs& d) {
  const bool int8 = g.ab_dtype == DType::kI8;
  const bool int8_exact = int8 && g.out_dtype == DType::kI32;
  if (int8_exact && (g.scale_mode != LtScaleMode::kNone || g.bias != nullptr || g.alpha_vector != nullptr)) {
    return Status::error("lt_gemm: INT8 GEMMs with an INT32 output take no scales or bias");
  }
  // INT8 accumulates in INT32 (IMMA); with an INT32 output, integer alpha/beta (exact).
  const cublasComputeType_t compute = int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
  QL_LT_CHECK(cublasLtMatmulDescCreate(&d.op, compute, int8_exact ? CUDA_R_32I : CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, "set TRANSA"));
  QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, "set TRANSB"));
  if (g.ab_dtype == DType::kF8E4M3) {
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
  if (g.alpha_vector != nullptr) {
    const int32_t mode = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    QL_RETURN_IF_ERROR(set_attr(d.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, mode, "set POINTER_MODE"));
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
  return Status::ok();
}

template <class T>
void config_get(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, T& v) {
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written);
}

LtAlgoConfig config_of(const cublasLtMatmulAlgo_t& a, uint64_t workspace) {
  LtAlgoConfig c;
  config_get(a, CUBLASLT_ALGO_CONFIG_ID, c.algo_id);
  config_get(a, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile);
  config_get(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages);
  config_get(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.split_k);
  config_get(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction);
  config_get(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.swizzle);
  config_get(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom);
  config_get(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c.inner_shape);
  config_get(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster_shape);
  c.workspace = workspace;
  return c;
}

template <class T>
Status config_set(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, const T& v, const char* what) {
  return lt_check(cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof(v)), what);
}

// The algorithm of a configuration for these descriptors, checked by cuBLASLt (an error when the
// configuration does not apply to them).
Status algo_from_config(cublasLtHandle_t h, const Descs& d, const LtGemm& g, const LtAlgoConfig& c,
                        cublasLtMatmulAlgo_t& algo) {
  const bool int8_exact = g.ab_dtype == DType::kI8 && g.out_dtype == DType::kI32;
  const cudaDataType_t ab = cuda_type(g.ab_dtype), out = cuda_type(g.out_dtype);
  QL_LT_CHECK(cublasLtMatmulAlgoInit(h, g.ab_dtype == DType::kI8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                     int8_exact ? CUDA_R_32I : CUDA_R_32F, ab, ab, out, out, c.algo_id, &algo));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile, "set TILE_ID"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages, "set STAGES_ID"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.split_k, "set SPLITK_NUM"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction, "set REDUCTION_SCHEME"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.swizzle, "set CTA_SWIZZLING"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom, "set CUSTOM_OPTION"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c.inner_shape, "set INNER_SHAPE_ID"));
  QL_RETURN_IF_ERROR(config_set(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster_shape, "set CLUSTER_SHAPE_ID"));
  cublasLtMatmulHeuristicResult_t check{};
  QL_LT_CHECK(cublasLtMatmulAlgoCheck(h, d.op, d.a, d.b, d.d, d.d, &algo, &check));
  if (check.workspaceSize > c.workspace) {
    return Status::error("cuBLASLt " + describe(c) + " needs " + std::to_string(check.workspaceSize) +
                         " bytes of workspace");
  }
  return Status::ok();
}

}  // namespace

std::optional<LtKind> lt_kind_of(const LtGemm& g) {
  if (g.ab_dtype == DType::kI8) {
    if (g.out_dtype == DType::kI32 && g.alpha_vector == nullptr) return LtKind::kInt8;
    return std::nullopt;
  }
  if (g.ab_dtype != DType::kF8E4M3 || g.fast_accum) return std::nullopt;
  switch (g.scale_mode) {
    case LtScaleMode::kScalar: return LtKind::kFp8Tensor;
    case LtScaleMode::kOuterVec: return LtKind::kFp8Rowwise;
    case LtScaleMode::kBlock: return LtKind::kFp8Block;
    default: return std::nullopt;
  }
}

namespace {

// The tuned table's algorithm for g where it has one that cuBLASLt accepts for this problem, else the
// heuristic's first choice.
Result<CachedAlgo> choose_algo(cublasLtHandle_t handle, Descs& d, const LtGemm& g, int device) {
  CachedAlgo chosen;
  // QLINEAR_CUBLASLT_TABLE=off: the heuristic only (to measure what the table gains).
  static const bool table_off = [] {
    const char* v = std::getenv("QLINEAR_CUBLASLT_TABLE");
    return v != nullptr && std::string(v) == "off";
  }();
  const std::optional<LtKind> kind = table_off || !g.use_table ? std::nullopt : lt_kind_of(g);
  if (kind) {
    const LtTunedEntry* e = lt_tuned_entry(device_name(device), *kind, g.n, g.k, g.m);
    if (e != nullptr && e->config.algo_id >= 0) {  // algo -1: the heuristic's choice measured best
      if (algo_from_config(handle, d, g, e->config, chosen.algo).is_ok()) {
        chosen.workspace = e->config.workspace;
        return chosen;
      }
    }
  }
  QL_LT_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = kWorkspaceBytes;
  QL_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.d, d.d, d.pref, 1, &result, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    return Status::error("cuBLASLt has no algorithm for " + std::string(name(g.ab_dtype)) + " M=" +
                         std::to_string(g.m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) +
                         " out=" + std::string(name(g.out_dtype)) + (g.bias ? " with bias" : "") +
                         (st != CUBLAS_STATUS_SUCCESS ? std::string(" (") + cublasGetStatusName(st) + ")" : ""));
  }
  chosen.algo = result.algo;
  chosen.workspace = kWorkspaceBytes;
  return chosen;
}

}  // namespace

Result<std::vector<LtAlgoConfig>> lt_candidates(const LtGemm& g, int max_count, uint64_t max_workspace) {
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  QL_ASSIGN_OR_RETURN(cublasLtHandle_t handle, handle_for(device));
  Descs d;
  QL_RETURN_IF_ERROR(build_descs(g, d));
  QL_LT_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  QL_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                   sizeof(max_workspace)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_count));
  int found = 0;
  QL_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.d, d.d, d.pref, max_count, results.data(),
                                             &found));
  std::vector<LtAlgoConfig> out;
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(config_of(results[i].algo, results[i].workspaceSize));
  }
  return out;
}

Status lt_gemm(const LtGemm& g, Stream stream) {
  if (g.m == 0 || g.n == 0) return Status::ok();
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  QL_ASSIGN_OR_RETURN(cublasLtHandle_t handle, handle_for(device));
  Descs d;
  QL_RETURN_IF_ERROR(build_descs(g, d));
  const bool int8_exact = g.ab_dtype == DType::kI8 && g.out_dtype == DType::kI32;
  const int64_t ld_out = g.ld_out > 0 ? g.ld_out : g.n;

  CachedAlgo chosen;
  if (g.algo != nullptr) {
    QL_RETURN_IF_ERROR(algo_from_config(handle, d, g, *g.algo, chosen.algo));
    chosen.workspace = g.algo->workspace;
  } else {
    const AlgoKey key{device, static_cast<int>(g.ab_dtype), g.m, g.n, g.k, g.ld_w, g.ld_x, ld_out,
                      static_cast<int>(g.scale_mode) * 16 + static_cast<int>(g.out_dtype),
                      (g.bias != nullptr ? 1 : 0) + (g.alpha_vector != nullptr ? 2 : 0) + (g.use_table ? 4 : 0),
                      g.fast_accum};
    bool cached = false;
    {
      std::lock_guard<std::mutex> lock(g_algo_mutex);
      auto it = g_algos.find(key);
      if (it != g_algos.end()) {
        chosen = it->second;
        cached = true;
      }
    }
    if (!cached) {
      QL_ASSIGN_OR_RETURN(chosen, choose_algo(handle, d, g, device));
      std::lock_guard<std::mutex> lock(g_algo_mutex);
      g_algos[key] = chosen;
    }
  }
  Scratch workspace;
  if (chosen.workspace > 0) {
    QL_ASSIGN_OR_RETURN(workspace, Scratch::make(chosen.workspace, stream));
  }
  const float alpha = 1.0f, beta = 0.0f;
  const int32_t alpha_i = 1, beta_i = 0;
  const void* alpha_p = int8_exact ? static_cast<const void*>(&alpha_i) : &alpha;
  if (g.alpha_vector != nullptr) alpha_p = g.alpha_vector;
  QL_LT_CHECK(cublasLtMatmul(handle, d.op, alpha_p, g.w, d.a, g.x, d.b,
                             int8_exact ? static_cast<const void*>(&beta_i) : &beta, g.out, d.d, g.out, d.d,
                             &chosen.algo, workspace.get(), chosen.workspace, stream));
  return Status::ok();
}

}  // namespace qlinear::cuda
