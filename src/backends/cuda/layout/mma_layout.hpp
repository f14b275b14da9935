#pragma once
// The weight and scale layouts of the tensor-core decode kernel (mma_decode.cuh), made once on the host by
// process_weights_after_loading, and their inverses. Host C++ only (built with or without CUDA, so the
// round trip is tested on every machine).
//
// The kernel computes y^T = W x^T with mma.sync m16n8k16 (BF16 in, FP32 accumulate): W is the A operand
// (16 weight rows x 16 K), the tokens are the 8 columns of B. Lane l of a warp holds, for one 16x16 A tile,
// the values at rows g, g+8 (g = l / 4) and K columns 2t, 2t+1, 2t+8, 2t+9 (t = l % 4) in four BF16x2
// registers:
//
//   reg 0: (g,   2t) (g,   2t+1)      reg 2: (g,   2t+8) (g,   2t+9)      (low half, high half)
//   reg 1: (g+8, 2t) (g+8, 2t+1)      reg 3: (g+8, 2t+8) (g+8, 2t+9)
//
// The weights are cut into units of 16 rows x 128 K (one "n16 tile" by one "k128 slab"), stored
//
//   [n16 tile][k128 slab][piece p < P][lane 0..31][16 bytes]
//
// so that a warp reads a unit with P coalesced 16-byte loads per lane, and each lane's bytes decode into its
// A fragments with a few shifts and masks (no shuffles). Within a unit, K group q (32 wide, q = 0..3) is two
// A tiles h = 0, 1; the 8 BF16 pairs (tile h, reg r) of a group are packed, per format:
//
//   E4M3 (P = 4): group q = words 4q .. 4q+3 of the lane (piece q); word 4q + 2h + (r >> 1) holds reg r of
//        tile h: rows g in bytes 0 (low) and 2 (high), rows g+8 in bytes 1 and 3 (a code at bits 15..8 of
//        each 16-bit half after `word << 8` resp. `word`).
//   E2M1 (P = 2): tile h of group q = word 2q + h (piece q / 2); each code is two 2-bit fields, which the
//        kernel turns into byte selectors of a prmt lookup (mma_decode.cuh, decode_group): reg r reads the
//        word from bit sh = 2 (r & 1) + 16 (r >> 1), its low-half code's bits 1..0 at sh + 0 and bits 3..2 at
//        sh + 4, its high-half code's at sh + 8 and sh + 12:
//          bits  0-1 r0 lo[1:0]  2-3 r1 lo[1:0]  4-5 r0 lo[3:2]  6-7 r1 lo[3:2]  8-15 the same for the high
//          halves; bits 16-31 the same for r2 and r3.
//   FP6  (P = 3): group q = words A, B, C = 3q, 3q+1, 3q+2; pair j = 4h + r has its two 6-bit codes at
//        j = 0: A[15:10], A[31:26]   j = 1: A[9:4], A[25:20]   j = 2, 3: B likewise   j = 4, 5: C likewise
//        j = 6: code bits 5..2 at A[3:0], A[19:16] and bits 1..0 at B[3:2], B[19:18]
//        j = 7: code bits 5..2 at C[3:0], C[19:16] and bits 1..0 at B[1:0], B[17:16]
//        (so every code lands at bits 15..10 of its half after at most two shifts and a mask).
//
// Scales, one record of S bytes per (unit, row pair g = lane / 4): MX E8M0 (S = 8): bytes 0..3 the scales of
// row g for the unit's 4 K groups, bytes 4..7 those of row g+8. NVFP4 E4M3 per 16 (S = 16): bytes 0..7 row
// g's 8 groups, 8..15 row g+8's. Stored [n16 tile][k128 slab][g < 8][S]: the 4 lanes of a row pair read the
// same record, so the scales cost their checkpoint bytes (1 per 32 codes, 1 per 16 for NVFP4) and no more.
//
// Padding: N to a multiple of 16 and K to a multiple of 256 (a block stage is two slabs) with zero codes;
// padded scales are 2^0 (E8M0 127, E4M3 0x38).
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define QL_MMA_HD __host__ __device__
#else
#define QL_MMA_HD
#endif

namespace qlinear::cuda {

enum class MmaCode : uint8_t { kE4M3, kE2M3, kE3M2, kE2M1 };
enum class MmaScale : uint8_t { kRow, kMx32, kNv16 };

inline constexpr int64_t kMmaTileN = 16;     // weight rows per A tile
inline constexpr int64_t kMmaSlabK = 128;    // K per unit
inline constexpr int64_t kMmaPadK = 256;     // K is padded to this (two slabs: one block stage)
inline constexpr int64_t kMmaLanes = 32;
inline constexpr int64_t kMmaScaleRecords = 8;  // scale records per unit: one per row pair (g, g+8)

// Bytes of one unit per lane: 64 (E4M3), 48 (FP6), 32 (E2M1).
constexpr int64_t mma_lane_bytes(MmaCode c) {
  return c == MmaCode::kE4M3 ? 64 : (c == MmaCode::kE2M1 ? 32 : 48);
}
constexpr int64_t mma_scale_record_bytes(MmaScale s) { return s == MmaScale::kMx32 ? 8 : (s == MmaScale::kNv16 ? 16 : 0); }

struct MmaLayout {
  MmaCode code = MmaCode::kE4M3;
  MmaScale scale = MmaScale::kRow;
  int64_t n = 0, k = 0;  // the checkpoint's shape
  constexpr int64_t n_tiles() const { return (n + kMmaTileN - 1) / kMmaTileN; }
  constexpr int64_t k_slabs() const { return (k + kMmaPadK - 1) / kMmaPadK * (kMmaPadK / kMmaSlabK); }
  constexpr int64_t unit_bytes() const { return kMmaLanes * mma_lane_bytes(code); }
  constexpr int64_t weight_bytes() const { return n_tiles() * k_slabs() * unit_bytes(); }
  constexpr int64_t scale_bytes() const { return n_tiles() * k_slabs() * kMmaScaleRecords * mma_scale_record_bytes(scale); }
};

// Where bits [code_shift, code_shift + bits) of one code sit among a lane's words of a unit.
struct MmaField {
  int word, shift, bits, code_shift;
};

// The (one or two) fields of the code at K group q, tile h, register r, half `half` (the table above).
inline QL_MMA_HD int mma_fields_of(MmaCode c, int q, int h, int r, int half, MmaField (&f)[2]) {
  const int hb = 16 * half;
  if (c == MmaCode::kE4M3) {
    f[0] = {4 * q + 2 * h + (r >> 1), 8 * ((r & 1) + 2 * half), 8, 0};
    return 1;
  }
  if (c == MmaCode::kE2M1) {
    const int sh = 2 * (r & 1) + 16 * (r >> 1) + 8 * half;
    f[0] = {2 * q + h, sh, 2, 0};
    f[1] = {2 * q + h, sh + 4, 2, 2};
    return 2;
  }
  const int j = 4 * h + r, a = 3 * q, b = 3 * q + 1, cw = 3 * q + 2;
  switch (j) {
    case 0: f[0] = {a, 10 + hb, 6, 0}; return 1;
    case 1: f[0] = {a, 4 + hb, 6, 0}; return 1;
    case 2: f[0] = {b, 10 + hb, 6, 0}; return 1;
    case 3: f[0] = {b, 4 + hb, 6, 0}; return 1;
    case 4: f[0] = {cw, 10 + hb, 6, 0}; return 1;
    case 5: f[0] = {cw, 4 + hb, 6, 0}; return 1;
    case 6: f[0] = {a, hb, 4, 2}; f[1] = {b, 2 + hb, 2, 0}; return 2;
    default: f[0] = {cw, hb, 4, 2}; f[1] = {b, hb, 2, 0}; return 2;
  }
}

// Byte offset of lane word w within a unit: [piece w / 4][lane][16 bytes].
inline QL_MMA_HD int64_t mma_word_offset(int lane, int w) { return (w / 4) * kMmaLanes * 16 + lane * 16 + (w % 4) * 4; }

// The code of checkpoint element (row, col) read back from the packed weights (row < n, col < k): the
// inverse of the packing, one element at a time (the large-M route widens from it on the device).
inline QL_MMA_HD uint32_t mma_code_at(const MmaLayout& l, const uint8_t* packed, int64_t row, int64_t col) {
  const int64_t tile = row / kMmaTileN, slab = col / kMmaSlabK;
  const int rr = static_cast<int>(row % kMmaTileN), kk = static_cast<int>(col % kMmaSlabK);
  const int g = rr % 8, q = kk / 32, h = (kk % 32) / 16, in16 = kk % 16;
  const int r = 2 * (in16 / 8) + rr / 8, t = (in16 % 8) / 2, half = in16 % 2;
  const uint8_t* unit = packed + (tile * l.k_slabs() + slab) * l.unit_bytes();
  MmaField f[2];
  const int nf = mma_fields_of(l.code, q, h, r, half, f);
  uint32_t code = 0;
  for (int i = 0; i < nf; ++i) {
    const uint8_t* p = unit + mma_word_offset(4 * g + t, f[i].word);
#if defined(__CUDA_ARCH__)
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);  // words are 4-byte aligned (units are)
#else
    const uint32_t w = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                       (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
#endif
    code |= ((w >> f[i].shift) & ((1u << f[i].bits) - 1u)) << f[i].code_shift;
  }
  return code;
}

// The block-scale byte of (row, K group) from the packed scales (kMx32: groups of 32, kNv16: of 16).
inline QL_MMA_HD uint8_t mma_scale_at(const MmaLayout& l, const uint8_t* packed, int64_t row, int64_t group) {
  const int64_t per_slab = l.scale == MmaScale::kMx32 ? 4 : 8, rec = mma_scale_record_bytes(l.scale);
  const int64_t tile = row / kMmaTileN, slab = group / per_slab;
  const int rr = static_cast<int>(row % kMmaTileN);
  const uint8_t* p = packed + ((tile * l.k_slabs() + slab) * kMmaScaleRecords + rr % 8) * rec;
  return p[(rr / 8) * per_slab + group % per_slab];
}

// The checkpoint's row-major codes ([N, storage_bytes(code dtype, K)]: bytes, two E2M1 per byte low nibble
// first, FP6 as a little-endian stream of 6-bit fields) in the kernel's layout, and back.
std::vector<uint8_t> mma_pack_weight(const MmaLayout& l, const uint8_t* row_major, int64_t row_bytes);
void mma_unpack_weight(const MmaLayout& l, const uint8_t* packed, uint8_t* row_major, int64_t row_bytes);

// Block scales ([N, K / group] bytes, E8M0 or E4M3) in the kernel's layout, and back.
std::vector<uint8_t> mma_pack_scales(const MmaLayout& l, const uint8_t* row_major);
void mma_unpack_scales(const MmaLayout& l, const uint8_t* packed, uint8_t* row_major);

}  // namespace qlinear::cuda
