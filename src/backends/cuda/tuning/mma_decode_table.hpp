#pragma once
// The tuned table of the tensor-core decode GEMM (mma_decode.hpp) above M = 16: for each GPU, weight code,
// weight shape (N, K) and M bucket, the route and wgmma tiling that `qlinear tune --decode` measured fastest
// (src/bench/mma_tune.hpp: every candidate timed with the benchmark method). The route functions
// (mma_takes_wgmma_route, mma_takes_widen_route, mma_wgmma_plan) take the table's entry where one matches the
// running GPU and layer, and their built-in rules otherwise.
// Plain C++ (no CUDA types): `qlinear kernels --explain` prints the entries and the tests check them without
// a GPU.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/layout/mma_layout.hpp"

namespace qlinear::cuda {

// A tuned entry replaces the built-in rule only when it measured at least this much faster.
inline constexpr double kMmaDecodeMinGain = 1.05;

// What runs for M > 16.
enum class MmaDecodeRoute : uint8_t {
  kRule,     // the built-in rules (measured within kMmaDecodeMinGain of the best: the bucket is kept)
  kMmaSync,  // the pipelined mma.sync kernel, 64-token tiles
  kWgmma,    // the swap-AB wgmma kernel with the entry's tokens, rows and splits
  kWiden,    // the weights widened to BF16 per call + cuBLASLt
};
std::string_view mma_decode_route_name(MmaDecodeRoute r);  // "rule", "mma.sync", "wgmma", "widen"

struct MmaDecodeTunedEntry {
  const char* device;  // cudaDeviceProp::name, e.g. "NVIDIA H200"
  MmaCode code;        // E4M3, E2M3 (both FP6 codes: one kernel, the same bytes per weight) or E2M1
  int64_t n, k;        // the checkpoint's weight shape
  int64_t m_max;       // the bucket: M in (the previous entry's m_max, m_max]; none above the largest
  MmaDecodeRoute route;
  int tokens = 0;      // wgmma: token tile 64, 128 or 256
  int rows = 0;        // wgmma: weight rows per unit, 128 or 256 (256 at 64 tokens only)
  int splits = 0;      // wgmma: split-K count; 0 = the wave rule (mma_wgmma_plan)
};

// The entry for this GPU, code, shape and M: the smallest bucket with m_max >= m; null when the table has
// none (another GPU or shape, or M above the largest bucket). E3M2 layers take the E2M3 entries.
const MmaDecodeTunedEntry* mma_decode_tuned_entry(std::string_view device, MmaCode code, int64_t n, int64_t k,
                                                  int64_t m);
// Every entry for a code and shape, by device and then M bucket ascending (explain).
std::vector<const MmaDecodeTunedEntry*> mma_decode_tuned_entries(MmaCode code, int64_t n, int64_t k);
// The whole checked-in table (tests).
std::span<const MmaDecodeTunedEntry> mma_decode_tuned_table();

// Tests: entries looked up as if they were in the table (replaces the previous set; empty: none; not
// thread-safe against lookups). The caller keeps them alive.
void mma_decode_tuned_extra_entries(std::span<const MmaDecodeTunedEntry> entries);

// The routes `qlinear tune --decode` times for the bucket ending at M (M > 16), device empty: the wgmma
// kernel with each token tile that fits M (64; 128 above M = 64; 256 above 128) and 256 rows at 64 tokens,
// each with split-K by the wave rule, 1, 2 and 4; the mma.sync kernel; the widen route.
std::vector<MmaDecodeTunedEntry> mma_decode_candidates(int64_t m);

// Why an entry cannot be run as written ("" when it can): tokens outside {64, 128, 256}, 256 rows with
// another token tile, a token tile far larger than its bucket's M, a route field outside its route.
std::string mma_decode_entry_problem(const MmaDecodeTunedEntry& e);
// "wgmma 64 tokens x 256 rows, split-K by the wave rule", "widen", "the built-in rule", ...
std::string describe(const MmaDecodeTunedEntry& e);
// The C++ source of one entry, as `qlinear tune --decode --out` writes it.
std::string mma_decode_entry_source(const MmaDecodeTunedEntry& e);
std::string_view mma_code_name(MmaCode c);  // "E4M3", "E2M3", "E3M2", "E2M1"

}  // namespace qlinear::cuda
