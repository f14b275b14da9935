// The tuned table of the tensor-core decode GEMM (mma_decode_table.hpp). The entries are generated:
// mma_decode_tuned_h200.inc and mma_decode_tuned_h100.inc are the outputs of `qlinear tune --decode --out`
// on an H200 and an H100 (each entry names its GPU).
#include "backends/cuda/tuning/mma_decode_table.hpp"

#include <algorithm>
#include <array>

namespace qlinear::cuda {

namespace {

constexpr MmaDecodeTunedEntry kEntries[] = {
#include "backends/cuda/tuning/mma_decode_tuned_h200.inc"
#include "backends/cuda/tuning/mma_decode_tuned_h100.inc"
    {"", MmaCode::kE4M3, 0, 0, 0, MmaDecodeRoute::kRule},  // no device has an empty name: keeps the array non-empty
};

constexpr std::array<std::string_view, 4> kRouteNames = {"rule", "mma.sync", "wgmma", "widen"};
constexpr std::array<std::string_view, 4> kCodeNames = {"E4M3", "E2M3", "E3M2", "E2M1"};

std::span<const MmaDecodeTunedEntry> extra_entries;

// The FP6 codes share one kernel and cost the same bytes per weight: their timings are the same problem.
MmaCode table_code(MmaCode c) { return c == MmaCode::kE3M2 ? MmaCode::kE2M3 : c; }

}  // namespace

std::string_view mma_decode_route_name(MmaDecodeRoute r) { return kRouteNames[static_cast<size_t>(r)]; }
std::string_view mma_code_name(MmaCode c) { return kCodeNames[static_cast<size_t>(c)]; }

const MmaDecodeTunedEntry* mma_decode_tuned_entry(std::string_view device, MmaCode code, int64_t n, int64_t k,
                                                  int64_t m) {
  const MmaCode key = table_code(code);
  const MmaDecodeTunedEntry* best = nullptr;  // the smallest bucket with m_max >= m
  auto consider = [&](const MmaDecodeTunedEntry& e) {
    if (e.code != key || e.n != n || e.k != k || e.m_max < m || device != e.device) return;
    if (best == nullptr || e.m_max < best->m_max) best = &e;
  };
  for (const MmaDecodeTunedEntry& e : extra_entries) consider(e);
  for (const MmaDecodeTunedEntry& e : kEntries) consider(e);
  return best;
}

void mma_decode_tuned_extra_entries(std::span<const MmaDecodeTunedEntry> entries) { extra_entries = entries; }

std::vector<MmaDecodeTunedEntry> mma_decode_candidates(int64_t m) {
  std::vector<MmaDecodeTunedEntry> out;
  auto add = [&](MmaDecodeRoute route, int tokens, int rows, int splits) {
    out.push_back({"", MmaCode::kE4M3, 0, 0, m, route, tokens, rows, splits});
  };
  for (const int tokens : {64, 128, 256}) {
    if (tokens > 64 && 2 * m <= tokens) break;  // a tile at least twice M computes mostly padding
    for (const int splits : {0, 1, 2, 4}) add(MmaDecodeRoute::kWgmma, tokens, 128, splits);
    if (tokens == 64) {
      for (const int splits : {0, 1, 2, 4}) add(MmaDecodeRoute::kWgmma, 64, 256, splits);
    }
  }
  add(MmaDecodeRoute::kMmaSync, 0, 0, 0);
  add(MmaDecodeRoute::kWiden, 0, 0, 0);
  return out;
}

std::vector<const MmaDecodeTunedEntry*> mma_decode_tuned_entries(MmaCode code, int64_t n, int64_t k) {
  const MmaCode key = table_code(code);
  std::vector<const MmaDecodeTunedEntry*> out;
  for (std::span<const MmaDecodeTunedEntry> entries : {extra_entries, std::span<const MmaDecodeTunedEntry>(kEntries)}) {
    for (const MmaDecodeTunedEntry& e : entries) {
      if (e.code == key && e.n == n && e.k == k) out.push_back(&e);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const MmaDecodeTunedEntry* a, const MmaDecodeTunedEntry* b) {
    return std::string_view(a->device) != b->device ? std::string_view(a->device) < b->device : a->m_max < b->m_max;
  });
  return out;
}

std::span<const MmaDecodeTunedEntry> mma_decode_tuned_table() {
  return {kEntries, std::size(kEntries) - 1};  // without the terminator
}

std::string mma_decode_entry_problem(const MmaDecodeTunedEntry& e) {
  if (std::string_view(e.device).empty()) return "no device name";
  if (e.n <= 0 || e.k <= 0) return "N and K must be positive";
  // The wgmma kernel and the tuned routes start at M = 17 (M <= 16 has its own kernels and rules).
  if (e.m_max < 17) return "M bucket " + std::to_string(e.m_max) + " ends below 17";
  if (e.code == MmaCode::kE3M2) return "FP6 entries are keyed E2M3 (both FP6 codes run one kernel)";
  if (e.route != MmaDecodeRoute::kWgmma) {
    if (e.tokens != 0 || e.rows != 0 || e.splits != 0) return "tokens, rows and splits belong to the wgmma route";
    return "";
  }
  if (e.tokens != 64 && e.tokens != 128 && e.tokens != 256) return "tokens must be 64, 128 or 256";
  if (e.rows != 128 && e.rows != 256) return "rows must be 128 or 256";
  if (e.rows == 256 && e.tokens != 64) return "256 rows run only with 64-token tiles";
  // A token tile at least twice the bucket's largest M would compute mostly padding.
  if (e.tokens > 64 && e.tokens >= 2 * e.m_max) {
    return std::to_string(e.tokens) + "-token tiles for M <= " + std::to_string(e.m_max);
  }
  if (e.splits < 0 || e.splits > 16) return "splits must be 0 (the wave rule) .. 16";
  return "";
}

std::string describe(const MmaDecodeTunedEntry& e) {
  switch (e.route) {
    case MmaDecodeRoute::kRule: return "the built-in rule";
    case MmaDecodeRoute::kMmaSync: return "mma.sync kernel, 64-token tiles";
    case MmaDecodeRoute::kWiden: return "weights widened to BF16 + cuBLASLt";
    case MmaDecodeRoute::kWgmma: break;
  }
  return "wgmma " + std::to_string(e.tokens) + " tokens x " + std::to_string(e.rows) + " rows, " +
         (e.splits == 0 ? std::string("split-K by the wave rule") : "split-K " + std::to_string(e.splits));
}

std::string mma_decode_entry_source(const MmaDecodeTunedEntry& e) {
  static constexpr std::array<const char*, 4> kRouteEnum = {"kRule", "kMmaSync", "kWgmma", "kWiden"};
  return "{\"" + std::string(e.device) + "\", MmaCode::k" + std::string(mma_code_name(e.code)) + ", " +
         std::to_string(e.n) + ", " + std::to_string(e.k) + ", " + std::to_string(e.m_max) + ", MmaDecodeRoute::" +
         kRouteEnum[static_cast<size_t>(e.route)] + ", " + std::to_string(e.tokens) + ", " + std::to_string(e.rows) +
         ", " + std::to_string(e.splits) + "},";
}

}  // namespace qlinear::cuda
