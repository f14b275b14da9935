// The tensor-core decode kernel's weight and scale layouts on the CPU (no GPU needed): packing and unpacking
// round-trip against the checkpoint's row-major codes, and the kernel's register decode (emulated here bit
// for bit: the same shifts and masks as mma_decode.cuh) gives every code's reference value at the element
// the MMA fragment layout says it holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/layout/mma_layout.hpp"
#include "qlinear/formats.hpp"

namespace qlinear {
namespace {

using cuda::MmaCode;
using cuda::MmaLayout;
using cuda::MmaScale;

DType dtype_of(MmaCode c) {
  switch (c) {
    case MmaCode::kE4M3: return DType::kF8E4M3;
    case MmaCode::kE2M3: return DType::kF6E2M3;
    case MmaCode::kE3M2: return DType::kF6E3M2;
    default: return DType::kF4E2M1;
  }
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct Shape2 {
  int64_t n, k;
};

TEST(MmaLayout, WeightsRoundTrip) {
  for (MmaCode c : {MmaCode::kE4M3, MmaCode::kE2M3, MmaCode::kE3M2, MmaCode::kE2M1}) {
    for (Shape2 s : {Shape2{1, 32}, Shape2{16, 256}, Shape2{17, 96}, Shape2{40, 544}, Shape2{3, 1024}}) {
      const MmaLayout l{c, MmaScale::kRow, s.n, s.k};
      const int64_t row_bytes = storage_bytes(dtype_of(c), s.k);
      auto src = random_bytes(static_cast<size_t>(s.n * row_bytes), static_cast<uint32_t>(s.n * 131 + s.k));
      const std::vector<uint8_t> packed = cuda::mma_pack_weight(l, src.data(), row_bytes);
      ASSERT_EQ(static_cast<int64_t>(packed.size()), l.weight_bytes());
      std::vector<uint8_t> back(src.size(), 0xAB);
      cuda::mma_unpack_weight(l, packed.data(), back.data(), row_bytes);
      EXPECT_EQ(back, src) << "code " << static_cast<int>(c) << " N=" << s.n << " K=" << s.k;
    }
  }
}

TEST(MmaLayout, ScalesRoundTripAndPadWithOne) {
  for (MmaScale sc : {MmaScale::kMx32, MmaScale::kNv16}) {
    for (Shape2 s : {Shape2{1, 32}, Shape2{17, 96}, Shape2{40, 544}}) {
      const MmaLayout l{MmaCode::kE2M1, sc, s.n, s.k};
      const int64_t group = sc == MmaScale::kMx32 ? 32 : 16;
      auto src = random_bytes(static_cast<size_t>(s.n * (s.k / group)), 7u + static_cast<uint32_t>(s.k));
      const std::vector<uint8_t> packed = cuda::mma_pack_scales(l, src.data());
      ASSERT_EQ(static_cast<int64_t>(packed.size()), l.scale_bytes());
      std::vector<uint8_t> back(src.size(), 0);
      cuda::mma_unpack_scales(l, packed.data(), back.data());
      EXPECT_EQ(back, src);
      // Row 0 of the last slab of a K that is not a multiple of 256: padded groups hold 2^0.
      const int64_t per_slab = sc == MmaScale::kMx32 ? 4 : 8, rec = per_slab * 2;
      const int64_t last = l.k_slabs() - 1;
      for (int64_t j = 0; j < per_slab; ++j) {
        if (last * per_slab + j < s.k / group) continue;
        EXPECT_EQ(packed[static_cast<size_t>(last * cuda::kMmaScaleRecords * rec + j)], sc == MmaScale::kMx32 ? 127 : 0x38);
      }
    }
  }
}

// ---- The kernel's decode, emulated ------------------------------------------------------------------------

uint32_t place(MmaCode c, uint32_t x) {
  switch (c) {
    case MmaCode::kE4M3: return (x & 0x80008000u) | ((x >> 4) & 0x07F007F0u);
    case MmaCode::kE2M1: return (x & 0x80008000u) | ((x >> 6) & 0x01C001C0u);
    case MmaCode::kE2M3: return (x & 0x80008000u) | ((x >> 6) & 0x01F001F0u);
    default: return (x & 0x80008000u) | ((x >> 5) & 0x03E003E0u);
  }
}
int bias_of(MmaCode c) {
  return c == MmaCode::kE4M3 ? 120 : (c == MmaCode::kE3M2 ? 124 : 126);
}

double bf16_value(uint32_t bits16) {
  const uint32_t f = bits16 << 16;
  float v;
  std::memcpy(&v, &f, 4);
  return v;
}

// The 8 placed BF16 pairs of K group q from the lane's words (mma_decode.cuh, decode_group).
void placed_group(MmaCode c, const uint32_t* w, int q, uint32_t (&a)[2][4]) {
  if (c == MmaCode::kE4M3) {
    for (int h = 0; h < 2; ++h) {
      for (int hi = 0; hi < 2; ++hi) {
        const uint32_t word = w[4 * q + 2 * h + hi];
        a[h][2 * hi] = place(c, word << 8);
        a[h][2 * hi + 1] = place(c, word);
      }
    }
  } else if (c == MmaCode::kE2M1) {
    // prmt with selector nibbles (index bits 2..0; bit 3 is 0 here): bytes 0..3 of lo, then 4..7 of hi.
    auto prmt = [](uint32_t lo, uint32_t hi, uint32_t sel) {
      const uint64_t bytes = (static_cast<uint64_t>(hi) << 32) | lo;
      uint32_t out = 0;
      for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((bytes >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
      return out;
    };
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = w[2 * q + h];
      const uint32_t u = (word & 0x33333333u) | 0x40404040u, v = ((word >> 2) & 0x33333333u) | 0x40404040u;
      a[h][0] = prmt(0xC0804000u, 0x81800100u, u);
      a[h][1] = prmt(0xC0804000u, 0x81800100u, v);
      a[h][2] = prmt(0xC0804000u, 0x81800100u, u >> 16);
      a[h][3] = prmt(0xC0804000u, 0x81800100u, v >> 16);
    }
  } else {
    const uint32_t A = w[3 * q], B = w[3 * q + 1], C = w[3 * q + 2];
    const uint32_t x[8] = {A, A << 6, B, B << 6, C, C << 6, ((A << 12) & 0xF000F000u) | ((B << 8) & 0x0C000C00u),
                           ((C << 12) & 0xF000F000u) | ((B << 10) & 0x0C000C00u)};
    for (int j = 0; j < 8; ++j) a[j / 4][j % 4] = place(c, x[j]);
  }
}

uint32_t code_at(MmaCode c, const uint8_t* row, int64_t col) {
  const int b = c == MmaCode::kE4M3 ? 8 : (c == MmaCode::kE2M1 ? 4 : 6);
  const int64_t bit = b * col;
  uint32_t v = row[bit >> 3];
  if ((bit & 7) + b > 8) v |= static_cast<uint32_t>(row[(bit >> 3) + 1]) << 8;
  return (v >> (bit & 7)) & ((1u << b) - 1u);
}

// The element-wise readers the large-M route widens with (mma_code_at, mma_scale_at) give back every
// checkpoint code and scale.
TEST(MmaLayout, ElementReadersGiveTheCheckpointsCodesAndScales) {
  for (MmaCode c : {MmaCode::kE4M3, MmaCode::kE2M3, MmaCode::kE3M2, MmaCode::kE2M1}) {
    for (Shape2 s : {Shape2{1, 32}, Shape2{17, 96}, Shape2{40, 544}}) {
      const MmaScale sc = c == MmaCode::kE2M1 && s.n == 17 ? MmaScale::kNv16 : MmaScale::kMx32;
      const MmaLayout l{c, sc, s.n, s.k};
      const int64_t row_bytes = storage_bytes(dtype_of(c), s.k);
      auto src = random_bytes(static_cast<size_t>(s.n * row_bytes), 5u + static_cast<uint32_t>(s.k));
      const std::vector<uint8_t> packed = cuda::mma_pack_weight(l, src.data(), row_bytes);
      const int64_t group = sc == MmaScale::kMx32 ? 32 : 16, groups = s.k / group;
      auto scales = random_bytes(static_cast<size_t>(s.n * groups), 11u + static_cast<uint32_t>(s.n));
      const std::vector<uint8_t> packed_scales = cuda::mma_pack_scales(l, scales.data());
      int64_t bad = 0;
      for (int64_t r = 0; r < s.n; ++r) {
        for (int64_t j = 0; j < s.k; ++j) {
          const uint32_t want = code_at(c, src.data() + r * row_bytes, j);
          if (cuda::mma_code_at(l, packed.data(), r, j) != want && bad++ < 5) {
            ADD_FAILURE() << "code " << static_cast<int>(c) << " (" << r << ", " << j << ")";
          }
        }
        for (int64_t g = 0; g < groups; ++g) {
          if (cuda::mma_scale_at(l, packed_scales.data(), r, g) != scales[static_cast<size_t>(r * groups + g)] &&
              bad++ < 5) {
            ADD_FAILURE() << "scale (" << r << ", " << g << ")";
          }
        }
      }
      EXPECT_EQ(bad, 0) << "code " << static_cast<int>(c) << " N=" << s.n << " K=" << s.k;
    }
  }
}

TEST(MmaLayout, RegisterDecodeGivesEveryCodesValueAtItsFragmentPosition) {
  for (MmaCode c : {MmaCode::kE4M3, MmaCode::kE2M3, MmaCode::kE3M2, MmaCode::kE2M1}) {
    const DType d = dtype_of(c);
    const MmaLayout l{c, MmaScale::kRow, 32, 512};
    const int64_t row_bytes = storage_bytes(d, l.k);
    auto src = random_bytes(static_cast<size_t>(l.n * row_bytes), 99u + static_cast<uint32_t>(c));
    if (c == MmaCode::kE4M3) {
      for (auto& b : src) {
        if ((b & 0x7F) == 0x7F) b = 0x00;  // no NaN codes in quantized data
      }
    }
    const std::vector<uint8_t> packed = cuda::mma_pack_weight(l, src.data(), row_bytes);
    const int words = static_cast<int>(cuda::mma_lane_bytes(c) / 4);
    int64_t bad = 0;
    for (int64_t tile = 0; tile < l.n_tiles(); ++tile) {
      for (int64_t slab = 0; slab < l.k_slabs(); ++slab) {
        const uint8_t* unit = packed.data() + (tile * l.k_slabs() + slab) * l.unit_bytes();
        for (int lane = 0; lane < 32; ++lane) {
          uint32_t w[16];
          for (int p = 0; p < words / 4; ++p) std::memcpy(&w[4 * p], unit + p * 512 + lane * 16, 16);
          for (int q = 0; q < 4; ++q) {
            uint32_t a[2][4];
            placed_group(c, w, q, a);
            for (int h = 0; h < 2; ++h) {
              for (int r = 0; r < 4; ++r) {
                for (int half = 0; half < 2; ++half) {
                  const int64_t row = tile * 16 + lane / 4 + 8 * (r & 1);
                  const int64_t col = slab * 128 + 32 * q + 16 * h + 2 * (lane % 4) + 8 * (r >> 1) + half;
                  const double got = std::ldexp(bf16_value((a[h][r] >> (16 * half)) & 0xFFFFu), bias_of(c));
                  const double want = decode(d, code_at(c, src.data() + row * row_bytes, col));
                  if (!(got == want && std::signbit(got) == std::signbit(want)) && bad++ < 5) {
                    ADD_FAILURE() << "code " << static_cast<int>(c) << " (" << row << ", " << col << "): decoded "
                                  << got << ", reference " << want;
                  }
                }
              }
            }
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace qlinear
