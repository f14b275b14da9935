// The tuned cuBLASLt table (cublaslt_table.hpp). The entries are generated: cublaslt_tuned_h200.inc and
// cublaslt_tuned_h100.inc are the outputs of `qlinear tune --out` on an H200 and an H100 (each entry names its GPU).
#include "backends/cuda/tuning/cublaslt_table.hpp"

#include <algorithm>
#include <array>

namespace qlinear::cuda {

namespace {

constexpr LtTunedEntry kEntries[] = {
#include "backends/cuda/tuning/cublaslt_tuned_h200.inc"
#include "backends/cuda/tuning/cublaslt_tuned_h100.inc"
    {"", LtKind::kFp8Tensor, 0, 0, 0, {}},  // no device has an empty name: keeps the array non-empty
};

constexpr std::array<std::string_view, 4> kKindNames = {"fp8-tensor", "fp8-rowwise", "fp8-block", "int8"};

}  // namespace

std::string describe(const LtAlgoConfig& c) {
  return "algo " + std::to_string(c.algo_id) + " tile " + std::to_string(c.tile) + " stages " +
         std::to_string(c.stages) + " splitK " + std::to_string(c.split_k) + " reduction " +
         std::to_string(c.reduction) + " swizzle " + std::to_string(c.swizzle) + " custom " +
         std::to_string(c.custom) + " inner " + std::to_string(c.inner_shape) + " cluster " +
         std::to_string(c.cluster_shape) + " workspace " + std::to_string(c.workspace >> 10) + " KiB";
}

std::string_view lt_kind_name(LtKind k) { return kKindNames[static_cast<size_t>(k)]; }

std::optional<LtKind> lt_kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kKindNames.size(); ++i) {
    if (kKindNames[i] == name) return static_cast<LtKind>(i);
  }
  return std::nullopt;
}

const LtTunedEntry* lt_tuned_entry(std::string_view device, LtKind kind, int64_t n, int64_t k, int64_t m) {
  const LtTunedEntry* best = nullptr;  // the smallest bucket with m_max >= m, else the largest bucket
  const LtTunedEntry* largest = nullptr;
  for (const LtTunedEntry& e : kEntries) {
    if (e.kind != kind || e.n != n || e.k != k || device != e.device) continue;
    if (e.m_max >= m && (best == nullptr || e.m_max < best->m_max)) best = &e;
    if (largest == nullptr || e.m_max > largest->m_max) largest = &e;
  }
  return best != nullptr ? best : largest;
}

std::vector<const LtTunedEntry*> lt_tuned_entries(LtKind kind, int64_t n, int64_t k) {
  std::vector<const LtTunedEntry*> out;
  for (const LtTunedEntry& e : kEntries) {
    if (e.kind == kind && e.n == n && e.k == k) out.push_back(&e);
  }
  std::stable_sort(out.begin(), out.end(), [](const LtTunedEntry* a, const LtTunedEntry* b) {
    return std::string_view(a->device) != b->device ? std::string_view(a->device) < b->device : a->m_max < b->m_max;
  });
  return out;
}

std::string lt_entry_source(const LtTunedEntry& e) {
  static constexpr std::array<const char*, 4> kEnum = {"kFp8Tensor", "kFp8Rowwise", "kFp8Block", "kInt8"};
  const LtAlgoConfig& c = e.config;
  return "{\"" + std::string(e.device) + "\", LtKind::" + kEnum[static_cast<size_t>(e.kind)] + ", " +
         std::to_string(e.n) + ", " + std::to_string(e.k) + ", " + std::to_string(e.m_max) + ", {" +
         std::to_string(c.algo_id) + ", " + std::to_string(c.tile) + ", " + std::to_string(c.stages) + ", " +
         std::to_string(c.reduction) + ", " + std::to_string(c.swizzle) + ", " + std::to_string(c.custom) + ", " +
         std::to_string(c.split_k) + ", " + std::to_string(c.inner_shape) + ", " + std::to_string(c.cluster_shape) +
         ", " + std::to_string(c.workspace) + "}},";
}

}  // namespace qlinear::cuda
