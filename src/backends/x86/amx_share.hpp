#pragma once
// How the AMX kernels split one GEMM among `nt` thread items: by 32-column blocks when there are enough of
// them (every item streams its own share of the weights once), else by whole 16-row tiles (few columns,
// many rows). And the tile configuration both use. Internal linkage: included only by the AMX files, compiled
// with their flags.
#include <immintrin.h>

#include <cstdint>

namespace qlinear::x86 {
namespace {

struct AmxShare {
  int64_t m0, m1;  // rows [m0, m1)
  int64_t b0, b1;  // 32-column blocks [b0, b1)
  bool empty() const { return m1 <= m0 || b1 <= b0; }
};

// Item t of nt over m rows and `blocks` column blocks; block_rows: the rows one output block holds.
inline AmxShare amx_share(int64_t t, int64_t nt, int64_t m, int64_t blocks, int64_t block_rows) {
  if (blocks >= 2 * nt || m < 2 * block_rows * nt) return {0, m, blocks * t / nt, blocks * (t + 1) / nt};
  const int64_t tiles = (m + 15) / 16;
  const int64_t m1 = tiles * (t + 1) / nt * 16;
  return {tiles * t / nt * 16, m1 < m ? m1 : m, 0, blocks};
}

// Palette 1 tile configuration (Intel SDM, LDTILECFG), 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// All 8 tiles as 16 rows x 64 bytes.
inline void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12 does not see that ldtilecfg reads cfg and may drop the stores above: make them observable.
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

}  // namespace
}  // namespace qlinear::x86
