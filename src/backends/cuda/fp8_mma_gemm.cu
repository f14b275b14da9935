// The small-M FP8 W8A8 GEMM (fp8_mma_gemm.hpp).
//
// Work split. A block is 8 warps: 4 along N (16 weight rows each) times 2 along K; it covers 64 weight rows
// and 8 * TN tokens and walks its K range (one split of the 256-K steps when split-K is on) through a
// 4-stage cp.async pipeline. Per stage it copies its 64 rows x 256 bytes of weights and the tokens' 256
// code bytes, both row-major as in global memory, swizzled in shared memory (16-byte chunk c of row r at
// c ^ (r & 7)) so that the 8 rows one ldmatrix reads hit 8 different bank groups. Warp (wn, wk) multiplies its
// 16 rows with slab wk (128 K) of the stage: per 32-wide K group one ldmatrix.x4 gives its A fragment
// exactly as m16n8k32 wants it (matrices: rows 0-7 / 8-15 by K bytes 0-15 / 16-31; lane l holds row l / 4,
// bytes 4 (l % 4) .. + 3), one ldmatrix.x4 per token tile gives the B fragments of two groups, and the slab's
// four MMAs go into a zeroed FP32 fragment that is then added to the accumulator (the promotion, header).
// The two K warps add up through shared memory at the end; K splits write FP32 partial sums that a second
// launch adds in split order.
#include <algorithm>
#include <atomic>
#include <mutex>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/fp8_mma_gemm.hpp"
#include "backends/cuda/mma_epilogue_math.hpp"
#include "backends/cuda/mma_sync_ptx.cuh"

namespace qlinear::cuda {

namespace mma_detail {
int max_access_policy_window();  // mma_decode.cu
}  // namespace mma_detail

namespace {

constexpr int kWarpsN = 4, kWarpsK = 2, kThreads = 32 * kWarpsN * kWarpsK;
constexpr int kStageK = 256, kRowsPerBlock = 16 * kWarpsN;
constexpr int kChunks = kStageK / 16;  // 16-byte chunks per row and stage
constexpr int kStages = 4;

// Shared memory of a block with `token_tiles` 8-token tiles: kStages x (weight rows + token rows) x 256 bytes.
constexpr int smem_bytes(int token_tiles) { return kStages * (kRowsPerBlock + 8 * token_tiles) * kStageK; }

// Blocks of `smem` bytes an SM holds (228 KiB, 1 KiB reserved per block), at most 3: the kernel's launch
// bounds ask for that many, which caps its registers.
constexpr int blocks_per_sm(int smem) { return std::min(3, (228 << 10) / (smem + 1024)); }

template <int TN>
struct Tile {
  static constexpr int kXRows = 8 * TN;
  static constexpr int kWBytes = kRowsPerBlock * kStageK;
  static constexpr int kXBytes = kXRows * kStageK;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kSmem = smem_bytes(TN);
  static constexpr int kRedBytes = kWarpsN * TN * 4 * 32 * 4;
  static constexpr int kWPerThread = kRowsPerBlock * kChunks / kThreads;
  static constexpr int kXChunks = kXRows * kChunks;
  static constexpr int kXPerThread = (kXChunks + kThreads - 1) / kThreads;
  // Blocks per SM the launch bounds ask for (registers): what shared memory allows.
  static constexpr int kMinBlocks = blocks_per_sm(kSmem);
  static_assert(kRowsPerBlock * kChunks % kThreads == 0, "weight chunks per thread");
  static_assert(kRedBytes <= kSmem, "the K-warp reduction reuses the pipeline's shared memory");
  static_assert(kSmem == kStages * kStageBytes, "the stage layout and smem_bytes agree");
  static_assert(kSmem <= 227 * 1024, "shared memory per block");
};

using mma_detail::cp_async16_zfill;
using mma_detail::cp_async_commit;
using mma_detail::cp_async_wait;
using mma_detail::grid_dependency_wait;
using mma_detail::ldmatrix_x4;

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte chunk c of row r in a swizzled [rows][kChunks] tile.
__device__ __forceinline__ int swz(int r, int c) { return (r * kChunks + (c ^ (r & 7))) * 16; }

// The f64 epilogue of output (m, row) from its FP32 sum (mma_epilogue_math.hpp: the product of the two f32
// scales is exact in f64, so is its product with the sum up to one rounding, then the bias and one rounding
// to the output dtype).
__device__ __forceinline__ void store_output(const Fp8MmaArgs& a, int64_t m, int64_t row, float sum) {
  const double s = static_cast<double>(a.w_scale[row]) * static_cast<double>(a.x_scale[m * a.x_scale_stride]);
  const double bias = a.bias != nullptr ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0;
  mma_detail::store_out(a.out, a.out_dtype, m * a.n + row, mma_epilogue_product(sum, s, bias));
}

// grid (N blocks, splits, M tiles). partial: null -> the epilogue writes out; else [splits][M][N] f32 sums.
template <int TN>
__global__ void __launch_bounds__(kThreads, Tile<TN>::kMinBlocks)
    fp8_mma_kernel(const Fp8MmaArgs a, int steps_per_split, float* __restrict__ partial) {
  using T = Tile<TN>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wn = warp % kWarpsN, wk = warp / kWarpsN;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t m0 = static_cast<int64_t>(blockIdx.z) * T::kXRows;
  const int total_steps = static_cast<int>((a.k + kStageK - 1) / kStageK);
  const int step0 = blockIdx.y * steps_per_split;
  const int steps = max(0, min(steps_per_split, total_steps - step0));

  // Per-thread source rows and chunk columns, computed once (every stage advances by 256 bytes).
  const uint8_t* wsrc[T::kWPerThread];
  int wcol[T::kWPerThread];
#pragma unroll
  for (int j = 0; j < T::kWPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t row = min(row0 + i / kChunks, a.n - 1);  // rows past N repeat the last one (outputs dropped)
    wcol[j] = (i % kChunks) * 16;
    wsrc[j] = a.w + row * a.ld_w + int64_t{step0} * kStageK + wcol[j];
  }
  const uint8_t* xsrc[T::kXPerThread];
  bool xrow_ok[T::kXPerThread];
#pragma unroll
  for (int j = 0; j < T::kXPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t m = m0 + i / kChunks;
    xrow_ok[j] = i < T::kXChunks && m < a.m;
    xsrc[j] = a.x + (xrow_ok[j] ? m * a.ld_x : 0) + (i % kChunks) * 16;
  }
  auto load_weights = [&](int buf, int step) {
    uint8_t* st = smem + buf * T::kStageBytes;
    const int64_t kcol0 = int64_t{step0 + step} * kStageK;
#pragma unroll
    for (int j = 0; j < T::kWPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      const bool ok = kcol0 + wcol[j] < a.k;
      cp_async16_zfill(st + swz(i / kChunks, i % kChunks), ok ? wsrc[j] + int64_t{step} * kStageK : wsrc[j] - int64_t{step0} * kStageK,
                       ok ? 16 : 0);
    }
  };
  auto load_x = [&](int buf, int step) {
    uint8_t* st = smem + buf * T::kStageBytes + T::kWBytes;
    const int64_t kcol0 = int64_t{step0 + step} * kStageK;
#pragma unroll
    for (int j = 0; j < T::kXPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (T::kXChunks % kThreads != 0 && i >= T::kXChunks) continue;
      const int c = i % kChunks;
      const bool ok = xrow_ok[j] && kcol0 + c * 16 < a.k;
      cp_async16_zfill(st + swz(i / kChunks, c), ok ? xsrc[j] + kcol0 : xsrc[j], ok ? 16 : 0);
    }
  };

  float acc[TN][4];
#pragma unroll
  for (int tt = 0; tt < TN; ++tt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[tt][e] = 0.0f;

  // The first stages' weights before the wait for the quantizer (programmatic dependent launch; a no-op
  // otherwise), the activations after it; one commit group per stage.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_weights(s, s);
  }
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_x(s, s);
    cp_async_commit();
  }

  // ldmatrix row addresses: A (matrix l / 8: rows +0 / +8 by chunks +0 / +1), B (matrix l / 8: chunk +l/8).
  const int a_row = wn * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = wk * 8 + (lane >> 4);
  for (int it = 0; it < steps; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `it` landed for every thread; every warp is done with stage it - 1
    if (it + kStages - 1 < steps) {
      load_weights((it + kStages - 1) % kStages, it + kStages - 1);
      load_x((it + kStages - 1) % kStages, it + kStages - 1);
    }
    cp_async_commit();

    const uint8_t* ws = smem + (it % kStages) * T::kStageBytes;
    const uint8_t* xs = ws + T::kWBytes;
    float slab[TN][4];
#pragma unroll
    for (int tt = 0; tt < TN; ++tt)
#pragma unroll
      for (int e = 0; e < 4; ++e) slab[tt][e] = 0.0f;
#pragma unroll
    for (int q2 = 0; q2 < 2; ++q2) {  // two 32-K groups per B load
      uint32_t b[TN][4];
#pragma unroll
      for (int tt = 0; tt < TN; ++tt) {
        const int xr = tt * 8 + (lane & 7);
        ldmatrix_x4(b[tt], xs + swz(xr, wk * 8 + 4 * q2 + (lane >> 3)));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t af[4];
        ldmatrix_x4(af, ws + swz(a_row, a_chunk + 4 * q2 + 2 * h));
#pragma unroll
        for (int tt = 0; tt < TN; ++tt) mma_e4m3(slab[tt], af, b[tt][2 * h], b[tt][2 * h + 1]);
      }
    }
#pragma unroll
    for (int tt = 0; tt < TN; ++tt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[tt][e] += slab[tt][e];
  }
  cp_async_wait<0>();
  __syncthreads();

  // The K warps' sums: wk = 1 hands its accumulators to wk = 0 through shared memory ([value][lane]).
  float* red = reinterpret_cast<float*>(smem);
  auto red_at = [&](int tt, int e) -> int { return ((wn * TN + tt) * 4 + e) * 32 + lane; };
  if (wk == 1) {
#pragma unroll
    for (int tt = 0; tt < TN; ++tt)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[red_at(tt, e)] = acc[tt][e];
  }
  __syncthreads();
  if (wk == 1) return;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int tt = 0; tt < TN; ++tt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = acc[tt][e] + red[red_at(tt, e)];
      const int64_t row = row0 + wn * 16 + g + 8 * (e >> 1);
      const int64_t m = m0 + tt * 8 + 2 * t + (e & 1);
      if (row >= a.n || m >= a.m) continue;
      if (partial != nullptr) {
        partial[(static_cast<int64_t>(blockIdx.y) * a.m + m) * a.n + row] = v;
      } else {
        store_output(a, m, row, v);
      }
    }
  }
}

// Sums the splits in order 0, 1, ... and runs the epilogue.
__global__ void fp8_mma_reduce_kernel(const Fp8MmaArgs a, int splits, const float* __restrict__ partial) {
  const int64_t total = a.m * a.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partial[s * total + i];
    store_output(a, i / a.n, i % a.n, v);
  }
}

std::mutex forced_mutex;
Fp8MmaForce forced;

struct Plan {
  int token_tiles, splits, steps_per_split, per_sm;
  int64_t n_blocks, m_tiles;
};

// The tile table (8-token MMA columns per block by M) and the split of K: only where the blocks leave SMs
// idle, as many splits as fill the block slots once, each at least 1024 K.
Plan plan_of(const Fp8MmaArgs& a) {
  Plan p{};
  p.token_tiles = forced.token_tiles != 0 ? forced.token_tiles : (a.m <= 8 ? 1 : (a.m <= 16 ? 2 : (a.m <= 32 ? 4 : 8)));
  p.per_sm = std::max(1, blocks_per_sm(smem_bytes(p.token_tiles)));
  p.n_blocks = (a.n + kRowsPerBlock - 1) / kRowsPerBlock;
  p.m_tiles = (a.m + 8 * p.token_tiles - 1) / (8 * p.token_tiles);
  const int total_steps = static_cast<int>((a.k + kStageK - 1) / kStageK);
  const int64_t blocks = p.n_blocks * p.m_tiles, slots = int64_t{p.per_sm} * a.sm_count;
  int splits = 1;
  if (forced.splits > 0) {
    splits = forced.splits;
  } else if (blocks < slots) {
    splits = static_cast<int>(std::min<int64_t>({slots / blocks, 8, std::max(1, total_steps / 4)}));
  }
  splits = std::max(1, std::min(splits, total_steps));
  p.steps_per_split = (total_steps + splits - 1) / splits;
  p.splits = (total_steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

template <int TN>
Status launch_tile(const Fp8MmaArgs& a, const Plan& p, float* partial, Stream stream) {
  using T = Tile<TN>;
  auto kernel = fp8_mma_kernel<TN>;
  // The shared-memory limit is a per-device attribute of the kernel: set once on every device used.
  static std::atomic<uint64_t> attr_set{0};
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((attr_set.load(std::memory_order_acquire) & bit) == 0) {
    QL_RETURN_IF_ERROR(check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem),
                             "cudaFuncSetAttribute(fp8_mma_kernel, MaxDynamicSharedMemorySize)"));
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  const dim3 grid(static_cast<unsigned>(p.n_blocks), static_cast<unsigned>(p.splits), static_cast<unsigned>(p.m_tiles));
  // M <= 16: the weights are read once; marked streaming in the L2 (mma_decode.hpp has the measurement).
  const int window = a.m <= 16 ? mma_detail::max_access_policy_window() : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = T::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  if (window > 0) attr[n_attr++] = mma_detail::streaming_window_attr(a.w, a.n * a.ld_w, window);
  if (a.programmatic) attr[n_attr++] = mma_detail::programmatic_launch_attr();
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return check(cudaLaunchKernelEx(&cfg, kernel, a, p.steps_per_split, partial), "cudaLaunchKernelEx(fp8_mma_kernel)");
}

}  // namespace

void fp8_mma_force(const Fp8MmaForce& f) {
  std::lock_guard<std::mutex> lock(forced_mutex);
  forced = f;
}

std::string fp8_mma_description(const Fp8MmaArgs& a) {
  const Plan p = plan_of(a);
  std::string why = "FP8 mma.sync m16n8k32 on the row-major weights: " + std::to_string(8 * p.token_tiles) +
                    " tokens x 64 rows per block, " + std::to_string(kStages) + " stages of 256 K";
  if (p.splits > 1) why += ", split-K " + std::to_string(p.splits) + " (partial sums, a second launch)";
  if (a.m > 8 * p.token_tiles) why += ", token tiles read the weights again each";
  return why;
}

Status launch_fp8_mma_gemm(const Fp8MmaArgs& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return Status::ok();
  if (a.k % 16 != 0 || a.ld_w < a.k || a.ld_x < a.k || a.ld_w % 16 != 0 || a.ld_x % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0) {
    return Status::error("fp8_mma: weights and activations need 16-byte aligned rows of at least K bytes, K % 16 == 0 "
                         "(K " + std::to_string(a.k) + ", ld_w " + std::to_string(a.ld_w) + ", ld_x " +
                         std::to_string(a.ld_x) + ")");
  }
  if (a.w_scale == nullptr || a.x_scale == nullptr) return Status::error("fp8_mma: weight and activation scales are required");
  const Plan p = plan_of(a);
  Scratch partial;
  if (p.splits > 1) {
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * p.splits * a.m * a.n, stream));
  }
  float* ps = p.splits > 1 ? partial.as<float>() : nullptr;
  switch (p.token_tiles) {
    case 1: QL_RETURN_IF_ERROR(launch_tile<1>(a, p, ps, stream)); break;
    case 2: QL_RETURN_IF_ERROR(launch_tile<2>(a, p, ps, stream)); break;
    case 4: QL_RETURN_IF_ERROR(launch_tile<4>(a, p, ps, stream)); break;
    case 8: QL_RETURN_IF_ERROR(launch_tile<8>(a, p, ps, stream)); break;
    default: return Status::error("fp8_mma: token tiles must be 1, 2, 4 or 8");
  }
  if (ps != nullptr) {
    const int64_t total = a.m * a.n;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4 * a.sm_count));
    fp8_mma_reduce_kernel<<<blocks, 256, 0, stream>>>(a, p.splits, ps);
    QL_CUDA_CHECK_LAUNCH("fp8_mma_reduce_kernel");
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
