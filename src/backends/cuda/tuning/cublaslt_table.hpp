#pragma once
// The tuned cuBLASLt algorithm table: for each GPU, GEMM kind, weight shape (N, K) and M bucket, the
// algorithm `qlinear tune` measured fastest among cuBLASLt's heuristic candidates (src/bench/lt_tune.hpp:
// every candidate timed with the benchmark method). lt_gemm takes the table's entry for its shape where
// there is one (checked by cuBLASLt for the actual problem; the heuristic's first choice otherwise).
// Plain C++ (no CUDA types): `qlinear kernels --explain` prints the entries without a GPU.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qlinear::cuda {

// One cuBLASLt algorithm, as its configuration attributes (cublasLt.h cublasLtMatmulAlgoConfigAttributes_t)
// and the workspace it runs with.
// A tuned entry replaces the heuristic's choice only when it measured at least this much faster.
inline constexpr double kLtMinGain = 1.05;

struct LtAlgoConfig {
  int32_t algo_id = -1;
  uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0, custom = 0;
  int32_t split_k = 1;
  uint16_t inner_shape = 0, cluster_shape = 0;
  uint64_t workspace = 0;  // bytes
};
std::string describe(const LtAlgoConfig& c);  // "algo 66 tile 18 stages 31 splitK 1 ..."

// The GEMM kinds the table covers (the routes' cuBLASLt calls, BF16 output, no fast accumulation).
enum class LtKind : uint8_t { kFp8Tensor, kFp8Rowwise, kFp8Block, kInt8 };
std::string_view lt_kind_name(LtKind k);  // "fp8-tensor", "fp8-rowwise", "fp8-block", "int8"
std::optional<LtKind> lt_kind_from_name(std::string_view name);

struct LtTunedEntry {
  const char* device;  // cudaDeviceProp::name, e.g. "NVIDIA H200"
  LtKind kind;
  int64_t n, k;
  int64_t m_max;  // the bucket: M in (the previous entry's m_max, m_max]; the largest bucket also takes M above
  LtAlgoConfig config;  // algo_id -1: keep cuBLASLt's heuristic choice (no candidate was >= 5% faster)
};

// The entry for this problem, or null (no entry for the device, kind and shape).
const LtTunedEntry* lt_tuned_entry(std::string_view device, LtKind kind, int64_t n, int64_t k, int64_t m);
// Every entry for a kind and shape, M buckets ascending, for every device in the table (explain).
std::vector<const LtTunedEntry*> lt_tuned_entries(LtKind kind, int64_t n, int64_t k);
// The C++ source of one table entry, as `qlinear tune --out` writes it.
std::string lt_entry_source(const LtTunedEntry& e);

}  // namespace qlinear::cuda
