// Host side of the swap-AB wgmma decode GEMM (mma_decode_wgmma.hpp): where it runs, its token tile, the
// split of K and the grid, the launch and the split-K reduction (the mma.sync kernel's, in split order).
#include "backends/cuda/mma_decode_wgmma.hpp"

#include <algorithm>
#include <cmath>

#include "backends/cuda/mma_decode.cuh"
#include "backends/cuda/mma_decode_wgmma.cuh"

namespace qlinear::cuda {

namespace {

// Where the wgmma kernel is the default: every code, 17 <= M <= 128, and up to M = 256 on layers with
// K >= 8192 and N >= 8192. At M = 64 it measured 1.1-1.5x the mma.sync kernel on the 70B layers (FP8,
// MXFP8, MXFP6, MXFP4, NVFP4, W4A4; CudaMmaDecodeBench) and at M = 256 1.5-1.9x the widen route on them.
// On the 8B layers at M = 256 `qlinear bench` measured the widen route faster (FP8: qkv 45 us against 90,
// o 32 / 77, down 59 / 101, gate_up 122 / 174; the MX codes alike): their 256-token tiles leave 32-48
// units of 128 rows for 132 SMs, and a widened BF16 copy of a small weight is read back from the L2.
// MX layers whose scales do not fold keep the mma.sync kernel (mma_wgmma_supports).
constexpr int64_t kWgmmaMinM = 17, kWgmmaMaxM = 256, kWgmmaSmallLayerMaxM = 128, kWgmmaLargeDim = 8192;
constexpr int kWgmmaMinStagesPerSplit = 8;  // 512 K

}  // namespace

bool mma_wgmma_supports(const MmaDecodeArgs& a, std::string* why_not) {
  if (a.layout.scale == MmaScale::kMx32 && !a.fold) {
    if (why_not != nullptr) *why_not = "MX scales outside the fold range are promoted per 32";
    return false;
  }
  return true;
}

bool mma_takes_wgmma_route(const MmaDecodeArgs& a) {
  if (a.m < kWgmmaMinM || !mma_wgmma_supports(a)) return false;
  const int forced = mma_decode_forced().wgmma;
  if (forced != 0) return forced > 0;
  if (const MmaDecodeTunedEntry* e = mma_tuned_choice(a)) return e->route == MmaDecodeRoute::kWgmma;
  const bool large = a.layout.k >= kWgmmaLargeDim && a.layout.n >= kWgmmaLargeDim;
  return a.m <= (large ? kWgmmaMaxM : kWgmmaSmallLayerMaxM);
}

// Token tile by M; 128 weight rows per unit (256 only when forced or tuned: measured faster on some layers,
// slower on others); the tuned table's tokens, rows and splits where it has the layer (mma_tuned_choice).
// Split K only while the units leave SMs idle: the most splits that still fit one wave (at least
// 512 K each, FP32 partial sums no larger than the weights). Measured on the H200 side by side (70B qkv, o,
// down, gate_up at M = 64 and 256): this rule picked the fastest of 1, 2 and 4 splits on every layer;
// splitting past one wave lost up to 45% (gate_up M = 256: 385 us unsplit, 549 in 2 splits, 673 in 4), and
// the stream-K schedule (kept as a variant) lost 10-50% at M = 256, where blocks at different K positions
// stop sharing the activation boxes in the L2.
MmaWgmmaPlan mma_wgmma_plan(const MmaDecodeArgs& a) {
  const MmaDecodeForce& f = mma_decode_forced();
  MmaWgmmaPlan p;
  // A tuned entry is only taken with nothing forced: its fields stand in for the forced ones.
  const MmaDecodeTunedEntry* tuned = mma_tuned_choice(a);
  if (tuned != nullptr && tuned->route != MmaDecodeRoute::kWgmma) tuned = nullptr;
  const int want_tokens = tuned != nullptr ? tuned->tokens : f.wgmma_tokens;
  const int want_rows = tuned != nullptr ? tuned->rows : f.wgmma_rows;
  const int want_splits = tuned != nullptr ? tuned->splits : f.splits;
  p.smem_b = f.wgmma_smem_b > 0;
  if (p.smem_b) {  // 128 tokens per block; 256 weight rows unless 128 are asked for
    p.tokens = mma_wgmma::kSmemBTokens;
    p.rows = want_rows == 128 ? 128 : 256;
  } else {
    p.tokens = want_tokens != 0 ? want_tokens : (a.m <= 64 ? 64 : (a.m <= 128 ? 128 : 256));
    p.rows = p.tokens == 64 && want_rows == 256 ? 256 : 128;
  }
  const int tiles = p.rows / static_cast<int>(kMmaTileN);
  p.n_blocks = static_cast<int>((a.layout.n_tiles() + tiles - 1) / tiles);
  p.m_tiles = static_cast<int>((a.m + p.tokens - 1) / p.tokens);
  p.stages = f.wgmma_stages;
  const int total = static_cast<int>(a.layout.k_slabs() * 2);  // even
  // Blocks in flight: one per SM (a test may cap it to walk several units per block on small layers).
  const int64_t sms = std::max(1, f.wgmma_persist > 0 ? std::min(a.sm_count, f.wgmma_persist) : a.sm_count);
  auto per_split = [&](int s) { return (total / 2 + s - 1) / s * 2; };  // whole slabs per split
  auto count = [&](int s) { return (total + per_split(s) - 1) / per_split(s); };
  p.cluster = (f.wgmma_cluster == 2 || f.wgmma_cluster == 4) && f.wgmma_stream_k <= 0 && !p.smem_b ? f.wgmma_cluster : 1;
  const int64_t tiles_total = static_cast<int64_t>(p.n_blocks) * p.m_tiles;
  const int64_t pair_units = (p.n_blocks + p.cluster - 1) / p.cluster * int64_t{p.m_tiles};  // per split
  int best = 1;
  if (want_splits > 0) {
    best = count(std::min(want_splits, total / 2));
  } else {
    for (int s = 2; s <= 16 && pair_units * p.cluster * s <= sms && per_split(s) >= kWgmmaMinStagesPerSplit; ++s) {
      if (s * a.m * a.layout.n * 4 > a.layout.weight_bytes()) break;
      best = s;
    }
    best = count(best);
  }
  p.splits = best;
  p.stages_per_split = per_split(best);
  p.units = static_cast<int>(pair_units) * p.splits;  // row blocks, or row-block pairs
  const int64_t blocks = int64_t{p.units} * p.cluster;
  p.grid = static_cast<int>(f.wgmma_persist < 0 ? blocks : std::min<int64_t>(blocks, sms / p.cluster * p.cluster));
  // Stream-K (forced only): the whole waves of tiles but the last as they are, the rest in equal slab
  // ranges, one per block (32-bit slab arithmetic on the device).
  const int64_t k_slabs = total / 2;
  const int64_t dp = tiles_total >= 2 * sms ? (tiles_total / sms - 1) * sms : 0;
  const int64_t sk_slabs = (tiles_total - dp) * k_slabs;
  if (f.wgmma_stream_k > 0 && f.splits == 0 && p.cluster == 1 && !p.smem_b && sk_slabs * sms < (int64_t{1} << 31)) {
    p.splits = 1;
    p.stages_per_split = total;
    p.units = static_cast<int>(tiles_total);
    p.grid = static_cast<int>(std::min<int64_t>(sms, sk_slabs));
    p.stream_k = true;
    p.dp_units = static_cast<int>(dp);
    p.sk_slabs = sk_slabs;
  }
  return p;
}

int mma_wgmma_splits(const MmaDecodeArgs& a) { return mma_wgmma_plan(a).splits; }

std::string mma_wgmma_description(const MmaDecodeArgs& a) {
  const MmaWgmmaPlan p = mma_wgmma_plan(a);
  if (p.smem_b) {
    std::string why = "wgmma kernel, shared-memory B: " + std::to_string(p.tokens) + " tokens (wgmma M) x " +
                      std::to_string(p.rows) + " weight rows per block (decoded into a BF16 tile in shared memory "
                      "each 64 K stage), split-K " + std::to_string(p.splits) + ", " + std::to_string(p.units) +
                      " units on " + std::to_string(p.grid) + " persistent blocks";
    if (a.m > p.tokens) why += ", token tiles decode the weights again each";
    return why;
  }
  std::string why = "swap-AB wgmma kernel: " + std::to_string(p.tokens) + " tokens (wgmma N) x " +
                    std::to_string(p.rows) + " rows per unit (weights decoded into the register A operand), TMA "
                    "ring of 64 K stages, " +
                    (p.stream_k ? "stream-K (" + std::to_string(p.dp_units) + " of " + std::to_string(p.units) +
                                      " tiles whole, the rest in equal K ranges) on "
                                : "split-K " + std::to_string(p.splits) + ", " + std::to_string(p.units) +
                                      " units on ") +
                    std::to_string(p.grid) + " persistent blocks";
  if (a.m > p.tokens) why += ", token tiles decode the weights again each";
  return why;
}

namespace {

// The stream-K tiles covered by more than one block (grid.x: the stream-K tiles; the rest return at once):
// their pieces added in block order, then the epilogue of the kernel (row scale, activation factor, bias).
__global__ void mma_wgmma_streamk_fixup(const MmaDecodeArgs a, MmaWgmmaPlan p, const float* __restrict__ pieces) {
  const int64_t k_slabs = a.layout.k_slabs(), tile = blockIdx.x;
  auto block_of = [&](int64_t slab) {  // the block whose range holds this slab (every range is non-empty)
    const int64_t guess = slab * p.grid / p.sk_slabs;
    int c = static_cast<int>(guess < p.grid - 1 ? guess : p.grid - 1);
    while (c + 1 < p.grid && mma_wgmma::sk_range_start(p.sk_slabs, p.grid, c + 1) <= slab) ++c;
    while (c > 0 && mma_wgmma::sk_range_start(p.sk_slabs, p.grid, c) > slab) --c;
    return c;
  };
  const int c0 = block_of(tile * k_slabs), c1 = block_of((tile + 1) * k_slabs - 1);
  if (c0 == c1) return;  // one block covered the tile and wrote its outputs
  const int unit = p.dp_units + static_cast<int>(tile), b = unit % p.n_blocks, z = unit / p.n_blocks;
  for (int e = blockIdx.y * blockDim.x + threadIdx.x; e < p.tokens * p.rows; e += gridDim.y * blockDim.x) {
    const int rr = e % p.rows, mm = e / p.rows;
    const int64_t row = static_cast<int64_t>(b) * p.rows + rr, m = static_cast<int64_t>(z) * p.tokens + mm;
    if (row >= a.layout.n || m >= a.m) continue;
    float v = 0.0f;
    for (int c = c0; c <= c1; ++c) {
      const int slot = 2 * c + (mma_wgmma::sk_range_start(p.sk_slabs, p.grid, c) / k_slabs == tile ? 0 : 1);
      v += pieces[(static_cast<int64_t>(slot) * p.tokens + mm) * p.rows + rr];
    }
    const double bias = a.bias != nullptr ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0;
    mma_detail::store_out(a.out, a.out_dtype, m * a.layout.n + row,
                          mma_epilogue_value(v, mma_detail::epilogue_factor(a, row, m), bias));
  }
}

}  // namespace

Status launch_mma_wgmma(const MmaDecodeArgs& a, Stream stream) {
  if (a.m == 0 || a.layout.n == 0) return Status::ok();
  std::string why;
  if (!mma_wgmma_supports(a, &why)) return Status::error("mma_decode wgmma: " + why);
  if (a.ld_x % 8 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0) {
    return Status::error("mma_decode wgmma: activation rows must start 16-byte aligned (TMA)");
  }
  if (reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w_scale) % 16 != 0) {
    return Status::error("mma_decode wgmma: packed weights and scales must be 16-byte aligned (TMA)");
  }
  const MmaWgmmaPlan p = mma_wgmma_plan(a);
  Scratch partial;
  if (p.stream_k) {  // two piece slots per block
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * 2 * p.grid * p.tokens * p.rows, stream));
  } else if (p.splits > 1) {
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * p.splits * a.m * a.layout.n, stream));
  }
  float* ps = p.stream_k || p.splits > 1 ? partial.as<float>() : nullptr;
  switch (a.layout.code) {
    case MmaCode::kE4M3:
      QL_RETURN_IF_ERROR(p.smem_b ? mma_wgmma::launch_ss_e4m3(a, p, ps, stream) : mma_wgmma::launch_e4m3(a, p, ps, stream));
      break;
    case MmaCode::kE2M3:
    case MmaCode::kE3M2:
      QL_RETURN_IF_ERROR(p.smem_b ? mma_wgmma::launch_ss_fp6(a, p, ps, stream) : mma_wgmma::launch_fp6(a, p, ps, stream));
      break;
    case MmaCode::kE2M1:
      QL_RETURN_IF_ERROR(p.smem_b ? mma_wgmma::launch_ss_e2m1(a, p, ps, stream) : mma_wgmma::launch_e2m1(a, p, ps, stream));
      break;
  }
  if (p.stream_k) {
    const int sk_tiles = p.units - p.dp_units;
    const dim3 grid(static_cast<unsigned>(sk_tiles), static_cast<unsigned>(std::min(16, p.tokens * p.rows / 256)));
    mma_wgmma_streamk_fixup<<<grid, 256, 0, stream>>>(a, p, ps);
    QL_CUDA_CHECK_LAUNCH("mma_wgmma_streamk_fixup");
  } else if (ps != nullptr) {
    const int64_t total = a.m * a.layout.n;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4 * a.sm_count));
    mma_detail::mma_decode_reduce_kernel<<<blocks, 256, 0, stream>>>(a, p.splits, ps);
    QL_CUDA_CHECK_LAUNCH("mma_decode_reduce_kernel (wgmma splits)");
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
