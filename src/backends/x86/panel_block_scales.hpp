#pragma once
// 128x128 weight-block scales as the x86 kernels read them: one scale row per 16-column panel. The checkpoint's
// grid (ScaleRowGrid, qlinear/layer.hpp) gives a fused layer's shards their own block grids, so a 128-column
// stretch of output may hold two shards' scales; re-laid out per panel at process, a kernel reads
// block_scale[panel][k / 128] for any shard layout whose shard boundaries fall on panel boundaries.
//
//   shards 576 | 192 | 192, panels of 16:  panel p -> scale row grid.scale_row(16 p)
//   panels 0..7 -> row 0, ..., 32..35 -> row 4 (q's partial block), 36..43 -> row 5, 44..47 -> row 6, ...
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "qlinear/kernel.hpp"

namespace qlinear::x86 {

inline constexpr int64_t kBlockScalePanel = 16;

// Whether every panel of the layer lies within one scale row: a shard boundary off the 16-column panels
// (possible only when shards keep their own block grids) would put two shards' scales in one panel.
inline Verdict panels_take_block_grid(const LinearConfig& c) {
  if (c.weight_key.scale.group.row <= 1) return Verdict::yes();
  const ScaleRowGrid grid = scale_row_grid(c);
  if (const int64_t r = grid.boundary_off(kBlockScalePanel); r >= 0) {
    return Verdict::no("fused shard boundary at output row " + std::to_string(r) +
                       " is not a multiple of 16: one 16-column panel would need two shards' 128x128 block scales");
  }
  return Verdict::yes();
}

// ws: the layer's weight_scale, f32 [grid.rows, ceil(k/128)]. Returns f32 [n_pad / 16][ceil(k/128)].
inline std::vector<float> panel_block_scales(const LinearConfig& c, const Tensor& ws, int64_t n_pad) {
  const ScaleRowGrid grid = scale_row_grid(c);
  const int64_t cols = (c.k + 127) / 128, panels = n_pad / kBlockScalePanel;
  const Tensor s = ws.contiguous();
  std::vector<float> out(static_cast<size_t>(panels * cols));
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t row = grid.scale_row(std::min(p * kBlockScalePanel, c.n - 1));
    for (int64_t b = 0; b < cols; ++b) out[static_cast<size_t>(p * cols + b)] = s.data<float>()[row * cols + b];
  }
  return out;
}

}  // namespace qlinear::x86
