// Large-M route of the tensor-core decode kernels: the packed weights (layout/mma_layout.hpp) widened to
// row-major BF16 with the same register decode as the MMA kernel (mma_decode.cuh), then a cuBLASLt BF16
// GEMM; row scales, bias and the output cast in launch_scale_bias_epilogue. Exact where the MMA kernel folds
// its scales (every widened value is the weight's exact BF16 value, or for NVFP4 that value times 2^-8 with
// 2^8 / g in the row scale); layers whose MX scales leave the fold range never take it (mma_decode.hpp).
#include <algorithm>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda {

namespace mma_detail {

// One thread per (tile, slab, lane): the lane's 64 weights of the unit, stored as BF16 pairs at their
// row-major places in out [rows of this block, ld_out].
template <MmaCode C, MmaScale S>
__global__ void mma_widen_kernel(const MmaDecodeArgs a, int64_t tile_begin, int64_t tiles, __nv_bfloat16* out,
                                 int64_t ld_out) {
  constexpr int kWords = CodeTraits<C>::kWords, kBias = CodeTraits<C>::kBias;
  constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  const int64_t k_slabs = a.layout.k_slabs();
  const int64_t total = tiles * k_slabs * 32;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int lane = static_cast<int>(i % 32);
    const int64_t unit = i / 32, slab = unit % k_slabs, tile = tile_begin + unit / k_slabs;
    const uint8_t* u = a.w + (tile * k_slabs + slab) * (32 * 4 * kWords);
    uint32_t w[kWords];
#pragma unroll
    for (int p = 0; p < kWords / 4; ++p) {
      const uint4 v = *reinterpret_cast<const uint4*>(u + p * 512 + lane * 16);
      w[4 * p] = v.x;
      w[4 * p + 1] = v.y;
      w[4 * p + 2] = v.z;
      w[4 * p + 3] = v.w;
    }
    uint32_t sc[4] = {0, 0, 0, 0};
    if constexpr (kRec > 0) {
      const uint8_t* r = a.w_scale + ((tile * k_slabs + slab) * 32 + lane) * kRec;
#pragma unroll
      for (int j = 0; j < kRec / 4; ++j) sc[j] = reinterpret_cast<const uint32_t*>(r)[j];
    }
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t f[2][2];
      if constexpr (S == MmaScale::kRow) {
        f[0][0] = f[0][1] = f[1][0] = f[1][1] = bf16_pow2_pair(kBias + 127);
      } else if constexpr (S == MmaScale::kMx32) {
        f[0][0] = f[1][0] = bf16_pow2_pair(kBias + static_cast<int>((sc[0] >> (8 * q)) & 0xFF));
        f[0][1] = f[1][1] = bf16_pow2_pair(kBias + static_cast<int>((sc[1] >> (8 * q)) & 0xFF));
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int gi = 2 * q + h;
            const uint32_t code = (sc[2 * half + gi / 4] >> (8 * (gi % 4))) & 0xFF;
            const float v = codec::decode_e4m3(code) * 0x1p118f;
            f[h][half] = __bfloat16_as_ushort(__float2bfloat16_rn(v)) * 0x00010001u;
          }
        }
      }
      uint32_t af[2][4];
      decode_group<C>(w, q, f, af);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int64_t row = (tile - tile_begin) * kMmaTileN + g + 8 * (r & 1);
          const int64_t col = slab * kMmaSlabK + 32 * q + 16 * h + 2 * t + 8 * (r >> 1);
          if (tile * kMmaTileN + g + 8 * (r & 1) < a.layout.n && col < a.layout.k) {
            *reinterpret_cast<uint32_t*>(out + row * ld_out + col) = af[h][r];
          }
        }
      }
    }
  }
}

template <MmaCode C, MmaScale S>
Status launch_widen(const MmaDecodeArgs& a, int64_t tile_begin, int64_t tiles, __nv_bfloat16* out, int64_t ld_out,
                    Stream stream) {
  const int64_t threads = tiles * a.layout.k_slabs() * 32;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((threads + 255) / 256, int64_t{a.sm_count} * 8));
  mma_widen_kernel<C, S><<<blocks, 256, 0, stream>>>(a, tile_begin, tiles, out, ld_out);
  QL_CUDA_CHECK_LAUNCH("mma_widen_kernel");
  return Status::ok();
}

Status widen(const MmaDecodeArgs& a, int64_t tile_begin, int64_t tiles, __nv_bfloat16* out, int64_t ld_out,
             Stream stream) {
  switch (a.layout.code) {
    case MmaCode::kE4M3:
      if (a.layout.scale == MmaScale::kRow) {
        return launch_widen<MmaCode::kE4M3, MmaScale::kRow>(a, tile_begin, tiles, out, ld_out, stream);
      }
      return launch_widen<MmaCode::kE4M3, MmaScale::kMx32>(a, tile_begin, tiles, out, ld_out, stream);
    case MmaCode::kE2M3: return launch_widen<MmaCode::kE2M3, MmaScale::kMx32>(a, tile_begin, tiles, out, ld_out, stream);
    case MmaCode::kE3M2: return launch_widen<MmaCode::kE3M2, MmaScale::kMx32>(a, tile_begin, tiles, out, ld_out, stream);
    case MmaCode::kE2M1:
      if (a.layout.scale == MmaScale::kNv16) {
        return launch_widen<MmaCode::kE2M1, MmaScale::kNv16>(a, tile_begin, tiles, out, ld_out, stream);
      }
      return launch_widen<MmaCode::kE2M1, MmaScale::kMx32>(a, tile_begin, tiles, out, ld_out, stream);
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
    QL_RETURN_IF_ERROR(mma_detail::widen(a, n0 / kMmaTileN, (nc + kMmaTileN - 1) / kMmaTileN,
                                         wb.as<__nv_bfloat16>(), k, stream));
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
        static_cast<uint8_t*>(a.out) + n0 * out_es, a.out_dtype, n, stream));
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
