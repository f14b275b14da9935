// The tensor-core decode kernel's weight and scale layouts (mma_layout.hpp has the diagrams).
#include "backends/cuda/layout/mma_layout.hpp"

#include <cstring>

namespace qlinear::cuda {

namespace {

using Field = MmaField;

int fields_of(MmaCode c, int q, int h, int r, int half, Field (&f)[2]) { return mma_fields_of(c, q, h, r, half, f); }

int code_bits(MmaCode c) { return c == MmaCode::kE4M3 ? 8 : (c == MmaCode::kE2M1 ? 4 : 6); }

// Code `col` of a checkpoint row (bytes, E2M1 low nibble first, FP6 bit stream at 6 col).
uint32_t get_code(MmaCode c, const uint8_t* row, int64_t col) {
  const int b = code_bits(c);
  const int64_t bit = b * col;
  uint32_t v = row[bit >> 3];
  if ((bit & 7) + b > 8) v |= static_cast<uint32_t>(row[(bit >> 3) + 1]) << 8;
  return (v >> (bit & 7)) & ((1u << b) - 1u);
}

void set_code(MmaCode c, uint8_t* row, int64_t col, uint32_t code) {
  const int b = code_bits(c);
  const int64_t bit = b * col;
  const uint32_t mask = ((1u << b) - 1u) << (bit & 7);
  uint32_t v = row[bit >> 3];
  const bool two = (bit & 7) + b > 8;
  if (two) v |= static_cast<uint32_t>(row[(bit >> 3) + 1]) << 8;
  v = (v & ~mask) | (code << (bit & 7));
  row[bit >> 3] = static_cast<uint8_t>(v);
  if (two) row[(bit >> 3) + 1] = static_cast<uint8_t>(v >> 8);
}

int64_t word_offset(int lane, int w) { return mma_word_offset(lane, w); }

uint32_t load_word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian, as the GPU reads it
  return v;
}
void store_word(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// Calls fn(row, col, unit_base, lane, q, h, r, half) for every element slot of the packed layout; tiles in
// parallel (a tile's slots touch only its own unit bytes and its own 16 checkpoint rows).
template <class Fn>
void for_each_slot(const MmaLayout& l, Fn&& fn) {
#pragma omp parallel for schedule(static)
  for (int64_t tile = 0; tile < l.n_tiles(); ++tile) {
    for (int64_t slab = 0; slab < l.k_slabs(); ++slab) {
      const int64_t base = (tile * l.k_slabs() + slab) * l.unit_bytes();
      for (int lane = 0; lane < kMmaLanes; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int q = 0; q < 4; ++q) {
          for (int h = 0; h < 2; ++h) {
            for (int r = 0; r < 4; ++r) {
              for (int half = 0; half < 2; ++half) {
                const int64_t row = tile * kMmaTileN + g + 8 * (r & 1);
                const int64_t col = slab * kMmaSlabK + 32 * q + 16 * h + 2 * t + 8 * (r >> 1) + half;
                fn(row, col, base, lane, q, h, r, half);
              }
            }
          }
        }
      }
    }
  }
}

int64_t groups_per_slab(MmaScale s) { return s == MmaScale::kMx32 ? 4 : 8; }

}  // namespace

std::vector<uint8_t> mma_pack_weight(const MmaLayout& l, const uint8_t* row_major, int64_t row_bytes) {
  std::vector<uint8_t> out(static_cast<size_t>(l.weight_bytes()), 0);
  for_each_slot(l, [&](int64_t row, int64_t col, int64_t base, int lane, int q, int h, int r, int half) {
    if (row >= l.n || col >= l.k) return;  // padding stays zero codes
    const uint32_t code = get_code(l.code, row_major + row * row_bytes, col);
    Field f[2];
    const int nf = fields_of(l.code, q, h, r, half, f);
    for (int i = 0; i < nf; ++i) {
      uint8_t* p = out.data() + base + word_offset(lane, f[i].word);
      const uint32_t bits = (code >> f[i].code_shift) & ((1u << f[i].bits) - 1u);
      store_word(p, load_word(p) | (bits << f[i].shift));
    }
  });
  return out;
}

void mma_unpack_weight(const MmaLayout& l, const uint8_t* packed, uint8_t* row_major, int64_t row_bytes) {
  std::memset(row_major, 0, static_cast<size_t>(l.n * row_bytes));
  for_each_slot(l, [&](int64_t row, int64_t col, int64_t base, int lane, int q, int h, int r, int half) {
    if (row >= l.n || col >= l.k) return;
    Field f[2];
    const int nf = fields_of(l.code, q, h, r, half, f);
    uint32_t code = 0;
    for (int i = 0; i < nf; ++i) {
      const uint32_t w = load_word(packed + base + word_offset(lane, f[i].word));
      code |= ((w >> f[i].shift) & ((1u << f[i].bits) - 1u)) << f[i].code_shift;
    }
    set_code(l.code, row_major + row * row_bytes, col, code);
  });
}

std::vector<uint8_t> mma_pack_scales(const MmaLayout& l, const uint8_t* row_major) {
  const int64_t per_slab = groups_per_slab(l.scale), rec = mma_scale_record_bytes(l.scale);
  const int64_t group = kMmaSlabK / per_slab, row_len = l.k / group;
  const uint8_t one = l.scale == MmaScale::kMx32 ? 127 : 0x38;  // 2^0 in E8M0 / E4M3
  std::vector<uint8_t> out(static_cast<size_t>(l.scale_bytes()), one);
  for (int64_t tile = 0; tile < l.n_tiles(); ++tile) {
    for (int64_t slab = 0; slab < l.k_slabs(); ++slab) {
      for (int pair = 0; pair < kMmaScaleRecords; ++pair) {
        uint8_t* dst = out.data() + ((tile * l.k_slabs() + slab) * kMmaScaleRecords + pair) * rec;
        for (int half = 0; half < 2; ++half) {
          const int64_t row = tile * kMmaTileN + pair + 8 * half;
          for (int64_t j = 0; j < per_slab; ++j) {
            const int64_t g = slab * per_slab + j;
            if (row < l.n && g < row_len) dst[half * per_slab + j] = row_major[row * row_len + g];
          }
        }
      }
    }
  }
  return out;
}

void mma_unpack_scales(const MmaLayout& l, const uint8_t* packed, uint8_t* row_major) {
  const int64_t per_slab = groups_per_slab(l.scale), rec = mma_scale_record_bytes(l.scale);
  const int64_t group = kMmaSlabK / per_slab, row_len = l.k / group;
  for (int64_t tile = 0; tile < l.n_tiles(); ++tile) {
    for (int64_t slab = 0; slab < l.k_slabs(); ++slab) {
      for (int pair = 0; pair < kMmaScaleRecords; ++pair) {
        const uint8_t* src = packed + ((tile * l.k_slabs() + slab) * kMmaScaleRecords + pair) * rec;
        for (int half = 0; half < 2; ++half) {
          const int64_t row = tile * kMmaTileN + pair + 8 * half;
          for (int64_t j = 0; j < per_slab; ++j) {
            const int64_t g = slab * per_slab + j;
            if (row < l.n && g < row_len) row_major[row * row_len + g] = src[half * per_slab + j];
          }
        }
      }
    }
  }
}

}  // namespace qlinear::cuda
