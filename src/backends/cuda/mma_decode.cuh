#pragma once
// Device code of the tensor-core decode GEMM (mma_decode.hpp has the operands, layout/mma_layout.hpp the
// weight layout).
//
// Work split. A block is 8 warps: 4 along N (each owning NT 16-row A tiles) times 2 along K. The block walks
// its K range (one split of the K steps when split-K is on) in steps of 256 K through a STAGES-deep cp.async
// pipeline; per stage it copies
//   weights   its 4 NT tiles x 2 slabs of packed codes (cp.async.cg: L1 bypassed; no L2 eviction hint, see
//             cp_async16)
//   scales    the same units' scale records (MX / NVFP4)
//   x         8 TN token rows x 256 K of BF16 (zero-filled beyond M and K), swizzled: 16-byte chunk c of
//             row r at c ^ (r & 7), so the 8 rows one ldmatrix reads hit 8 different bank groups
// and warp (wn, wk) multiplies its tiles with slab wk of the stage: per 32-wide K group it loads the token
// fragments with ldmatrix.x4, decodes its A fragments from the lane's packed words and issues TN MMAs per
// 16x16 tile. The two K warps of a tile add their sums through shared memory at the end; with split-K the
// splits of an N block then add up in a thread-block cluster (rank 0 in rank order) or write FP32 partial
// sums for mma_decode_reduce_kernel.
//
// After the activation pass (quantized activations) the kernel is a programmatic dependent launch: the
// first stages' weight and scale copies go out before griddepcontrol.wait, the activation copies after it,
// so the launch and the first weight bytes overlap the pass.
//
// Decode, exactly. A code's sign and magnitude bits are moved into a BF16 (sign to bit 15, exponent and
// mantissa bits to the bottom of BF16's exponent and the top of its mantissa): the result is the code's value
// times 2^-B (B = 120 E4M3, 126 E2M3, 124 E3M2, 126 E2M1), subnormal codes becoming BF16 subnormals. One
// mul.rn.bf16x2 by a power of two then makes the real value (subnormal operands are supported by the BF16
// multiply, and the product is exact whenever it is a normal BF16, which every code value times a power of
// two in range is):
//   kRow   factor 2^B; the f32 per-channel scale multiplies the FP32 sum in the epilogue.
//   kMx32, fold: factor 2^(B + s - 127) with s the E8M0 scale byte of the row's 32-group: the product is the
//          weight's exact value, a normal BF16, when s is in mma_fold_range (checked for the whole layer at
//          process time; 1 <= B + s <= 254 keeps the factor itself a normal BF16).
//   kMx32, promoted (a layer with any scale outside that range): factor 2^B, and the group's FP32 partial
//          sum is multiplied by 2^(s - 127) (exact) before it is added to the accumulator.
//   kNv16  factor bf16(e4m3_scale * 2^118): E2M1 (2 significant bits) times E4M3 (4) has at most 6
//          significant bits, and |value| * 2^-8 lies in [2^-18, 2^4], so the product is exact; the
//          epilogue divides by g / 2^8 (its row factor, mma_epilogue_math.hpp).
// The tensor core multiplies BF16 pairs exactly and accumulates in FP32; x is used as given.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>

#include <atomic>

#include "backends/cuda/fp_codec.cuh"
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_epilogue_math.hpp"
#include "backends/cuda/mma_sync_ptx.cuh"

namespace qlinear::cuda::mma_detail {

constexpr int kWarpsN = 4, kWarpsK = 2, kThreads = 32 * kWarpsN * kWarpsK;
constexpr int kStageK = static_cast<int>(kMmaPadK);  // K per stage: one slab per K warp
static_assert(kStageK == kWarpsK * kMmaSlabK, "a stage is one slab per K warp");

template <MmaCode C> struct CodeTraits;
template <> struct CodeTraits<MmaCode::kE4M3> { static constexpr int kBias = 120, kWords = 16; };
template <> struct CodeTraits<MmaCode::kE2M3> { static constexpr int kBias = 126, kWords = 12; };
template <> struct CodeTraits<MmaCode::kE3M2> { static constexpr int kBias = 124, kWords = 12; };
template <> struct CodeTraits<MmaCode::kE2M1> { static constexpr int kBias = 126, kWords = 8; };

template <MmaCode C, MmaScale S, int TN, int NT, int STAGES>
struct Shape {
  static constexpr int kUnitBytes = 32 * 4 * CodeTraits<C>::kWords;
  static constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  static constexpr int kRecords = static_cast<int>(kMmaScaleRecords);  // per unit
  static constexpr int kTiles = kWarpsN * NT;  // A tiles per block
  static constexpr int kWBytes = kTiles * kWarpsK * kUnitBytes;
  static constexpr int kSBytes = kTiles * kWarpsK * kRecords * kRec;
  static constexpr int kXRows = 8 * TN;
  static constexpr int kXBytes = kXRows * kStageK * 2;
  static constexpr int kStageBytes = kWBytes + kSBytes + kXBytes;
  static constexpr int kSmem = STAGES * kStageBytes;
  static constexpr int kRedBytes = kTiles * TN * 4 * 32 * 4;  // the K-warp reduction, after the pipeline
  static_assert(kWBytes % (16 * kThreads) == 0 || kWBytes < 16 * kThreads, "weight chunks per thread");
  static_assert(kRedBytes <= kSmem, "the reduction reuses the pipeline's shared memory");
  static_assert(kSmem <= 227 * 1024, "shared memory per block");
  static_assert(TN == 1 || TN == 2 || TN == 4 || TN == 8, "token tiles");
};

// ---- PTX wrappers: mma_sync_ptx.cuh; the BF16 MMA --------------------------------------------------------

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// ---- Decode ----------------------------------------------------------------------------------------------

// Code bits at 15..8 (E4M3), 15..12 (E2M1) or 15..10 (FP6) of each 16-bit half -> BF16 pair of value * 2^-B.
template <MmaCode C>
__device__ __forceinline__ uint32_t place(uint32_t x) {
  if constexpr (C == MmaCode::kE4M3) return (x & 0x80008000u) | ((x >> 4) & 0x07F007F0u);
  if constexpr (C == MmaCode::kE2M1) return (x & 0x80008000u) | ((x >> 6) & 0x01C001C0u);
  if constexpr (C == MmaCode::kE2M3) return (x & 0x80008000u) | ((x >> 6) & 0x01F001F0u);
  return (x & 0x80008000u) | ((x >> 5) & 0x03E003E0u);  // E3M2
}

// Two E2M1 codes as the BF16 pair `place` makes of them, from the byte selectors of the low 16 bits of sel
// (nibbles: low byte m1 m0 of code 0 (0..3), high byte 4 + 2 s + m2 of code 0 (4..7), the same for code 1):
// bytes 0..3 are 0x00 0x40 0x80 0xC0 (m1 m0 at bits 7..6), bytes 4..7 0x00 0x01 0x80 0x81 (s at 7, m2 at 0).
// (__byte_perm would mask the selector first: prmt itself reads bit 3 of a nibble as its sign mode, 0 here.)
// `lo` holds 0xC0804000 (e2m1_table_lo(): a register the kernel keeps; the other table is an immediate).
__device__ __forceinline__ uint32_t e2m1_placed(uint32_t lo, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(lo), "n"(0x81800100u), "r"(sel));
  return d;
}
// The low-byte table, loaded once per kernel from global memory: as a constant the compiler keeps it in a
// uniform register and copies it into a vector register before every prmt (one more instruction each).
__device__ const uint32_t kE2m1TableLo = 0xC0804000u;
__device__ __forceinline__ uint32_t e2m1_table_lo() { return __ldg(&kE2m1TableLo); }
// (a & b) | c in one lop3.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The 8 BF16 pairs (a[h][r]: tile h, register r) of K group q from the lane's words (mma_layout.hpp),
// multiplied by f[h][r & 1] (row g or g+8 factor of tile h).
template <MmaCode C>
__device__ __forceinline__ void decode_group(const uint32_t* w, int q, const uint32_t (&f)[2][2], uint32_t (&a)[2][4],
                                             uint32_t e2m1_lo) {
  if constexpr (C == MmaCode::kE4M3) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const uint32_t word = w[4 * q + 2 * h + hi];
        a[h][2 * hi] = bf16x2_mul(place<C>(word << 8), f[h][0]);
        a[h][2 * hi + 1] = bf16x2_mul(place<C>(word), f[h][1]);
      }
    }
  } else if constexpr (C == MmaCode::kE2M1) {
    // Each code's bits 1..0 select the low byte of its BF16 (bits 7..6: m1 m0 of `place`) and bits 3..2 the
    // high byte (bit 15 sign, bit 8 m2) from two 4-byte tables: one prmt per register, the selectors of
    // all four registers from two masks and two shifts (the layout puts the fields where the masks take them).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = w[2 * q + h];
      const uint32_t u = and_or(word, 0x33333333u, 0x40404040u);       // r0 (low 16 bits), r2 (high)
      const uint32_t v = and_or(word >> 2, 0x33333333u, 0x40404040u);  // r1, r3
      a[h][0] = bf16x2_mul(e2m1_placed(e2m1_lo, u), f[h][0]);
      a[h][1] = bf16x2_mul(e2m1_placed(e2m1_lo, v), f[h][1]);
      a[h][2] = bf16x2_mul(e2m1_placed(e2m1_lo, u >> 16), f[h][0]);
      a[h][3] = bf16x2_mul(e2m1_placed(e2m1_lo, v >> 16), f[h][1]);
    }
  } else {
    const uint32_t A = w[3 * q], B = w[3 * q + 1], Cw = w[3 * q + 2];
    const uint32_t x[8] = {A,
                           A << 6,
                           B,
                           B << 6,
                           Cw,
                           Cw << 6,
                           ((A << 12) & 0xF000F000u) | ((B << 8) & 0x0C000C00u),
                           ((Cw << 12) & 0xF000F000u) | ((B << 10) & 0x0C000C00u)};
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j / 4][j % 4] = bf16x2_mul(place<C>(x[j]), f[j / 4][j & 1]);
  }
}

__device__ __forceinline__ uint32_t bf16_pow2_pair(int biased_exponent) {  // 2^(e - 127) in both halves
  return static_cast<uint32_t>(biased_exponent) * 0x00800080u;
}

// The epilogue in f64 (mma_epilogue_math.hpp: the arithmetic, and why it gives the reference's output
// wherever the FP32 sum is exact): the factor of output (m, row).
__device__ __forceinline__ MmaFactor epilogue_factor(const MmaDecodeArgs& a, int64_t row, int64_t m) {
  return mma_epilogue_factor(a.row_factor != nullptr ? a.row_factor[row] : mma_no_row_factor(),
                             a.x_factor != nullptr ? a.x_factor[m * a.x_factor_stride] : mma_no_activation_factor());
}

// The same where the kernel knows its scale kind: only NVFP4 (kNv16) divides (its rows are always
// reciprocals); FP8 and MX factors are f32 multipliers. Each kernel carries one of the two paths. (The
// multiplier path keeps the run-time check of the row factor that it does not need: without it ptxas spills
// more in the promoted MX kernels, at 255 registers: 104 bytes of stack instead of 56 for E2M1.)
template <MmaScale S>
__device__ __forceinline__ MmaFactor epilogue_factor(const MmaDecodeArgs& a, int64_t row, int64_t m) {
  if constexpr (S == MmaScale::kNv16) {
    return epilogue_factor(a, row, m);
  } else {
    double s = a.row_factor != nullptr ? a.row_factor[row].scale : 1.0;
    if (a.x_factor != nullptr) s *= a.x_factor[m * a.x_factor_stride].scale;
    return {s, 0.0};
  }
}

template <MmaScale S>
__device__ __forceinline__ double epilogue_value(float sum, const MmaFactor& f, double bias) {
  if constexpr (S == MmaScale::kNv16) {
    return mma_epilogue_quotient(sum, f, bias);
  } else {
    return mma_epilogue_product(sum, f.scale, bias);
  }
}

// grid (N blocks, splits, M tiles). partial: null -> the epilogue writes out; else [splits][M][N] f32 sums.
// cluster_reduce: the grid's splits form clusters of (1, splits, 1) and add up in rank 0 (partial is null).
// PROMOTE (kMx32 only): the block scales multiply each group's FP32 partial sum instead of folding into the
// BF16 weights (layers whose scales leave the fold range).
// PROBE (benchmark only, one instantiation): the kProbe* bits of `probe` drop a part of each stage's work,
// so that the time without it shows what that part costs; the results are then wrong.
inline constexpr int kProbeNoDecode = 1;   // the packed words go to the MMA as they are (no decode, no scale)
inline constexpr int kProbeNoWeights = 2;  // the weight and scale copies are not issued (stale shared memory)
inline constexpr int kProbeNoMma = 4;      // each MMA replaced by one dependent FADD of its operands' bits
inline constexpr int kProbeNoLoop = 8;     // no K step at all: the launch, the prologue and the epilogue
template <MmaCode C, MmaScale S, int TN, int NT, int STAGES, bool PROMOTE, bool PROBE = false>
__global__ void __launch_bounds__(kThreads, TN <= 2 ? (STAGES <= 3 ? 3 : 2) : 1)
    mma_decode_kernel(const MmaDecodeArgs a, int steps_per_split, float* __restrict__ partial, bool cluster_reduce,
                      int probe) {
  static_assert(!PROMOTE || S == MmaScale::kMx32, "promotion is for E8M0 block scales");
  const bool copy_weights = !PROBE || (probe & kProbeNoWeights) == 0;
  const bool decode = !PROBE || (probe & kProbeNoDecode) == 0;
  const bool no_mma = PROBE && (probe & kProbeNoMma) != 0;
  using Sh = Shape<C, S, TN, NT, STAGES>;
  constexpr int kWords = CodeTraits<C>::kWords;
  extern __shared__ __align__(128) uint8_t smem[];
  // With partial sums, the reduction after this grid is a programmatic dependent launch: it may start now
  // and waits (griddepcontrol.wait) for this grid's completion before it reads them.
  if (partial != nullptr) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp % kWarpsN, wk = warp / kWarpsN;
  const int64_t n_tiles = a.layout.n_tiles(), k_slabs = a.layout.k_slabs();
  const int64_t n = a.layout.n, k = a.layout.k;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * Sh::kTiles;
  const int64_t m0 = static_cast<int64_t>(blockIdx.z) * Sh::kXRows;
  const int total_steps = static_cast<int>(k_slabs / kWarpsK);
  const int step0 = blockIdx.y * steps_per_split;
  const int steps = PROBE && (probe & kProbeNoLoop) != 0 ? 0 : max(0, min(steps_per_split, total_steps - step0));

  // Every stage copies the same chunks from addresses that advance by one step: the per-thread source
  // offsets (at step 0 of this split) are computed once.
  constexpr int kTileChunks = kWarpsK * Sh::kUnitBytes / 16;  // a tile's two slabs: one contiguous run
  constexpr int kWChunks = Sh::kTiles * kTileChunks;
  constexpr int kWPerThread = (kWChunks + kThreads - 1) / kThreads;
  constexpr int kSTileChunks = kWarpsK * Sh::kRecords * Sh::kRec / 16;
  constexpr int kSChunks = Sh::kTiles * kSTileChunks;
  constexpr int kXChunks = Sh::kXRows * 32;  // 32 chunks of 8 BF16 per row
  constexpr int kXPerThread = (kXChunks + kThreads - 1) / kThreads;
  const uint8_t* wsrc[kWPerThread];
#pragma unroll
  for (int j = 0; j < kWPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t tile = min(tile0 + i / kTileChunks, n_tiles - 1);
    wsrc[j] = a.w + (tile * k_slabs + static_cast<int64_t>(step0) * kWarpsK) * Sh::kUnitBytes + (i % kTileChunks) * 16;
  }
  constexpr int kSPerThread = (kSChunks + kThreads - 1) / kThreads;
  const uint8_t* ssrc[kSPerThread > 0 ? kSPerThread : 1] = {};
  if constexpr (Sh::kRec > 0) {
#pragma unroll
    for (int j = 0; j < kSPerThread; ++j) {
      const int i0 = threadIdx.x + j * kThreads, i = i0 < kSChunks ? i0 : 0;
      const int64_t tile = min(tile0 + i / kSTileChunks, n_tiles - 1);
      ssrc[j] = a.w_scale + (tile * k_slabs + static_cast<int64_t>(step0) * kWarpsK) * Sh::kRecords * Sh::kRec +
                (i % kSTileChunks) * 16;
    }
  }
  static_assert(kSChunks % kThreads == 0 || kSChunks < kThreads, "scale chunks per thread");
  const __nv_bfloat16* xsrc[kXPerThread];
  bool xrow_ok[kXPerThread];
#pragma unroll
  for (int j = 0; j < kXPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t m = m0 + i / 32;
    xrow_ok[j] = i < kXChunks && m < a.m;
    xsrc[j] = static_cast<const __nv_bfloat16*>(a.x) + (xrow_ok[j] ? m * a.ld_x : 0) + (i % 32) * 8;
  }

  // A stage's weights and scales (never written by a kernel before this one) and its activations.
  auto load_weights = [&](int buf, int step) {
    if (!copy_weights) return;
    uint8_t* st = smem + buf * Sh::kStageBytes;
    const int64_t wstep = static_cast<int64_t>(step) * kWarpsK * Sh::kUnitBytes;
#pragma unroll
    for (int j = 0; j < kWPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (kWChunks % kThreads == 0 || i < kWChunks) cp_async16(st + i * 16, wsrc[j] + wstep);
    }
    if constexpr (Sh::kRec > 0) {
#pragma unroll
      for (int j = 0; j < kSPerThread; ++j) {
        const int i = threadIdx.x + j * kThreads;
        if (i < kSChunks) {
          cp_async16(st + Sh::kWBytes + i * 16, ssrc[j] + static_cast<int64_t>(step) * kWarpsK * Sh::kRecords * Sh::kRec);
        }
      }
    }
  };
  auto load_x = [&](int buf, int step) {
    uint8_t* st = smem + buf * Sh::kStageBytes;
    const int64_t kcol0 = (step0 + step) * static_cast<int64_t>(kStageK);
#pragma unroll
    for (int j = 0; j < kXPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (kXChunks % kThreads != 0 && i >= kXChunks) continue;
      const int r = i / 32, c = i % 32;
      const bool ok = xrow_ok[j] && kcol0 + c * 8 < k;
      cp_async16_zfill(st + Sh::kWBytes + Sh::kSBytes + (r * 32 + (c ^ (r & 7))) * 16, ok ? xsrc[j] + kcol0 : xsrc[j],
                       ok ? 16 : 0);
    }
  };

  float acc[NT][TN][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int tt = 0; tt < TN; ++tt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][tt][e] = 0.0f;

  // The first stages' weights go out before the wait for the kernel that writes x (programmatic dependent
  // launch: a no-op when launched without it), so they stream while that kernel finishes; the groups stay
  // one per stage (group 0 also holds the later stages' weights, which were issued first anyway).
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load_weights(s, s);
  }
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load_x(s, s);
    cp_async_commit();
  }

  constexpr int kBias = CodeTraits<C>::kBias;
  const uint32_t e2m1_lo = C == MmaCode::kE2M1 ? e2m1_table_lo() : 0u;
  for (int it = 0; it < steps; ++it) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage `it` landed for every thread; every warp is done with stage it - 1
    if (it + STAGES - 1 < steps) {
      load_weights((it + STAGES - 1) % STAGES, it + STAGES - 1);
      load_x((it + STAGES - 1) % STAGES, it + STAGES - 1);
    }
    cp_async_commit();

    const uint8_t* st = smem + (it % STAGES) * Sh::kStageBytes;
    const uint8_t* xs = st + Sh::kWBytes + Sh::kSBytes;
    uint32_t w[NT][kWords];
    uint32_t sc[NT][Sh::kRec > 0 ? Sh::kRec / 4 : 1];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int unit = (wn * NT + j) * kWarpsK + wk;
      const uint8_t* u = st + unit * Sh::kUnitBytes;
#pragma unroll
      for (int p = 0; p < kWords / 4; ++p) {
        const uint4 v = *reinterpret_cast<const uint4*>(u + p * 512 + lane * 16);
        w[j][4 * p] = v.x;
        w[j][4 * p + 1] = v.y;
        w[j][4 * p + 2] = v.z;
        w[j][4 * p + 3] = v.w;
      }
      if constexpr (S == MmaScale::kMx32) {
        const uint2 v = *reinterpret_cast<const uint2*>(st + Sh::kWBytes + (unit * Sh::kRecords + lane / 4) * 8);
        sc[j][0] = v.x;
        sc[j][1] = v.y;
      } else if constexpr (S == MmaScale::kNv16) {
        const uint4 v = *reinterpret_cast<const uint4*>(st + Sh::kWBytes + (unit * Sh::kRecords + lane / 4) * 16);
        sc[j][0] = v.x;
        sc[j][1] = v.y;
        sc[j][2] = v.z;
        sc[j][3] = v.w;
      }
    }

#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // Token fragments of group q: matrices (k 0-7, 8-15, 16-23, 24-31) of 8 token rows each.
      uint32_t b[TN][4];
#pragma unroll
      for (int tt = 0; tt < TN; ++tt) {
        const int row = tt * 8 + (lane & 7);
        const int chunk = wk * 16 + 4 * q + (lane >> 3);
        ldmatrix_x4(b[tt], xs + (row * 32 + (chunk ^ (row & 7))) * 16);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t f[2][2];
        float promote[2] = {1.0f, 1.0f};
        if constexpr (S == MmaScale::kRow) {
          f[0][0] = f[0][1] = f[1][0] = f[1][1] = bf16_pow2_pair(kBias + 127);
        } else if constexpr (S == MmaScale::kMx32) {
          const int s_g = (sc[j][0] >> (8 * q)) & 0xFF, s_g8 = (sc[j][1] >> (8 * q)) & 0xFF;
          if constexpr (!PROMOTE) {
            f[0][0] = f[1][0] = bf16_pow2_pair(kBias + s_g);
            f[0][1] = f[1][1] = bf16_pow2_pair(kBias + s_g8);
          } else {
            f[0][0] = f[0][1] = f[1][0] = f[1][1] = bf16_pow2_pair(kBias + 127);
            promote[0] = codec::decode_e8m0(s_g);
            promote[1] = codec::decode_e8m0(s_g8);
          }
        } else {  // kNv16: group 2q + h of rows g (word 0..1) and g+8 (word 2..3)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int gi = 2 * q + h;
              const uint32_t code = (sc[j][2 * half + gi / 4] >> (8 * (gi % 4))) & 0xFF;
              const float v = codec::decode_e4m3(code) * 0x1p118f;
              const uint32_t bits = __bfloat16_as_ushort(__float2bfloat16_rn(v));
              f[h][half] = bits * 0x00010001u;
            }
          }
        }
        uint32_t af[2][4];
        if (decode) {
          decode_group<C>(w[j], q, f, af, e2m1_lo);
        } else {
#pragma unroll
          for (int r = 0; r < 8; ++r) af[r / 4][r % 4] = w[j][(2 * q + r) % kWords];
        }
#pragma unroll
        for (int tt = 0; tt < TN; ++tt) {
          if constexpr (PROMOTE) {
            float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_bf16(p, af[0], b[tt][0], b[tt][1]);
            mma_bf16(p, af[1], b[tt][2], b[tt][3]);
            acc[j][tt][0] = fmaf(p[0], promote[0], acc[j][tt][0]);
            acc[j][tt][1] = fmaf(p[1], promote[0], acc[j][tt][1]);
            acc[j][tt][2] = fmaf(p[2], promote[1], acc[j][tt][2]);
            acc[j][tt][3] = fmaf(p[3], promote[1], acc[j][tt][3]);
          } else if (no_mma) {  // probe: one dependent add per MMA, keeping the operands live
            acc[j][tt][0] += __uint_as_float((af[0][0] ^ af[1][3] ^ b[tt][0] ^ b[tt][3]) & 0x3F7FFFFFu);
          } else {
            mma_bf16(acc[j][tt], af[0], b[tt][0], b[tt][1]);
            mma_bf16(acc[j][tt], af[1], b[tt][2], b[tt][3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // The K warps' sums: wk = 1 hands its accumulators to wk = 0 through shared memory ([value][lane]).
  float* red = reinterpret_cast<float*>(smem);
  auto red_at = [&](int j, int tt, int e) -> int { return (((wn * NT + j) * TN + tt) * 4 + e) * 32 + lane; };
  if (wk == 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int tt = 0; tt < TN; ++tt)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[red_at(j, tt, e)] = acc[j][tt][e];
  }
  __syncthreads();
  if (wk == 0) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int tt = 0; tt < TN; ++tt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][tt][e] += red[red_at(j, tt, e)];
  }
  if (cluster_reduce) {
    // The splits of this N block are one thread-block cluster (rank = split): each puts its block sums in its
    // shared memory, rank 0 adds the others' in rank order (the order of mma_decode_reduce_kernel, so the
    // result is the same bit for bit) and writes the output; no scratch, no second launch.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __syncthreads();  // wk = 0 has read its partner's sums: the memory takes the block's
    if (wk == 0) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int tt = 0; tt < TN; ++tt)
#pragma unroll
          for (int e = 0; e < 4; ++e) red[red_at(j, tt, e)] = acc[j][tt][e];
    }
    cluster.sync();
    const unsigned rank = cluster.block_rank();
    if (rank == 0 && wk == 0) {
      for (unsigned r = 1; r < cluster.num_blocks(); ++r) {
        const float* other = cluster.map_shared_rank(red, r);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int tt = 0; tt < TN; ++tt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][tt][e] += other[red_at(j, tt, e)];
      }
    }
    cluster.sync();  // the other ranks' shared memory stays until rank 0 has read it
    if (rank != 0) return;
  }
  if (wk == 1) return;

  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int tt = 0; tt < TN; ++tt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = acc[j][tt][e];
        const int64_t row = (tile0 + wn * NT + j) * kMmaTileN + g + 8 * (e >> 1);
        const int64_t m = m0 + tt * 8 + 2 * t + (e & 1);
        if (row >= n || m >= a.m) continue;
        if (partial != nullptr) {
          partial[(static_cast<int64_t>(blockIdx.y) * a.m + m) * n + row] = v;
          continue;
        }
        const double bias = a.bias != nullptr ? load_bias(a.bias, a.bias_dtype, row) : 0.0;
        store_out(a.out, a.out_dtype, m * n + row, epilogue_value<S>(v, epilogue_factor<S>(a, row, m), bias));
      }
    }
  }
}

// The largest L2 access policy window of the current device in bytes (0: none), read once per device.
int max_access_policy_window();

// Sums the splits in order 0, 1, ... and applies the row scale, bias and output cast.
__global__ void mma_decode_reduce_kernel(const MmaDecodeArgs a, int splits, const float* __restrict__ partial);

template <MmaCode C, MmaScale S, int TN, int NT, int STAGES, bool PROMOTE, bool PROBE = false>
Status launch_config(const MmaDecodeArgs& a, int splits, float* partial, Stream stream) {
  using Sh = Shape<C, S, TN, NT, STAGES>;
  auto kernel = mma_decode_kernel<C, S, TN, NT, STAGES, PROMOTE, PROBE>;
  const int probe = PROBE ? mma_decode_forced().small_m_probe : 0;
  // The shared-memory limit is a per-device attribute of the kernel: set once on every device used.
  static std::atomic<uint64_t> attr_set{0};
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((attr_set.load(std::memory_order_acquire) & bit) == 0) {
    QL_RETURN_IF_ERROR(check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kSmem),
                             "cudaFuncSetAttribute(mma_decode_kernel, MaxDynamicSharedMemorySize)"));
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  const int64_t n_blocks = (a.layout.n_tiles() + Sh::kTiles - 1) / Sh::kTiles;
  const int64_t m_tiles = (a.m + Sh::kXRows - 1) / Sh::kXRows;
  const int total_steps = static_cast<int>(a.layout.k_slabs() / kWarpsK);
  const int per_split = (total_steps + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(splits), static_cast<unsigned>(m_tiles));
  const bool cluster = splits > 1 && partial == nullptr;
  // M <= 16: the weights read once, marked streaming (evict first) in the L2 through an access policy
  // window on the launch, so that they replace each other rather than lines other kernels left there
  // (dirty ones cost a write-back: measured 7-10 us per call after a write of the L2 at 70B shapes).
  const int window = a.m <= 16 && !mma_decode_forced().no_l2_streaming ? max_access_policy_window() : 0;
  if (!cluster && !a.programmatic && window <= 0) {
    kernel<<<grid, kThreads, Sh::kSmem, stream>>>(a, per_split, partial, false, probe);
    QL_CUDA_CHECK_LAUNCH("mma_decode_kernel");
    return Status::ok();
  }
  // Split-K without partial sums: the splits of an N block are one cluster (at most kMmaMaxClusterSplits).
  // After the activation pass: a programmatic dependent launch (the kernel waits for it before reading x).
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Sh::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[3];
  unsigned n_attr = 0;
  if (window > 0) attr[n_attr++] = streaming_window_attr(a.w, a.layout.weight_bytes(), window);
  if (cluster) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = 1;
    attr[n_attr].val.clusterDim.y = static_cast<unsigned>(splits);
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  if (a.programmatic) attr[n_attr++] = programmatic_launch_attr();
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return check(cudaLaunchKernelEx(&cfg, kernel, a, per_split, partial, cluster, probe),
               "cudaLaunchKernelEx(mma_decode_kernel, split-K cluster / programmatic / L2 window)");
}

// The instantiations of one code: the tile configurations of the tile table (mma_decode.cu) for layers
// whose scales fold (or need none), and one configuration (64 tokens) for MX layers with promoted scales.
template <MmaCode C, MmaScale S>
Status launch_scale(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream) {
  if constexpr (S == MmaScale::kMx32) {
    if (!a.fold) return launch_config<C, S, 8, 1, 3, true>(a, splits, partial, stream);
  }
  if (mma_decode_forced().small_m_probe != 0) {
    // The probes exist for one configuration (MXFP4, 8 tokens, 64-row blocks, 4 stages): timing only.
    if constexpr (C == MmaCode::kE2M1 && S == MmaScale::kMx32) {
      if (t.token_tiles == 1 && t.n16_per_warp == 1 && t.stages == 4) {
        return launch_config<C, S, 1, 1, 4, false, true>(a, splits, partial, stream);
      }
    }
    return Status::error("mma_decode: the small-M probes are built for MXFP4 weights with folded scales at "
                         "1-8 tokens in 64-row blocks of 4 stages only");
  }
#define QL_MMA_CONFIG(TN_, NT_, STAGES_)                                              \
  if (t.token_tiles == TN_ && t.n16_per_warp == NT_ && t.stages == STAGES_) {         \
    return launch_config<C, S, TN_, NT_, STAGES_, false>(a, splits, partial, stream); \
  }
  QL_MMA_CONFIG(1, 1, 4)
  QL_MMA_CONFIG(1, 1, 3)
  QL_MMA_CONFIG(2, 1, 4)
  QL_MMA_CONFIG(2, 1, 3)
  QL_MMA_CONFIG(8, 1, 3)
  QL_MMA_CONFIG(1, 2, 4)
  QL_MMA_CONFIG(2, 2, 4)
  QL_MMA_CONFIG(8, 2, 3)
#undef QL_MMA_CONFIG
  return Status::error("mma_decode: tile configuration (" + std::to_string(t.token_tiles) + " token tiles, " +
                       std::to_string(t.n16_per_warp) + " A tiles per warp, " + std::to_string(t.stages) +
                       " stages) is not instantiated (mma_decode.cuh, launch_scale)");
}

}  // namespace qlinear::cuda::mma_detail
