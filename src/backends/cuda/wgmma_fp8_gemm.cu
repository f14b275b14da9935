// The warp-specialized wgmma FP8 GEMM (wgmma_fp8_gemm.hpp has the structure).
#include "backends/cuda/wgmma_fp8_gemm.hpp"

#include <cuda.h>
#include <cuda_bf16.h>

#include <mutex>
#include <vector>

namespace qlinear::cuda {

namespace {

constexpr int kBM = 128, kBK = 128, kStages = 4;
constexpr int kTileX = kBM * kBK;  // bytes (E4M3)
template <int BN>
constexpr int stage_bytes() { return kTileX + BN * kBK; }
template <int BN>
constexpr int smem_bytes() { return kStages * stage_bytes<BN>() + 2 * kStages * 8 + 1024; }  // + barriers, alignment
constexpr int kThreads = 384;  // producer warpgroup + two math warpgroups

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@p bra.uni DONE;\n"
      "bra.uni LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// A [box rows x 128 bytes] tile of a 2-D tensor map at (c0 = byte column, c1 = row) into shared memory,
// completing on `bar` (rows and columns outside the tensor read as zeros).
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// Shared-memory matrix descriptor of a K-major tile of 128-byte rows written by TMA with the 128-byte
// swizzle: 8-row groups 1024 bytes apart (stride byte offset), swizzle mode 1 in bits 62-63.
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// d[64 x N] (+)= a[64 x 32] . b[N x 32]^T, E4M3 inputs, FP32 accumulators (accumulate = 0: d = a.b^T);
// N = 2 x the size of d (128 or 256).
__device__ __forceinline__ void wgmma_m64k32(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_m64k32(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

struct Params {
  int64_t m, n, k, ld_out;
  const float* x_scale;
  bool x_scale_per_row;
  const float* w_scale;
  bool w_scale_per_col;
  __nv_bfloat16* out;
};

// BN: tile columns (128 or 256). kPromote: each 128-K block's tensor-core sum goes to a scratch
// accumulator and is added to the FP32 one (cuBLASLt's behaviour without fast accumulation); otherwise the
// tensor cores accumulate across all of K (fast accumulation) and one wgmma group stays in flight.
template <int BN, bool kPromote>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_fp8_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w, Params p) {
  constexpr int kStageBytes = stage_bytes<BN>();
  constexpr int kAcc = BN / 2;  // accumulators per thread
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int n0 = blockIdx.x * BN;
  const int m0 = blockIdx.y * kBM;
  const int num_kb = static_cast<int>((p.k + kBK - 1) / kBK);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);   // the producer's arrive (plus the TMA bytes)
      mbar_init(&empty[s], 2);  // one arrive per math warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // producer
    if (t == 0) {
      for (int kb = 0; kb < num_kb; ++kb) {
        const int s = kb % kStages;
        const uint32_t phase = (kb / kStages) & 1;
        mbar_wait(&empty[s], phase ^ 1);  // a fresh barrier counts as released
        mbar_arrive_expect_tx(&full[s], kStageBytes);
        uint8_t* stage = smem + s * kStageBytes;
        tma_load(stage, &map_x, &full[s], kb * kBK, m0);
        tma_load(stage + kTileX, &map_w, &full[s], kb * kBK, n0);
      }
    }
    return;
  }

  const int g = wg - 1;  // rows [64 g, 64 g + 64) of the tile
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  if constexpr (kPromote) {
    float part[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) part[i] = 0.0f;
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % kStages;
      mbar_wait(&full[s], (kb / kStages) & 1);
      const uint8_t* stage = smem + s * kStageBytes;
      const uint64_t da = smem_desc(stage + g * 64 * kBK);
      const uint64_t db = smem_desc(stage + kTileX);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk) wgmma_m64k32(part, da + 2 * kk, db + 2 * kk, kk);  // +32 bytes
      wgmma_commit();
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[s]);
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] += part[i];
    }
  } else {
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % kStages;
      mbar_wait(&full[s], (kb / kStages) & 1);
      const uint8_t* stage = smem + s * kStageBytes;
      const uint64_t da = smem_desc(stage + g * 64 * kBK);
      const uint64_t db = smem_desc(stage + kTileX);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk) wgmma_m64k32(acc, da + 2 * kk, db + 2 * kk, 1);
      wgmma_commit();
      wgmma_wait<1>();  // the previous block's group is done: release its stage
      if (t == 0 && kb > 0) mbar_arrive(&empty[(kb - 1) % kStages]);
    }
    wgmma_wait<0>();
  }

  // Epilogue: register (j, i, c) of thread (warp w, lane l) is row 16 w + l / 4 + 8 i, column
  // 8 j + 2 (l % 4) + c of this warpgroup's 64 x 128 block.
  const int warp = t / 32, lane = t % 32;
  const int64_t row0 = m0 + g * 64 + warp * 16 + lane / 4;
  static_assert(kAcc == BN / 2, "");
  const bool pairs = p.ld_out % 2 == 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = row0 + 8 * i;
    if (row >= p.m) continue;
    const float xs = p.x_scale[p.x_scale_per_row ? row : 0];
    __nv_bfloat16* out_row = p.out + row * p.ld_out;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int64_t col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= p.n) continue;
      const float w0 = p.w_scale[p.w_scale_per_col ? col : 0];
      const float v0 = acc[4 * j + 2 * i] * xs * w0;
      if (col + 1 < p.n) {
        const float w1 = p.w_scale[p.w_scale_per_col ? col + 1 : 0];
        const float v1 = acc[4 * j + 2 * i + 1] * xs * w1;
        if (pairs) {
          *reinterpret_cast<__nv_bfloat162*>(out_row + col) = __floats2bfloat162_rn(v0, v1);
        } else {
          out_row[col] = __float2bfloat16_rn(v0);
          out_row[col + 1] = __float2bfloat16_rn(v1);
        }
      } else {
        out_row[col] = __float2bfloat16_rn(v0);
      }
    }
  }
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Result<EncodeTiled> encode_tiled() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    cudaDriverEntryPointQueryResult q{};
    void* f = nullptr;
    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    if (err == cudaSuccess && q == cudaDriverEntryPointSuccess) fn = reinterpret_cast<EncodeTiled>(f);
  });
  if (fn == nullptr) return Status::error("wgmma_fp8_gemm: the driver has no cuTensorMapEncodeTiled");
  return fn;
}

// 2-D map of a [rows, cols] byte matrix (rows `ld` bytes apart), boxes of box_rows x 128 bytes, 128B swizzle.
Result<CUtensorMap> byte_map(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  QL_ASSIGN_OR_RETURN(EncodeTiled encode, encode_tiled());
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::error("cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) + ") for a " +
                         std::to_string(rows) + " x " + std::to_string(cols) + " matrix, row stride " +
                         std::to_string(ld) + " bytes");
  }
  return map;
}

template <int BN, bool kPromote>
Status launch(const CUtensorMap& map_x, const WgmmaFp8Args& a, const Params& p, Stream stream) {
  QL_ASSIGN_OR_RETURN(CUtensorMap map_w, byte_map(a.w, a.n, a.k, a.ld_w, BN));
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  {  // the dynamic shared-memory limit is a per-device attribute
    static std::mutex mutex;
    static std::vector<bool> done;
    std::lock_guard<std::mutex> lock(mutex);
    if (done.size() <= static_cast<size_t>(device)) done.resize(device + 1, false);
    if (!done[device]) {
      QL_CUDA_CHECK(cudaFuncSetAttribute(wgmma_fp8_kernel<BN, kPromote>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_bytes<BN>()));
      done[device] = true;
    }
  }
  const dim3 grid(static_cast<unsigned>((a.n + BN - 1) / BN), static_cast<unsigned>((a.m + kBM - 1) / kBM));
  wgmma_fp8_kernel<BN, kPromote><<<grid, kThreads, smem_bytes<BN>(), stream>>>(map_x, map_w, p);
  QL_CUDA_CHECK_LAUNCH("wgmma_fp8_kernel");
  return Status::ok();
}

}  // namespace

Status launch_wgmma_fp8_gemm(const WgmmaFp8Args& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return Status::ok();
  if (a.ld_x % 16 != 0 || a.ld_w % 16 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0) {
    return Status::error("wgmma_fp8_gemm: operand rows must start 16-byte aligned (TMA)");
  }
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, byte_map(a.x, a.m, a.k, a.ld_x, kBM));
  Params p{a.m, a.n, a.k, a.ld_out > 0 ? a.ld_out : a.n, a.x_scale, a.x_scale_per_row, a.w_scale, a.w_scale_per_col,
           static_cast<__nv_bfloat16*>(a.out)};
  switch (a.variant) {
    case WgmmaFp8Variant::kN128Promote: return launch<128, true>(map_x, a, p, stream);
    case WgmmaFp8Variant::kN128Fast: return launch<128, false>(map_x, a, p, stream);
    case WgmmaFp8Variant::kN256Fast: return launch<256, false>(map_x, a, p, stream);
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
