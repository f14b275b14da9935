// Host side of the tensor-core decode GEMM: the tile table, the split of K, the launch and the fixed-order
// split-K reduction (mma_decode.hpp).
#include <algorithm>
#include <cmath>

#include <atomic>
#include <mutex>

#include "backends/cuda/mma_decode_regs.cuh"
#include "backends/cuda/mma_decode_wgmma.hpp"

namespace qlinear::cuda {

namespace {

// The tile configuration per M bucket (H200). Up to 16 tokens the GEMM streams weights, so small token
// tiles keep two blocks (and 4 stages of 256 K each) in flight per SM (3 stages and three blocks measured
// within noise of it); from 17 tokens one block of 64 tokens (mma_config_for widens the block to 128 weight
// rows where that pays).
constexpr MmaTileConfig kTileTable[] = {
    {8, 1, 1, 4},
    {16, 2, 1, 4},
    {static_cast<int>(kMmaDecodeMaxM), 8, 1, 3},
};

int64_t stage_bytes(const MmaLayout& l, const MmaTileConfig& t) {
  const int64_t tiles = mma_detail::kWarpsN * t.n16_per_warp;
  return tiles * mma_detail::kWarpsK * (l.unit_bytes() + kMmaScaleRecords * mma_scale_record_bytes(l.scale)) +
         8 * t.token_tiles * mma_detail::kStageK * 2;
}

}  // namespace

namespace mma_detail {

__global__ void mma_decode_reduce_kernel(const MmaDecodeArgs a, int splits, const float* __restrict__ partial) {
  grid_dependency_wait();  // launched as a programmatic dependent of the GEMM that writes the partial sums
  const int64_t n = a.layout.n, total = a.m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partial[s * total + i];
    const int64_t row = i % n;
    const double bias = a.bias != nullptr ? load_bias(a.bias, a.bias_dtype, row) : 0.0;
    store_out(a.out, a.out_dtype, i, mma_epilogue_value(v, epilogue_factor(a, row, i / n), bias));
  }
}

int max_access_policy_window() {
  static std::atomic<int> cached[64];  // per device: 0 unknown, -1 none, else bytes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  std::atomic<int>& c = cached[device & 63];
  int v = c.load(std::memory_order_relaxed);
  if (v == 0) {
    int bytes = 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxAccessPolicyWindowSize, device) != cudaSuccess) bytes = 0;
    v = bytes > 0 ? bytes : -1;
    c.store(v, std::memory_order_relaxed);
  }
  return v > 0 ? v : 0;
}

}  // namespace mma_detail

const MmaTileConfig& mma_tile_config(int64_t m) {
  for (const MmaTileConfig& t : kTileTable) {
    if (m <= t.max_m) return t;
  }
  return kTileTable[std::size(kTileTable) - 1];
}

void mma_fold_range(MmaCode code, int& lo, int& hi) {
  // lo: the smallest nonzero code value (2^-9, 2^-3, 2^-4, 2^-1) times 2^(s - 127) stays >= 2^-126 (normal);
  // hi: the decode factor 2^(B + s - 127) is itself a normal BF16 (B + s <= 254); the largest value then
  // stays far below BF16's maximum.
  switch (code) {
    case MmaCode::kE4M3: lo = 10; hi = 254 - 120; break;
    case MmaCode::kE2M3: lo = 4; hi = 254 - 126; break;
    case MmaCode::kE3M2: lo = 5; hi = 254 - 124; break;
    case MmaCode::kE2M1: lo = 2; hi = 254 - 126; break;
  }
}

namespace {
std::mutex forced_mutex;
MmaDecodeForce forced;
}  // namespace

void mma_decode_force(const MmaDecodeForce& f) {
  std::lock_guard<std::mutex> lock(forced_mutex);
  forced = f;
}
const MmaDecodeForce& mma_decode_forced() { return forced; }

// The table applies where the built-in rules would choose among routes and tiles (M > 16, weights that do
// not need the promoted path's one configuration), and never under a forced variant: the benchmarks and
// `qlinear tune --decode` time what they force.
const MmaDecodeTunedEntry* mma_tuned_choice(const MmaDecodeArgs& a) {
  if (a.device_name == nullptr || a.m <= 16 || (a.layout.scale == MmaScale::kMx32 && !a.fold)) return nullptr;
  if (!(forced == MmaDecodeForce{})) return nullptr;
  const MmaDecodeTunedEntry* e = mma_decode_tuned_entry(a.device_name, a.layout.code, a.layout.n, a.layout.k, a.m);
  return e != nullptr && e->route != MmaDecodeRoute::kRule ? e : nullptr;
}

MmaDecodeForce mma_decode_force_of(const MmaDecodeTunedEntry& e) {
  MmaDecodeForce f;
  switch (e.route) {
    case MmaDecodeRoute::kRule: f.no_tuned_table = true; break;
    case MmaDecodeRoute::kMmaSync:
      f.wgmma = -1;
      f.widen_above_m = -1;
      break;
    case MmaDecodeRoute::kWiden:
      f.wgmma = -1;
      f.widen_above_m = 16;  // the table's routes start at M = 17
      break;
    case MmaDecodeRoute::kWgmma:
      f.wgmma = 1;
      f.wgmma_tokens = e.tokens;
      f.wgmma_rows = e.rows;
      f.splits = e.splits;
      break;
  }
  return f;
}

// Layers with long rows or many of them (K >= 16384 or N >= 32768: 70B down_proj and gate_up) run 17..128
// tokens with 128 weight rows per block: half the activation reads per weight byte; measured 8-14% faster
// there at M = 64, while smaller layers lose the blocks they need to fill the GPU.
bool wide_large_m_tiles(const MmaLayout& l) { return l.k >= 16384 || l.n >= 32768; }

// The partial-sum rule of M <= 16 (forced, or after the activation pass): 128 rows per block for E2M1, K
// split over up to 16 blocks by the wave rule, partial sums added by a second launch. After the activation
// pass it measured 1.06x the best variant on average against 1.13-1.19x for the cluster rules (H200, 70B and
// 8B shapes, W4A4 and W6A6 at M = 1 and 16).
namespace {
bool partial_sum_rule(const MmaDecodeArgs& a) {
  return forced.split_reduce == MmaSplitReduce::kPartials ||
         (forced.split_reduce == MmaSplitReduce::kTable && a.programmatic);
}
}  // namespace

MmaTileConfig mma_config_for(const MmaDecodeArgs& a) {
  if (a.layout.scale == MmaScale::kMx32 && !a.fold) return kTileTable[std::size(kTileTable) - 1];  // promoted
  MmaTileConfig t = mma_tile_config(a.m);
  if (t.token_tiles <= 2) {
    // 64 weight rows per block for every code. (With 4x larger scale records and the shift-and-mask E2M1
    // decode, 128 rows per block measured faster for E2M1; the forced partial-sum rule keeps that choice.)
    if (a.layout.code == MmaCode::kE2M1 && partial_sum_rule(a)) t.n16_per_warp = 2;
    if (forced.stages != 0) t.stages = forced.stages;
    if (forced.n16_per_warp != 0) t.n16_per_warp = forced.n16_per_warp;
    return t;
  }
  if (wide_large_m_tiles(a.layout)) t.n16_per_warp = 2;
  if (forced.large_m_config == 1) t.n16_per_warp = 1;
  if (forced.large_m_config == 2) t.n16_per_warp = 2;
  return t;
}

bool mma_takes_registers_kernel(const MmaDecodeArgs& a) {
  if (a.m > 16 || (a.layout.scale == MmaScale::kMx32 && !a.fold)) return false;
  return forced.small_m == MmaSmallMKernel::kRegisters;
}

// M <= 16 on the pipelined kernel: the K splits add up in a thread-block cluster unless partial sums are
// forced (M > 16 keeps the partial sums: its tiles are wider than a cluster's shared memory wants).
// After the activation pass (programmatic launch) the splits add up through partial sums: a cluster launch
// that waits for the pass measured far slower (70B o W4A4, M = 1: 25.2 us against 18.9 for W4A16).
bool mma_split_in_cluster(const MmaDecodeArgs& a) {
  if (a.m > 16 || mma_takes_registers_kernel(a)) return false;
  return forced.split_reduce == MmaSplitReduce::kCluster ||
         (forced.split_reduce == MmaSplitReduce::kTable && !a.programmatic);
}

namespace {

int register_depth(const MmaDecodeArgs& a) {
  if (forced.register_depth != 0) return forced.register_depth;
  return a.layout.code == MmaCode::kE4M3 ? 2 : 4;
}

// The work split of a launch: what each block covers, how many blocks an SM holds, the K steps to split.
struct SplitShape {
  int64_t tiles_per_block, tokens_per_block, per_sm, steps, min_steps_per_split, max_splits;
};

SplitShape split_shape(const MmaDecodeArgs& a) {
  if (mma_takes_registers_kernel(a)) {
    // 512 K per split at least; at most a cluster's worth of splits when they add up in the cluster.
    return {mma_detail::kRegWarps, a.m <= 8 ? 8 : 16, mma_detail::reg_blocks_per_sm(a.layout.code, register_depth(a)),
            a.layout.k_slabs(), 4,
            forced.no_cluster_reduce ? 16 : kMmaMaxClusterSplits};
  }
  const MmaTileConfig t = mma_config_for(a);
  const int64_t smem = t.stages * stage_bytes(a.layout, t);
  // Blocks per SM: the kernel's __launch_bounds__ minimum (3 for small token tiles with 3 stages, 2 with 4,
  // 1 for 64 tokens), capped by shared memory.
  int64_t by_regs = t.token_tiles <= 2 ? (t.stages <= 3 ? 3 : 2) : 1;
  // The cluster rule counts the blocks an SM really holds: 64-row blocks of 8 tokens use 53-59 registers (4
  // blocks of 256 threads fit), of 16 tokens 68-76 (3 fit) (ptxas, sm_90a), so shared memory decides:
  // FP6 and E2M1 stages are small enough for 3-4 blocks where E4M3 fits 2.
  if (a.m <= 16 && t.token_tiles <= 2 && t.n16_per_warp == 1 && !partial_sum_rule(a)) by_regs = t.token_tiles == 1 ? 4 : 3;
  const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(by_regs, (228 << 10) / (smem + 1024)));
  return {mma_detail::kWarpsN * t.n16_per_warp, 8 * t.token_tiles, per_sm, a.layout.k_slabs() / mma_detail::kWarpsK, 4,
          mma_split_in_cluster(a) ? kMmaMaxClusterSplits : 16};
}

}  // namespace

// Split K over blocks when the N blocks alone leave SMs idle or a ragged last wave: the count that best
// fills whole waves of the GPU's block slots, with a minimum of K per split (1024 for the pipelined kernel)
// and the FP32 partial sums at most a quarter of the weight bytes.
int mma_decode_splits(const MmaDecodeArgs& a) {
  if (mma_takes_wgmma_route(a)) return mma_wgmma_splits(a);
  const SplitShape sh = split_shape(a);
  const double slots = static_cast<double>(sh.per_sm * a.sm_count);
  const int64_t blocks = (a.layout.n_tiles() + sh.tiles_per_block - 1) / sh.tiles_per_block *
                         ((a.m + sh.tokens_per_block - 1) / sh.tokens_per_block);
  const int64_t steps = sh.steps;
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(blocks * s) / slots;
    return waves / std::ceil(waves);
  };
  // The pipelined kernel at M <= 16 with E4M3 / FP6 weights splits only layers whose blocks leave SMs
  // idle, and of those only the ones with few blocks or long rows: elsewhere the extra reduction launch and
  // the partial sums cost more than the idle SMs (measured: 70B qkv/o, 8B qkv and gate_up faster unsplit,
  // 70B down and 8B down faster split). E2M1 blocks carry half the bytes and keep the wave rule (70B qkv
  // measured 16% slower unsplit).
  // With the splits added in a cluster (M <= 16) the wave rule holds for every code: no scratch, no second
  // launch.
  // M <= 16 (the table's rule): at most two splits, where they still fit one wave of block slots or fill
  // the last wave better; the two add up in a cluster (or through partial sums after the activation pass).
  // Measured on the H200 (70B and 8B shapes, every code): three or more splits in a cluster ran far slower
  // (cluster scheduling), and more splits through partial sums lost to two in a cluster wherever two fit.
  const bool cluster = mma_split_in_cluster(a);
  const bool table_small_m = a.m <= 16 && !mma_takes_registers_kernel(a) && !partial_sum_rule(a);
  const bool small_pipelined =
      !cluster && !mma_takes_registers_kernel(a) && a.m <= 16 && a.layout.code != MmaCode::kE2M1;
  // After the activation pass at 9..16 tokens the rows count as long from K = 8192: 70B o_proj W6A6 at
  // M = 16 (128 blocks) ran 38.5 us unsplit, 32.2 in two (H100), where M = 1 and the 8B / 70B qkv layers lost.
  const int64_t long_k = a.programmatic && a.m > 8 ? 8192 : 16384;
  const bool worth_splitting =
      !small_pipelined || (blocks < a.sm_count && (2 * blocks <= a.sm_count || a.layout.k >= long_k));
  int64_t best = 1;
  if (forced.splits > 0) {
    best = std::min<int64_t>({forced.splits, steps, sh.max_splits});
  } else if (table_small_m) {
    const bool fits = 2 * static_cast<double>(blocks) <= slots;
    const bool fills = static_cast<double>(blocks) > slots && efficiency(2) > efficiency(1) + 0.05;
    if (steps >= 2 * sh.min_steps_per_split && (fits || fills)) best = 2;
  } else if (worth_splitting) {
    for (int64_t s = 2; s <= sh.max_splits && steps / s >= sh.min_steps_per_split; ++s) {
      if (!cluster && s * a.m * a.layout.n * 4 > a.layout.weight_bytes() / 4) break;
      if (efficiency(s) > efficiency(best) + 0.05) best = s;
    }
  }
  const int64_t per = (steps + best - 1) / best;
  return static_cast<int>((steps + per - 1) / per);
}

bool mma_takes_widen_route(const MmaDecodeArgs& a) {
  if (const MmaDecodeTunedEntry* e = mma_tuned_choice(a)) return e->route == MmaDecodeRoute::kWiden;
  const int64_t above = forced.widen_above_m != 0 ? forced.widen_above_m : kMmaWidenAboveM;
  return above >= 0 && a.m > above && (a.layout.scale != MmaScale::kMx32 || a.fold);
}

// 32 and 256: where the wgmma kernel's token tile and its default range change (mma_decode_wgmma.cu).
std::vector<int64_t> mma_route_bucket_ends(const MmaDecodeArgs& a) {
  std::vector<int64_t> ends = {8, 16, 32, kMmaDecodeMaxM, kMmaWidenAboveM, 256};
  if (a.device_name != nullptr) {
    for (const MmaDecodeTunedEntry* e : mma_decode_tuned_entries(a.layout.code, a.layout.n, a.layout.k)) {
      if (a.device_name == std::string_view(e->device)) ends.push_back(e->m_max);
    }
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  return ends;
}

std::string mma_route_description(const MmaDecodeArgs& a) {
  // Where the choice came from the tuned table, as the cuBLASLt explain says it.
  const MmaDecodeTunedEntry* e = mma_tuned_choice(a);
  const std::string from = e == nullptr ? ""
                                         : "tuned table (" + std::string(e->device) + ", bucket M <= " +
                                               std::to_string(e->m_max) + "): ";
  if (mma_takes_wgmma_route(a)) return from + mma_wgmma_description(a);
  if (mma_takes_widen_route(a)) {
    return from + "weights widened to BF16 per call (fragment decode; the whole weight at once up to 1 GiB of scratch, "
           "row blocks of 1 GiB beyond) + cuBLASLt BF16 GEMM";
  }
  const int splits = mma_decode_splits(a);
  if (mma_takes_registers_kernel(a)) {
    const bool cluster = splits > 1 && splits <= kMmaMaxClusterSplits && !forced.no_cluster_reduce;
    return "registers kernel: " + std::to_string(a.m <= 8 ? 8 : 16) + " tokens x 128 rows per block, " +
           std::to_string(register_depth(a)) + " K slabs in flight per warp, split-K " + std::to_string(splits) +
           (splits > 1 ? (cluster ? " added in a thread-block cluster" : " through partial sums") : "");
  }
  const MmaTileConfig t = mma_config_for(a);
  std::string why = from + "pipelined kernel: " + std::to_string(8 * t.token_tiles) + " tokens x " +
                    std::to_string(64 * t.n16_per_warp) + " rows per block, " + std::to_string(t.stages) +
                    " cp.async stages, split-K " + std::to_string(splits);
  if (splits > 1) why += mma_split_in_cluster(a) ? " added in a thread-block cluster" : " through partial sums";
  if (a.m > 8 * t.token_tiles) why += ", M tiles decode the weights again each";
  if (a.layout.scale == MmaScale::kMx32 && !a.fold) why += ", E8M0 scales promoted per 32 in FP32";
  return why;
}

Status launch_mma_decode(const MmaDecodeArgs& a, Stream stream) {
  if (a.m == 0 || a.layout.n == 0) return Status::ok();
  if (mma_takes_wgmma_route(a)) return launch_mma_wgmma(a, stream);
  if (mma_takes_widen_route(a)) return launch_mma_widen_gemm(a, stream);
  const MmaTileConfig t = mma_config_for(a);
  const int splits = mma_decode_splits(a);
  const bool regs = mma_takes_registers_kernel(a);
  const bool cluster = splits > 1 && splits <= kMmaMaxClusterSplits &&
                       (regs ? !forced.no_cluster_reduce : mma_split_in_cluster(a));
  Scratch partial;
  if (splits > 1 && !cluster) {
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * splits * a.m * a.layout.n, stream));
  }
  float* p = splits > 1 && !cluster ? partial.as<float>() : nullptr;
  if (regs) {
    const int tn = a.m <= 8 ? 1 : 2, depth = register_depth(a);
    switch (a.layout.code) {
      case MmaCode::kE4M3: QL_RETURN_IF_ERROR(mma_detail::launch_regs_e4m3(a, tn, depth, splits, p, stream)); break;
      case MmaCode::kE2M3:
      case MmaCode::kE3M2: QL_RETURN_IF_ERROR(mma_detail::launch_regs_fp6(a, tn, depth, splits, p, stream)); break;
      case MmaCode::kE2M1: QL_RETURN_IF_ERROR(mma_detail::launch_regs_e2m1(a, tn, depth, splits, p, stream)); break;
    }
  } else {
    switch (a.layout.code) {
      case MmaCode::kE4M3: QL_RETURN_IF_ERROR(mma_detail::launch_e4m3(a, t, splits, p, stream)); break;
      case MmaCode::kE2M3:
      case MmaCode::kE3M2: QL_RETURN_IF_ERROR(mma_detail::launch_fp6(a, t, splits, p, stream)); break;
      case MmaCode::kE2M1: QL_RETURN_IF_ERROR(mma_detail::launch_e2m1(a, t, splits, p, stream)); break;
    }
  }
  if (p != nullptr) return mma_detail::launch_mma_decode_reduce(a, splits, p, stream);
  return Status::ok();
}

namespace mma_detail {

Status launch_mma_decode_reduce(const MmaDecodeArgs& a, int splits, const float* p, Stream stream) {
  const int64_t total = a.m * a.layout.n;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4 * a.sm_count));
  // A programmatic dependent launch: its blocks are resident when the GEMM's last ones finish, which
  // hides the launch gap of a second kernel behind the GEMM.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(256);
  cfg.stream = stream;
  cudaLaunchAttribute attr = programmatic_launch_attr();
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  QL_RETURN_IF_ERROR(check(cudaLaunchKernelEx(&cfg, mma_detail::mma_decode_reduce_kernel, a, splits,
                                              static_cast<const float*>(p)),
                           "cudaLaunchKernelEx(mma_decode_reduce_kernel, programmatic)"));
  return Status::ok();
}

}  // namespace mma_detail

}  // namespace qlinear::cuda
