#pragma once
// The activation quantization fused into the persistent FP8 GEMM (wgmma_persistent.cuh, Params::q_mode):
// warps 1-3 of the producer warpgroup, idle otherwise, quantize BF16 activation rows into the E4M3 codes
// the GEMM's x tensor map reads, bit for bit as act_quant.hpp does (static per-tensor or dynamic per-token
// scales), and count the finished rows of each 128-row block in `ready` (global, zeroed before the
// launch). The producer waits for a row block's count before its first x load of a tile there, so the
// quantization of later row blocks runs under the MMAs of earlier ones; the tile order starts with a
// group of row blocks just wide enough for the first wave.
//
// Each quantizing warp streams its rows through two 4 KiB shared-memory buffers with bulk copies (one
// lane issues them; the TMA engine keeps the bytes in flight that 40 registers per thread could not), row
// r to warp r mod (3 x blocks); per-token rows are read twice (the row maximum, then the codes: the second
// read hits the L2). Rows must be 16-byte aligned with K % 8 == 0 (the route checks).
#include <cuda_bf16.h>

#include "backends/cuda/act_fp8_encode.cuh"
#include "backends/cuda/wgmma_epilogue.cuh"
#include "qlinear/quantize.hpp"

namespace qlinear::cuda::wgp {

constexpr int kQuantWarps = 3;
constexpr int kQuantChunk = 4096;  // bytes of BF16 per buffer
constexpr int kQuantBuffers = 2;
constexpr int kQuantSmemBytes = kQuantWarps * kQuantBuffers * kQuantChunk;
constexpr int kQuantBarriers = kQuantWarps * kQuantBuffers;

enum QuantMode : int { kQuantNone = 0, kQuantStatic = 1, kQuantToken = 2 };

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, int bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   wgmma::smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(wgmma::smem_addr(bar))
               : "memory");
}

// The producer: waits until row block mb is quantized, then orders the TMA (async proxy) reads after it.
__device__ __forceinline__ void wait_rows_ready(const Params& p, int mb) {
  const int need = min(kBM, p.m - mb * kBM);
  if (need <= 0) return;
  while (ld_acquire(p.ready + mb) < need) __nanosleep(64);
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Quantizing warp qw (0 .. 3 x blocks - 1), lane `lane`: its rows, in order. bufs: its two buffers;
// bars: their mbarriers (initialized with count 1).
__device__ __forceinline__ void quantize_rows(const Params& p, uint8_t* bufs, uint64_t* bars, int qw, int total,
                                              int lane) {
  constexpr int kVec = actvec::kVec;
  const int row_bytes = p.q_k * 2;
  const int chunks = (row_bytes + kQuantChunk - 1) / kQuantChunk;
  const int passes = p.q_mode == kQuantToken ? 2 : 1;
  const int rows_mine = p.m > qw ? (p.m - 1 - qw) / total + 1 : 0;
  const int items = rows_mine * passes * chunks;  // (row, pass, chunk) in order
  const auto src_of = [&](int item, int& bytes) {
    const int c = item % chunks;
    const int row = qw + (item / (passes * chunks)) * total;
    bytes = min(kQuantChunk, row_bytes - c * kQuantChunk);
    return reinterpret_cast<const uint8_t*>(p.q_src) + static_cast<int64_t>(row) * p.q_ld_src * 2 +
           static_cast<int64_t>(c) * kQuantChunk;
  };
  const auto issue = [&](int item) {
    if (lane != 0 || item >= items) return;
    int bytes;
    const uint8_t* src = src_of(item, bytes);
    const int b = item % kQuantBuffers;
    wgmma::mbar_arrive_expect_tx(&bars[b], static_cast<uint32_t>(bytes));
    bulk_load(bufs + b * kQuantChunk, src, bytes, &bars[b]);
  };
  for (int i = 0; i < kQuantBuffers; ++i) issue(i);
  float amax = 0.0f;
  double s = p.q_static_scale;
  float rcp = actenc::quotient_rcp(s);
  for (int item = 0; item < items; ++item) {
    const int b = item % kQuantBuffers;
    const int c = item % chunks;
    const int pass = (item / chunks) % passes;
    const int row = qw + (item / (passes * chunks)) * total;
    int bytes;
    src_of(item, bytes);
    wgmma::mbar_wait(&bars[b], (item / kQuantBuffers) & 1);
    const uint4* v = reinterpret_cast<const uint4*>(bufs + b * kQuantChunk);
    const int nvec = bytes / 16;
    if (passes == 2 && pass == 0) {
      for (int i = lane; i < nvec; i += 32) {
        actvec::Raw<__nv_bfloat16> r;
        r.w[0] = v[i];
        amax = fmaxf(amax, actvec::abs_max(r));
      }
      if (c == chunks - 1) {
        const double a = actvec::lanes_max(amax);
        s = fmax(static_cast<double>(static_cast<float>(a / kFp8E4M3Max)), static_cast<double>(kFp8MinScalingFactor));
        rcp = actenc::quotient_rcp(s);
        amax = 0.0f;
      }
    } else {
      uint8_t* out = p.q_codes + static_cast<int64_t>(row) * p.q_ld_codes + static_cast<int64_t>(c) * (kQuantChunk / 2);
      for (int i = lane; i < nvec; i += 32) {
        actvec::Raw<__nv_bfloat16> r;
        r.w[0] = v[i];
        float f[kVec];
        actvec::to_floats(r, f);
        *reinterpret_cast<uint2*>(out + i * kVec) = actenc::encode8_div(f, rcp, s);
      }
      if (c == chunks - 1) {
        if (lane == 0 && p.q_mode == kQuantToken) p.q_scale_out[row] = static_cast<float>(s);
        __threadfence();  // this lane's codes (and scale) before the count
        __syncwarp();
        if (lane == 0) atomicAdd(p.ready + row / kBM, 1);
      }
    }
    __syncwarp();  // every lane is done with buffer b
    issue(item + kQuantBuffers);
  }
}

}  // namespace qlinear::cuda::wgp
