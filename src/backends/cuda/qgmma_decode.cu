// The FP8 tensor-core decode GEMM (qgmma_decode.hpp): device code and launch.
//
// Work split. A block is two warpgroups (256 threads) over 64 weight rows: warp w of a warpgroup owns n16
// tile w (rows 16w .. 16w+15 of the wgmma's A), and the two warpgroups take alternate 128-K units of the
// block's K range (one split of the units), adding their sums through shared memory at the end. The
// activations of the whole K range (codes and scales, at most kMaxUnitsPerSplit units) are copied into shared
// memory once, after the first units' weights are on their way; the K loop then has no block barrier.
// Each warp keeps kStages units of its weights in flight through its own shared-memory ring (cp.async, no
// L1), and per unit:
//   decode    a lane's two words per 32-group hold rows g, g+8 of its K slots in bytes: a shift and two
//             masks per four codes make their E4M3 bytes (layout/qgmma_fragment.hpp).
//   MMA       four wgmma m64nTk32 (one per group) into fresh accumulators, committed and waited together.
//   promote   acc += (d * 2^(ws - 127 + 12)) * 2^(xs - 127): the weight scale from the unit's scale record
//             (one byte per row and group), the activation scale as a float staged in shared memory.
// With split-K each split writes FP32 partial sums that the decode GEMM's reduction kernel adds in order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda/mma_decode.cuh"
#include "backends/cuda/qgmma_decode.hpp"
#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda {

namespace qgmma_detail {

using mma_detail::cp_async16;
using mma_detail::cp_async16_zfill;
using mma_detail::cp_async_commit;
using mma_detail::cp_async_wait;
using mma_detail::grid_dependency_wait;

constexpr int kWarpgroups = 2, kThreads = 128 * kWarpgroups;
constexpr int kStages = 4;              // units in flight per warp (its shared-memory ring)
constexpr int kMaxUnitsPerSplit = 32;   // 4096 K of activations in shared memory
constexpr int kUnitBytes = 1024;        // E2M1: 32 lanes x 32 bytes
constexpr int kScaleRecordBytes = 8;    // MX: 4 groups x rows g, g+8
constexpr int kUnitScaleBytes = 8 * kScaleRecordBytes;

template <int TOK>
struct Smem {
  static constexpr int kGroupBytes = TOK * 32;  // a group's codes: [K half 2][TOK tokens][16 bytes]
  // The activations of `units` units (codes, then the scales as floats), then each warp's weight ring
  // ([warp][stage][1024 bytes]) and scale ring ([warp][stage][64 bytes]).
  static constexpr int x_bytes(int units) { return units * 4 * (kGroupBytes + TOK * 4); }
  static constexpr int kRingBytes = kThreads / 32 * kStages * (kUnitBytes + kUnitScaleBytes);
  static constexpr int bytes(int units) { return x_bytes(units) + kRingBytes; }
};

// The activations of group `local` as wgmma's B operand (TOK x 32, K-major, no swizzle): core matrices of
// 8 tokens x 16 bytes, the two K halves TOK * 16 bytes apart (leading byte offset), token octets 128 bytes
// apart (stride byte offset).
template <int TOK>
__device__ __forceinline__ uint64_t x_desc(uint32_t group_addr) {
  return ((group_addr & 0x3FFFFu) >> 4) | (uint64_t{(TOK * 16) >> 4} << 16) | (uint64_t{128 >> 4} << 32);
}

__device__ __forceinline__ void qgmma(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n"
      "}\n"
      : "=&f"(d[0]), "=&f"(d[1]), "=&f"(d[2]), "=&f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}
__device__ __forceinline__ void qgmma(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
      "%12, p, 1, 1;\n"
      "}\n"
      : "=&f"(d[0]), "=&f"(d[1]), "=&f"(d[2]), "=&f"(d[3]), "=&f"(d[4]), "=&f"(d[5]), "=&f"(d[6]), "=&f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}

// grid (N blocks, splits). partial: null -> the epilogue writes out; else [splits][M][N] f32 sums.
// OVERLAP: unit i + 1's MMAs go out before unit i is promoted (wgmma.wait_group 1), so the promotion's FMAs
// run while the tensor cores work; the A fragments and results then need two sets each, as a wgmma reads
// its A registers asynchronously until its group retires.
template <int TOK, bool OVERLAP>
__global__ void __launch_bounds__(kThreads, 2)
    qgmma_decode_kernel(const QgmmaDecodeArgs q, int units_per_split, float* __restrict__ partial) {
  const MmaDecodeArgs& a = q.gemm;
  constexpr int kD = TOK / 2;  // accumulator registers per wgmma (64 x TOK over 128 threads)
  extern __shared__ __align__(128) uint8_t smem[];
  if (partial != nullptr) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The warpgroup index through a shuffle, so that ptxas sees it warp-uniform (descriptor arithmetic in
  // uniform registers instead of per-unit R2UR moves).
  const int wg = __shfl_sync(0xFFFFFFFFu, warp / 4, 0), w4 = warp % 4;
  const int64_t n_tiles = a.layout.n_tiles(), k_slabs = a.layout.k_slabs();
  const int64_t n = a.layout.n, k = a.layout.k;
  const int64_t tile = min(static_cast<int64_t>(blockIdx.x) * 4 + w4, n_tiles - 1);
  const int u_begin = blockIdx.y * units_per_split;
  const int u_end = min(u_begin + units_per_split, static_cast<int>(k_slabs));
  // Units u_begin + wg, + 2, ...: every split has an even count (k_slabs and units_per_split are even), so
  // both warpgroups run the same trip count, which the compiler sees as uniform (the wgmma need not wait
  // for each other in a path it deems divergent).
  const int my_units = max(0, u_end - u_begin) / 2;

  // The weights reach registers through a per-warp shared-memory ring that cp.async fills kStages - 1 units
  // ahead: a load straight into registers would make every wgmma.fence wait for it (the fence waits for
  // the warp's pending register writes), so the prefetch would never be more than one unit deep.
  const int groups = (u_end - u_begin) * 4;
  uint8_t* ring = smem + Smem<TOK>::x_bytes(units_per_split);
  uint8_t* wring = ring + warp * kStages * kUnitBytes;
  uint8_t* sring = ring + kThreads / 32 * kStages * kUnitBytes + warp * kStages * kUnitScaleBytes;
  constexpr int64_t kStepW = 2 * kUnitBytes, kStepS = 2 * kUnitScaleBytes;
  const uint8_t* wsrc = a.w + (tile * k_slabs + u_begin + wg) * kUnitBytes + lane * 16;
  const uint8_t* ssrc = a.w_scale + (tile * k_slabs + u_begin + wg) * kUnitScaleBytes + (lane % 4) * 16;
  // Unit i of this warp into its stage. Past the last unit the stage (never read again) gets the last unit
  // once more: no branch around the copies.
  auto fill = [&](int i, int stage) {
    const int from = min(i, max(my_units - 1, 0));
    uint8_t* st = wring + stage * kUnitBytes + lane * 16;
    cp_async16(st, wsrc + from * kStepW);
    cp_async16(st + 512, wsrc + from * kStepW + 512);
    if (lane < 4) cp_async16(sring + stage * kUnitScaleBytes + lane * 16, ssrc + from * kStepS);
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) fill(i, i);

  // The activations of the block's K range: codes [group][K half][token][16 bytes], then the scales as
  // floats [group][token] (2^(xs - 127); zero rows beyond M and groups beyond K).
  grid_dependency_wait();
  const int64_t g_begin = static_cast<int64_t>(u_begin) * 4, groups_k = k / 32;
  float* xs_scale = reinterpret_cast<float*>(smem + groups * Smem<TOK>::kGroupBytes);
  for (int i = threadIdx.x; i < groups * 2 * TOK; i += kThreads) {
    const int gl = i / (2 * TOK), half = (i / TOK) % 2, t = i % TOK;
    const int64_t gk = g_begin + gl;
    const bool ok = t < a.m && gk < groups_k;
    const uint8_t* src = ok ? q.x_codes + t * k + gk * 32 + half * 16 : q.x_codes;
    cp_async16_zfill(smem + gl * Smem<TOK>::kGroupBytes + half * TOK * 16 + t * 16, src, ok ? 16 : 0);
  }
  cp_async_commit();
  for (int i = threadIdx.x; i < groups * TOK; i += kThreads) {
    const int gl = i / TOK, t = i % TOK;
    const int64_t gk = g_begin + gl;
    float s = 0.0f;
    if (t < a.m && gk < groups_k) s = act_e8m0_value(static_cast<int>(q.x_scales[t * groups_k + gk]) - 127);
    xs_scale[gl * TOK + t] = s;
  }
  cp_async_wait<0>();
  __syncthreads();

  const int g = lane / 4, t4 = lane % 4;
  float acc[kD];
#pragma unroll
  for (int e = 0; e < kD; ++e) acc[e] = 0.0f;
  // The B descriptor of unit i of this warp (its low word: the address; groups kGroupBytes apart) and the
  // activation scales of this lane's two tokens in it.
  constexpr uint32_t kDescGroup = Smem<TOK>::kGroupBytes >> 4;
  const uint64_t desc0 = x_desc<TOK>(mma_detail::smem_addr(smem) + wg * 4 * Smem<TOK>::kGroupBytes);
  const uint32_t desc_hi = static_cast<uint32_t>(desc0 >> 32);
  const uint32_t desc_lo0 = static_cast<uint32_t>(desc0);
  const float* fx0 = xs_scale + wg * 4 * TOK + 2 * t4;

  // Unit i: its stage landed (cp.async.wait: this lane's copies; __syncwarp: the other lanes', the scale
  // record included), the refill of the stage read last time goes out, then the A fragments and the scales.
  auto take = [&](int i, int stage, uint32_t (&af)[4][4], uint2& sc) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    const uint8_t* st = wring + stage * kUnitBytes + lane * 16;
    const uint4 w0 = *reinterpret_cast<const uint4*>(st), w1 = *reinterpret_cast<const uint4*>(st + 512);
    sc = *reinterpret_cast<const uint2*>(sring + stage * kUnitScaleBytes + g * kScaleRecordBytes);
    fill(i + kStages - 1, (stage + kStages - 1) % kStages);
    const uint32_t words[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int gq = 0; gq < 4; ++gq) {
      af[gq][0] = qgmma_e4m3_row_g(words[2 * gq]);       // rows g, K slots 4t .. 4t+3
      af[gq][1] = qgmma_e4m3_row_g8(words[2 * gq]);      // rows g+8
      af[gq][2] = qgmma_e4m3_row_g(words[2 * gq + 1]);   // rows g, K slots 16 + 4t ..
      af[gq][3] = qgmma_e4m3_row_g8(words[2 * gq + 1]);  // rows g+8
    }
  };
  auto issue = [&](int i, const uint32_t (&af)[4][4], float (&dq)[4][kD]) {
    wgmma::wgmma_fence();
    const uint32_t lo = desc_lo0 + static_cast<uint32_t>(i) * 8 * kDescGroup;
#pragma unroll
    for (int gq = 0; gq < 4; ++gq) qgmma(dq[gq], af[gq], (uint64_t{desc_hi} << 32) | (lo + gq * kDescGroup));
    wgmma::wgmma_commit();
  };
  auto promote = [&](int i, float (&dq)[4][kD], const uint2& sc) {
    const float* fx = fx0 + i * 8 * TOK;
#pragma unroll
    for (int gq = 0; gq < 4; ++gq) {
      wgmma::fence_regs(dq[gq]);
      // 2^(ws - 127 + 12): the weight scale and the 2^-6 of both operands' E4M3 codes.
      const float fw0 = __uint_as_float((__byte_perm(sc.x, 0, 0x4440 + gq) + 12) << 23);
      const float fw1 = __uint_as_float((__byte_perm(sc.y, 0, 0x4440 + gq) + 12) << 23);
#pragma unroll
      for (int j = 0; j < TOK / 8; ++j) {
        const float2 f = *reinterpret_cast<const float2*>(fx + gq * TOK + 8 * j);
        acc[4 * j + 0] = fmaf(dq[gq][4 * j + 0] * fw0, f.x, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(dq[gq][4 * j + 1] * fw0, f.y, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(dq[gq][4 * j + 2] * fw1, f.x, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(dq[gq][4 * j + 3] * fw1, f.y, acc[4 * j + 3]);
      }
    }
  };

  // Unrolled by the ring's depth, so that every stage address (and, overlapped, every set) is constant.
  if constexpr (!OVERLAP) {
    for (int base = 0; base < my_units; base += kStages) {
#pragma unroll
      for (int d = 0; d < kStages; ++d) {
        const int i = base + d;
        if (i >= my_units) break;
        uint32_t af[4][4];
        uint2 sc;
        float dq[4][kD];  // scale-d 0: written, not read (early-clobber outputs: never the A registers)
        take(i, d, af, sc);
        issue(i, af, dq);
        wgmma::wgmma_wait<0>();
        promote(i, dq, sc);
      }
    }
  } else {
    // In pairs: units i and i + 1 go out together, unit i is promoted while i + 1 runs. No group stays in
    // flight across a pair, which keeps ptxas's wgmma pipeline analysis (C7514) out of the loop's back edge.
    // An odd count's last pair takes the last unit twice (the ring repeats it) and drops the second result.
    static_assert(kStages % 2 == 0, "pairs of units start on even stages");
    uint32_t af[2][4][4];
    uint2 sc[2];
    float dq[2][4][kD];
    for (int base = 0; base < my_units; base += kStages) {
#pragma unroll
      for (int d = 0; d < kStages; d += 2) {
        const int i = base + d;
        if (i >= my_units) break;
        take(i, d, af[0], sc[0]);
        issue(i, af[0], dq[0]);
        take(i + 1, d + 1, af[1], sc[1]);
        issue(min(i + 1, my_units - 1), af[1], dq[1]);
        wgmma::wgmma_wait<1>();
        promote(i, dq[0], sc[0]);
        wgmma::wgmma_wait<0>();
        if (i + 1 < my_units) promote(i + 1, dq[1], sc[1]);
      }
    }
  }

  // The warpgroups' sums: warpgroup 1 hands its accumulators to warpgroup 0 ([value][thread]). The ring's
  // last refills (of units past the end) must land before the block ends and its shared memory is reused.
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the staged activations
  float* red = reinterpret_cast<float*>(smem);
  const int tid = threadIdx.x % 128;
  if (wg == 1) {
#pragma unroll
    for (int e = 0; e < kD; ++e) red[e * 128 + tid] = acc[e];
  }
  __syncthreads();
  if (wg == 1) return;
#pragma unroll
  for (int e = 0; e < kD; ++e) acc[e] += red[e * 128 + tid];

  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * 4 + w4) * kMmaTileN + g;
#pragma unroll
  for (int e = 0; e < kD; ++e) {
    const int64_t row = row0 + 8 * ((e >> 1) & 1);
    const int64_t m = 8 * (e >> 2) + 2 * t4 + (e & 1);
    if (row >= n || m >= a.m) continue;
    if (partial != nullptr) {
      partial[(static_cast<int64_t>(blockIdx.y) * a.m + m) * n + row] = acc[e];
      continue;
    }
    const double bias = a.bias != nullptr ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0;
    mma_detail::store_out(a.out, a.out_dtype, m * n + row,
                          mma_detail::epilogue_value<MmaScale::kMx32>(acc[e], mma_detail::epilogue_factor<MmaScale::kMx32>(a, row, m), bias));
  }
}

// The most units per split: kMaxUnitsPerSplit, or half that for the variant of more, smaller blocks
// (QgmmaChoice::blocks == 2: at 8 tokens 53 KB of shared memory per block instead of 72).
inline int max_units_per_split() { return qgmma_choice().blocks == 2 ? kMaxUnitsPerSplit / 2 : kMaxUnitsPerSplit; }

// Units per split for a wanted split count: even (k_slabs is), at most max_units_per_split().
inline int units_per_split(int k_units, int splits) {
  const int per = (k_units + splits - 1) / splits;
  return std::min(per + (per & 1), max_units_per_split());
}

template <int TOK, bool OVERLAP>
Status launch_tok(const QgmmaDecodeArgs& q, int per_split, int splits, float* partial, Stream stream) {
  const MmaDecodeArgs& a = q.gemm;
  auto kernel = qgmma_decode_kernel<TOK, OVERLAP>;
  const int smem = std::max(Smem<TOK>::bytes(per_split), kThreads * (TOK / 2) * 4);
  static std::atomic<uint64_t> attr_set{0};
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((attr_set.load(std::memory_order_acquire) & bit) == 0) {
    QL_RETURN_IF_ERROR(check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  Smem<TOK>::bytes(kMaxUnitsPerSplit)),
                             "cudaFuncSetAttribute(qgmma_decode_kernel, MaxDynamicSharedMemorySize)"));
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  const int64_t n_blocks = (a.layout.n_tiles() + 3) / 4;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(n_blocks), static_cast<unsigned>(splits));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  // The weights are read once: an L2 access-policy window marks them streaming (mma_decode.cuh says why).
  const int window = !mma_decode_forced().no_l2_streaming ? mma_detail::max_access_policy_window() : 0;
  if (window > 0) attr[n_attr++] = mma_detail::streaming_window_attr(a.w, a.layout.weight_bytes(), window);
  if (a.programmatic) attr[n_attr++] = mma_detail::programmatic_launch_attr();
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return check(cudaLaunchKernelEx(&cfg, kernel, q, per_split, partial), "cudaLaunchKernelEx(qgmma_decode_kernel)");
}

}  // namespace qgmma_detail

QgmmaChoice qgmma_choice() {
  const MmaDecodeForce& f = mma_decode_forced();
  if (f.qgmma != 0) return QgmmaChoice{std::max(f.qgmma, 0), f.qgmma_overlap};
  static const QgmmaChoice from_env = [] {
    QgmmaChoice c;
    const char* e = std::getenv("QLINEAR_QGMMA");
    const std::string list = std::string(",") + (e != nullptr ? e : "") + ",";
    if (list.find(",on,") != std::string::npos) c.blocks = 1;
    if (list.find(",small,") != std::string::npos) c.blocks = 2;
    c.overlap = c.blocks > 0 && list.find(",overlap,") != std::string::npos;
    return c;
  }();
  return from_env;
}

bool qgmma_decode_applies(const MmaLayout& l, bool fold, ActElem act, int64_t m) {
  return l.code == MmaCode::kE2M1 && l.scale == MmaScale::kMx32 && fold && act == ActElem::kE2M1 && m >= 1 &&
         m <= kQgmmaMaxM;
}

int qgmma_decode_splits(const MmaDecodeArgs& a) {
  const int k_units = static_cast<int>(a.layout.k_slabs());
  if (mma_decode_forced().splits > 0) {
    const int per_split = qgmma_detail::units_per_split(k_units, mma_decode_forced().splits);
    return (k_units + per_split - 1) / per_split;
  }
  const int64_t n_blocks = (a.layout.n_tiles() + 3) / 4;
  // Enough splits for the activations to fit shared memory, and for two blocks per SM where N alone does
  // not give them, keeping at least two units per split (one per warpgroup).
  const int most = qgmma_detail::max_units_per_split();
  int splits = std::max<int>((k_units + most - 1) / most,
                             static_cast<int>((2 * a.sm_count + n_blocks - 1) / n_blocks));
  splits = std::max(1, std::min(splits, k_units / 2));
  const int per_split = qgmma_detail::units_per_split(k_units, splits);
  return (k_units + per_split - 1) / per_split;  // no empty split
}

std::string qgmma_route_description(const MmaDecodeArgs& a) {
  const int splits = qgmma_decode_splits(a);
  return "FP8 tensor-core kernel (wgmma m64n" + std::to_string(a.m <= 8 ? 8 : 16) +
         "k32 E4M3, weights decoded to E4M3 in registers, one MMA per 32-group promoted by both E8M0 scales): 64 "
         "rows per block, split-K " + std::to_string(splits) + (splits > 1 ? " through partial sums" : "");
}

Status launch_qgmma_decode(const QgmmaDecodeArgs& q, Stream stream) {
  const MmaDecodeArgs& a = q.gemm;
  if (a.m == 0 || a.layout.n == 0) return Status::ok();
  if (!qgmma_decode_applies(a.layout, a.fold, ActElem::kE2M1, a.m)) {
    return Status::error("qgmma_decode: this call is not one the FP8 tensor-core kernel implements (E2M1 weights "
                         "with folding E8M0 scales, 1 <= M <= " + std::to_string(kQgmmaMaxM) + ")");
  }
  const int k_units = static_cast<int>(a.layout.k_slabs());
  const int per_split = qgmma_detail::units_per_split(k_units, qgmma_decode_splits(a));
  const int splits = (k_units + per_split - 1) / per_split;
  Scratch partial;
  if (splits > 1) {
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * splits * a.m * a.layout.n, stream));
  }
  float* p = splits > 1 ? partial.as<float>() : nullptr;
  auto launch = [&]() -> Status {
    using qgmma_detail::launch_tok;
    if (qgmma_choice().overlap) {
      return a.m <= 8 ? launch_tok<8, true>(q, per_split, splits, p, stream)
                      : launch_tok<16, true>(q, per_split, splits, p, stream);
    }
    return a.m <= 8 ? launch_tok<8, false>(q, per_split, splits, p, stream)
                    : launch_tok<16, false>(q, per_split, splits, p, stream);
  };
  QL_RETURN_IF_ERROR(launch());
  if (p != nullptr) return mma_detail::launch_mma_decode_reduce(a, splits, p, stream);
  return Status::ok();
}

}  // namespace qlinear::cuda
