// Host side of the tensor-core decode GEMM: the tile table, the split of K, the launch and the fixed-order
// split-K reduction (mma_decode.hpp).
#include <algorithm>
#include <cmath>

#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda {

namespace {

// The tile configuration per M bucket (H200). Up to 16 tokens the GEMM streams weights, so small token
// tiles keep two blocks (and 3 stages of 256 K each) in flight per SM; from 17 tokens one block of 128
// weight rows x 64 tokens halves the activation traffic per weight byte.
constexpr MmaTileConfig kTileTable[] = {
    {8, 1, 1, 4},
    {16, 2, 1, 4},
    {static_cast<int>(kMmaDecodeMaxM), 8, 1, 3},
};

int64_t stage_bytes(const MmaLayout& l, const MmaTileConfig& t) {
  const int64_t tiles = mma_detail::kWarpsN * t.n16_per_warp;
  return tiles * mma_detail::kWarpsK * (l.unit_bytes() + kMmaLanes * mma_scale_record_bytes(l.scale)) +
         8 * t.token_tiles * mma_detail::kStageK * 2;
}

}  // namespace

namespace mma_detail {

__global__ void mma_decode_reduce_kernel(const MmaDecodeArgs a, int splits, const float* __restrict__ partial) {
  const int64_t n = a.layout.n, total = a.m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partial[s * total + i];
    const int64_t row = i % n;
    v *= epilogue_scale(a, row, i / n);
    if (a.bias != nullptr) v += load_bias(a.bias, a.bias_dtype, row);
    store_out(a.out, a.out_dtype, i, v);
  }
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

// Split K over blocks when the N blocks alone leave SMs idle or a ragged last wave: the count that best
// fills whole waves of the GPU's block slots, with at least 4 steps (1024 K) per split and the FP32
// partial sums at most a quarter of the weight bytes.
namespace {
std::atomic<int> forced_splits{0};
std::atomic<int> forced_small_m_stages{0};
}  // namespace

void mma_decode_force_splits(int splits) { forced_splits.store(splits < 0 ? 0 : splits); }
void mma_decode_force_small_m_stages(int stages) { forced_small_m_stages.store(stages == 3 || stages == 4 ? stages : 0); }

MmaTileConfig mma_config_for(const MmaDecodeArgs& a) {
  if (a.layout.scale == MmaScale::kMx32 && !a.fold) return kTileTable[std::size(kTileTable) - 1];  // promoted
  MmaTileConfig t = mma_tile_config(a.m);
  if (t.token_tiles <= 2 && forced_small_m_stages.load() != 0) t.stages = forced_small_m_stages.load();
  return t;
}

int mma_decode_splits(const MmaDecodeArgs& a) {
  const MmaTileConfig t = mma_config_for(a);
  const int64_t smem = t.stages * stage_bytes(a.layout, t);
  // Blocks per SM: the kernel's __launch_bounds__ minimum (3 for small token tiles with 3 stages, 2 with 4,
  // 1 for 64 tokens), capped by shared memory.
  const int64_t by_regs = t.token_tiles <= 2 ? (t.stages <= 3 ? 3 : 2) : 1;
  const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(by_regs, (228 << 10) / (smem + 1024)));
  const double slots = static_cast<double>(per_sm * a.sm_count);
  const int64_t tiles = mma_detail::kWarpsN * t.n16_per_warp;
  const int64_t rows = 8 * t.token_tiles;
  const int64_t blocks = (a.layout.n_tiles() + tiles - 1) / tiles * ((a.m + rows - 1) / rows);
  const int64_t steps = a.layout.k_slabs() / mma_detail::kWarpsK;
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(blocks * s) / slots;
    return waves / std::ceil(waves);
  };
  int64_t best = 1;
  if (forced_splits.load() > 0) {
    best = std::min<int64_t>(forced_splits.load(), steps);
  } else {
    for (int64_t s = 2; s <= 16 && steps / s >= 4; ++s) {
      if (s * a.m * a.layout.n * 4 > a.layout.weight_bytes() / 4) break;
      if (efficiency(s) > efficiency(best) + 0.05) best = s;
    }
  }
  const int64_t per = (steps + best - 1) / best;
  return static_cast<int>((steps + per - 1) / per);
}

bool mma_takes_widen_route(const MmaDecodeArgs& a) {
  return a.m > kMmaWidenAboveM && (a.layout.scale != MmaScale::kMx32 || a.fold);
}

Status launch_mma_decode(const MmaDecodeArgs& a, Stream stream) {
  if (a.m == 0 || a.layout.n == 0) return Status::ok();
  if (mma_takes_widen_route(a)) return launch_mma_widen_gemm(a, stream);
  const MmaTileConfig t = mma_config_for(a);
  const int splits = mma_decode_splits(a);
  Scratch partial;
  if (splits > 1) {
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * splits * a.m * a.layout.n, stream));
  }
  float* p = splits > 1 ? partial.as<float>() : nullptr;
  switch (a.layout.code) {
    case MmaCode::kE4M3: QL_RETURN_IF_ERROR(mma_detail::launch_e4m3(a, t, splits, p, stream)); break;
    case MmaCode::kE2M3:
    case MmaCode::kE3M2: QL_RETURN_IF_ERROR(mma_detail::launch_fp6(a, t, splits, p, stream)); break;
    case MmaCode::kE2M1: QL_RETURN_IF_ERROR(mma_detail::launch_e2m1(a, t, splits, p, stream)); break;
  }
  if (splits > 1) {
    const int64_t total = a.m * a.layout.n;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4 * a.sm_count));
    mma_detail::mma_decode_reduce_kernel<<<blocks, 256, 0, stream>>>(a, splits, p);
    QL_CUDA_CHECK_LAUNCH("mma_decode_reduce_kernel");
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
