// Large-M route of the tensor-core decode kernels: the packed weights (layout/mma_layout.hpp) widened to
// row-major BF16 in row blocks (unit by unit from the packed layout, exact scalar decode), then a
// cuBLASLt BF16 GEMM; row scales, bias and the output cast in launch_scale_bias_epilogue. Exact where the MMA kernel folds
// its scales (every widened value is the weight's exact BF16 value, or for NVFP4 that value times 2^-8 with
// 2^8 / g in the row scale); layers whose MX scales leave the fold range never take it (mma_decode.hpp).
#include <algorithm>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda {

namespace mma_detail {

// One warp per unit (16 weight rows x 128 K, layout/mma_layout.hpp): each lane loads its P coalesced
// 16-byte pieces and its scale record once, extracts its 64 codes (rows g, g+8; K columns 2t, 2t+1, 2t+8,
// 2t+9 of each 16-wide tile) with the tested field table (mma_fields_of), decodes each with the exact scalar
// codecs times the exact block scale (E8M0, or E4M3 x 2^-8 for NVFP4; kRow: none, the row scale comes in the
// epilogue), rounds to BF16 -- exact for layers whose MX scales fold (the only ones routed here) -- and
// writes BF16 pairs into a shared-memory tile of the unit; the warp then stores the tile's 16 rows as
// coalesced 16-byte chunks.
constexpr int kWidenWarps = 8;
constexpr int kWidenPitch = static_cast<int>(kMmaSlabK) + 8;  // BF16 per shared row: pairs of lanes g, g+1 4 banks apart

template <MmaCode C, MmaScale S>
__global__ void __launch_bounds__(32 * kWidenWarps) mma_widen_kernel(const MmaDecodeArgs a, int64_t row0,
                                                                     int64_t rows, __nv_bfloat16* out, int64_t ld_out) {
  __shared__ __align__(16) __nv_bfloat16 tile_smem[kWidenWarps][kMmaTileN][kWidenPitch];
  constexpr int kPieces = static_cast<int>(mma_lane_bytes(C) / 16);
  constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const MmaLayout l = a.layout;
  const int64_t slabs = l.k_slabs(), tile0 = row0 / kMmaTileN;
  const int64_t tiles = (rows + kMmaTileN - 1) / kMmaTileN, units = tiles * slabs;
  const int64_t row_end = min(row0 + rows, l.n);
  __nv_bfloat16(*sm)[kWidenPitch] = tile_smem[warp];
  for (int64_t u = blockIdx.x * int64_t{kWidenWarps} + warp; u < units; u += int64_t{gridDim.x} * kWidenWarps) {
    const int64_t tile = tile0 + u / slabs, slab = u % slabs, unit = tile * slabs + slab;
    uint32_t w[4 * kPieces];
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      const uint4 v = *reinterpret_cast<const uint4*>(a.w + unit * l.unit_bytes() + p * 512 + lane * 16);
      w[4 * p] = v.x;
      w[4 * p + 1] = v.y;
      w[4 * p + 2] = v.z;
      w[4 * p + 3] = v.w;
    }
    uint32_t rec[kRec > 0 ? kRec / 4 : 1] = {};
#pragma unroll
    for (int i = 0; i < kRec / 4; ++i) {
      rec[i] = reinterpret_cast<const uint32_t*>(a.w_scale + (unit * kMmaLanes + lane) * kRec)[i];
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int hi_row = r & 1;  // 0: row g, 1: row g + 8
          float scale = 1.0f;
          if constexpr (S == MmaScale::kMx32) {  // bytes 0..3: row g's 4 groups; 4..7: row g+8's
            scale = codec::decode_e8m0((rec[hi_row] >> (8 * q)) & 0xFFu);
          }
          if constexpr (S == MmaScale::kNv16) {  // bytes 0..7: row g's 8 groups of 16; 8..15: row g+8's
            const int group = 2 * q + h, byte = 8 * hi_row + group;
            scale = codec::decode_e4m3((rec[byte / 4] >> (8 * (byte % 4))) & 0xFFu) * 0x1p-8f;
          }
          float v[2];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            MmaField f[2];
            const int nf = mma_fields_of(C, q, h, r, half, f);
            uint32_t code = 0;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              if (i < nf) code |= ((w[f[i].word] >> f[i].shift) & ((1u << f[i].bits) - 1u)) << f[i].code_shift;
            }
            float x = 0.0f;
            if constexpr (C == MmaCode::kE4M3) x = codec::decode_e4m3(code);
            if constexpr (C == MmaCode::kE2M3) x = codec::decode_e2m3(code);
            if constexpr (C == MmaCode::kE3M2) x = codec::decode_e3m2(code);
            if constexpr (C == MmaCode::kE2M1) x = codec::decode_e2m1(code);
            v[half] = x * scale;
          }
          const int row = g + 8 * hi_row, col = q * 32 + h * 16 + (r >> 1) * 8 + 2 * t;
          *reinterpret_cast<__nv_bfloat162*>(&sm[row][col]) = __floats2bfloat162_rn(v[0], v[1]);
        }
      }
    }
    __syncwarp();
    // 16 rows x 16 chunks of 8 BF16: lanes 0-15 one row, 16-31 the next.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = lane + 32 * i, row = c / 16, chunk = c % 16;
      const int64_t grow = tile * kMmaTileN + row, gcol = slab * kMmaSlabK + chunk * 8;
      if (grow < row_end && gcol < l.k) {
        *reinterpret_cast<uint4*>(out + (grow - row0) * ld_out + gcol) = *reinterpret_cast<const uint4*>(&sm[row][chunk * 8]);
      }
    }
    __syncwarp();
  }
}

template <MmaCode C, MmaScale S>
Status launch_widen(const MmaDecodeArgs& a, int64_t row0, int64_t rows, __nv_bfloat16* out, int64_t ld_out,
                    Stream stream) {
  const int64_t units = (rows + kMmaTileN - 1) / kMmaTileN * a.layout.k_slabs();
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((units + kWidenWarps - 1) / kWidenWarps, int64_t{a.sm_count} * 16));
  mma_widen_kernel<C, S><<<blocks, 32 * kWidenWarps, 0, stream>>>(a, row0, rows, out, ld_out);
  QL_CUDA_CHECK_LAUNCH("mma_widen_kernel");
  return Status::ok();
}

Status widen(const MmaDecodeArgs& a, int64_t row0, int64_t rows, __nv_bfloat16* out, int64_t ld_out, Stream stream) {
  switch (a.layout.code) {
    case MmaCode::kE4M3:
      if (a.layout.scale == MmaScale::kRow) return launch_widen<MmaCode::kE4M3, MmaScale::kRow>(a, row0, rows, out, ld_out, stream);
      return launch_widen<MmaCode::kE4M3, MmaScale::kMx32>(a, row0, rows, out, ld_out, stream);
    case MmaCode::kE2M3: return launch_widen<MmaCode::kE2M3, MmaScale::kMx32>(a, row0, rows, out, ld_out, stream);
    case MmaCode::kE3M2: return launch_widen<MmaCode::kE3M2, MmaScale::kMx32>(a, row0, rows, out, ld_out, stream);
    case MmaCode::kE2M1:
      if (a.layout.scale == MmaScale::kNv16) return launch_widen<MmaCode::kE2M1, MmaScale::kNv16>(a, row0, rows, out, ld_out, stream);
      return launch_widen<MmaCode::kE2M1, MmaScale::kMx32>(a, row0, rows, out, ld_out, stream);
  }
  return Status::error("mma_widen: unknown weight code");
}

}  // namespace mma_detail

// Row blocks of at most 32 MiB of BF16 weights (a multiple of 128 rows): widen, GEMM into an FP32 block,
// epilogue into the output's column block.
Status launch_mma_widen_gemm(const MmaDecodeArgs& a, Stream stream) {
  const int64_t n = a.layout.n, k = a.layout.k;
  const int64_t block = std::min<int64_t>(n, std::max<int64_t>(128, (int64_t{32} << 20) / (2 * k) / 128 * 128));
  QL_ASSIGN_OR_RETURN(Scratch wb, Scratch::make(static_cast<size_t>(block * k * 2), stream));
  QL_ASSIGN_OR_RETURN(Scratch acc, Scratch::make(static_cast<size_t>(a.m * block * 4), stream));
  const size_t out_es = static_cast<size_t>(element_size(a.out_dtype));
  const size_t bias_es = a.bias ? static_cast<size_t>(element_size(a.bias_dtype)) : 0;
  for (int64_t n0 = 0; n0 < n; n0 += block) {
    const int64_t nc = std::min(block, n - n0);
    QL_RETURN_IF_ERROR(mma_detail::widen(a, n0, nc, wb.as<__nv_bfloat16>(), k, stream));
    LtGemm g;
    g.ab_dtype = DType::kBF16;
    g.w = wb.get();
    g.ld_w = k;
    g.x = a.x;
    g.ld_x = a.ld_x;
    g.m = a.m;
    g.n = nc;
    g.k = k;
    g.out = acc.get();
    g.out_dtype = DType::kF32;
    QL_RETURN_IF_ERROR(lt_gemm(g, stream));
    QL_RETURN_IF_ERROR(launch_scale_bias_epilogue(
        acc.as<float>(), a.m, nc, a.row_scale ? a.row_scale + n0 : nullptr,
        a.bias ? static_cast<const uint8_t*>(a.bias) + n0 * bias_es : nullptr, a.bias_dtype,
        static_cast<uint8_t*>(a.out) + n0 * out_es, a.out_dtype, n, stream, a.x_scale, a.x_scale_stride));
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
