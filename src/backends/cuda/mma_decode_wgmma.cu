// Host side of the swap-AB wgmma decode GEMM (mma_decode_wgmma.hpp): where it runs, its token tile, the
// split of K and the grid, the launch and the split-K reduction (the mma.sync kernel's, in split order).
#include "backends/cuda/mma_decode_wgmma.hpp"

#include <algorithm>
#include <cmath>

#include "backends/cuda/mma_decode.cuh"
#include "backends/cuda/mma_decode_wgmma.cuh"

namespace qlinear::cuda {

namespace {

// The M range the wgmma kernel runs by default, per measured (code, scale) pair (H200, llama3-8b and -70b
// shapes at M = 32, 64, 128, 256 against the mma.sync kernel and the widen route in one process): FP8
// per-channel won at every M measured but 70b.down / gate_up at M = 64 (within 7%); MXFP4 lost at M <= 64
// (its decode-bound stages) and won at 128 and 256 on all but the two smallest 8B layers at 256. MXFP8,
// MXFP6 and NVFP4 keep the mma.sync kernel unless forced.
struct WgmmaRange {
  int64_t min_m, max_m;
};
constexpr WgmmaRange kDefaultFp8Channel{17, 256}, kDefaultMxfp4{65, 256}, kNotByDefault{1, 0};
constexpr int64_t kWgmmaMinM = 17;  // below: the M <= 16 kernels
constexpr int kWgmmaMinStagesPerSplit = 8;  // 512 K

// The cost model the split choice minimizes (ns; a rough model of the H200, what matters is the ranking):
// each block streams its stages at the slower of its tensor work and one SM's share of the weight traffic,
// the whole grid no faster than the DRAM, and split K adds the FP32 partial sums' traffic and a launch.
constexpr double kTensorNsPerToken = 3.2;     // a 64-K stage of 128 rows: ~1400 cycles at 256 tokens
constexpr double kSmBytesPerNs = 40.0;        // one SM's weight stream
constexpr double kDramBytesPerNs = 3300.0;    // the whole GPU's
constexpr double kLaunchNs = 2000.0;

double stage_weight_bytes(const MmaLayout& l, int tiles) {
  const double unit = static_cast<double>(l.unit_bytes()) + kMmaScaleRecords * mma_scale_record_bytes(l.scale);
  return tiles * unit / 2;
}

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
  const WgmmaRange r = a.layout.code == MmaCode::kE4M3 && a.layout.scale == MmaScale::kRow   ? kDefaultFp8Channel
                       : a.layout.code == MmaCode::kE2M1 && a.layout.scale == MmaScale::kMx32 ? kDefaultMxfp4
                                                                                              : kNotByDefault;
  return a.m >= r.min_m && a.m <= r.max_m;
}

MmaWgmmaPlan mma_wgmma_plan(const MmaDecodeArgs& a) {
  const MmaDecodeForce& f = mma_decode_forced();
  MmaWgmmaPlan p;
  p.tokens = f.wgmma_tokens != 0 ? f.wgmma_tokens : (a.m <= 64 ? 64 : (a.m <= 128 ? 128 : 256));
  p.rows = p.tokens == 64 && f.wgmma_rows == 256 ? 256 : 128;
  const int tiles = p.rows / static_cast<int>(kMmaTileN);
  p.n_blocks = static_cast<int>((a.layout.n_tiles() + tiles - 1) / tiles);
  p.m_tiles = static_cast<int>((a.m + p.tokens - 1) / p.tokens);
  p.stages = f.wgmma_stages;
  const int total = static_cast<int>(a.layout.k_slabs() * 2);  // even
  const int64_t sms = std::max(1, a.sm_count);
  auto per_split = [&](int s) { return (total / 2 + s - 1) / s * 2; };  // whole slabs per split
  auto count = [&](int s) { return (total + per_split(s) - 1) / per_split(s); };
  const double w_stage = stage_weight_bytes(a.layout, tiles);
  const double t_stage = std::max(kTensorNsPerToken * p.tokens * p.rows / 128, w_stage / kSmBytesPerNs);
  const double all_bytes = w_stage * p.n_blocks * p.m_tiles * total;
  auto cost = [&](int s) {
    const int64_t units = static_cast<int64_t>(p.n_blocks) * p.m_tiles * s;
    const double waves = std::ceil(static_cast<double>(units) / static_cast<double>(sms));
    const double run = std::max(waves * (per_split(s) + 1) * t_stage, all_bytes / kDramBytesPerNs);
    const double partials = s > 1 ? (2.0 * s + 1) * a.m * a.layout.n * 4 / kDramBytesPerNs + kLaunchNs : 0;
    return run + partials;
  };
  int best = 1;
  double best_cost = cost(1);
  if (f.splits > 0) {
    best = count(std::min(f.splits, total / 2));
  } else {
    for (int s = 2; s <= 16 && per_split(s) >= kWgmmaMinStagesPerSplit; ++s) {
      if (count(s) != s) continue;  // the same split as a smaller count
      const double c = cost(s);
      if (c < best_cost * 0.97) {
        best = s;
        best_cost = c;
      }
    }
  }
  p.splits = best;
  p.stages_per_split = per_split(best);
  p.units = p.n_blocks * p.m_tiles * p.splits;
  p.grid = f.wgmma_persist < 0 ? p.units : static_cast<int>(std::min<int64_t>(p.units, sms));
  // Stream-K: the whole waves of tiles but the last as they are, the rest in equal slab ranges, one per SM;
  // its pieces (at most two per block) cost their FP32 sums and a fixup launch.
  const int64_t tiles_total = static_cast<int64_t>(p.n_blocks) * p.m_tiles, k_slabs = total / 2;
  const int64_t dp = tiles_total >= 2 * sms ? (tiles_total / sms - 1) * sms : 0;
  const int64_t sk_slabs = (tiles_total - dp) * k_slabs;
  const int64_t sk_grid = std::min<int64_t>(sms, sk_slabs);
  const double sk_run = std::max(
      (static_cast<double>(dp / sms) * (total + 1) + 2.0 * ((sk_slabs + sk_grid - 1) / sk_grid) + 2) * t_stage,
      all_bytes / kDramBytesPerNs);
  const double sk_cost = sk_run + 4.0 * sk_grid * p.tokens * p.rows * 4 / kDramBytesPerNs + kLaunchNs;
  const bool stream_k = f.splits == 0 && f.wgmma_persist >= 0 && sk_slabs * sms < (int64_t{1} << 31) &&
                        (f.wgmma_stream_k > 0 || (f.wgmma_stream_k == 0 && sk_cost < best_cost * 0.97));
  if (stream_k) {
    p.splits = 1;
    p.stages_per_split = total;
    p.units = static_cast<int>(tiles_total);
    p.grid = static_cast<int>(sk_grid);
    p.stream_k = true;
    p.dp_units = static_cast<int>(dp);
    p.sk_slabs = sk_slabs;
  }
  return p;
}

int mma_wgmma_splits(const MmaDecodeArgs& a) { return mma_wgmma_plan(a).splits; }

std::string mma_wgmma_description(const MmaDecodeArgs& a) {
  const MmaWgmmaPlan p = mma_wgmma_plan(a);
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
    const float bias = a.bias != nullptr ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0f;
    mma_detail::store_out(a.out, a.out_dtype, m * a.layout.n + row, v * mma_detail::epilogue_scale(a, row, m) + bias);
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
    case MmaCode::kE4M3: QL_RETURN_IF_ERROR(mma_wgmma::launch_e4m3(a, p, ps, stream)); break;
    case MmaCode::kE2M3:
    case MmaCode::kE3M2: QL_RETURN_IF_ERROR(mma_wgmma::launch_fp6(a, p, ps, stream)); break;
    case MmaCode::kE2M1: QL_RETURN_IF_ERROR(mma_wgmma::launch_e2m1(a, p, ps, stream)); break;
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
