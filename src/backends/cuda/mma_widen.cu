// Large-M route of the tensor-core decode kernels: the packed weights (layout/mma_layout.hpp) widened to
// row-major BF16 in row blocks, then a cuBLASLt BF16 GEMM per block; row scales, bias dtypes cuBLASLt's
// epilogue does not take, the NVFP4 global scale and quantized activations' factor (x_factor) go through an FP32 block and launch_scale_bias_epilogue,
// everything else straight into the output. Exact where the MMA kernel folds its scales (every widened value
// is the weight's exact BF16 value, or for NVFP4 that value times 2^-8 with 2^8 / g in the row scale); layers
// whose MX scales leave the fold range never take it (mma_decode.hpp).
//
// Two ways to widen: by fragments (a warp per 16 x 128 unit: the lane's words decoded exactly as the MMA
// kernel decodes them, transposed through shared memory, written as full 256-byte rows), and by gathering
// each element through mma_code_at (the packing's tested inverse; integer-heavy, kept as a cross-check).
#include <algorithm>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/mma_decode.cuh"

#include <cuda_fp8.h>

namespace qlinear::cuda {

namespace mma_detail {

// One thread per (row, 8 consecutive K): the 8 codes gathered from the packed layout one by one
// (mma_code_at, the tested inverse of the packing), decoded with the exact scalar codecs, times the exact
// block scale (E8M0, or E4M3 x 2^-8 for NVFP4; kRow: none, the row scale comes in the epilogue), rounded
// to BF16 -- exact for layers whose MX scales fold (the only ones routed here) -- and stored as one
// coalesced 16-byte write.
template <MmaCode C, MmaScale S>
__global__ void mma_widen_kernel(const MmaDecodeArgs a, int64_t row0, int64_t rows, __nv_bfloat16* out,
                                 int64_t ld_out) {
  const MmaLayout l = a.layout;
  const int64_t chunks = l.k / 8, total = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / chunks, c0 = (i % chunks) * 8, row = row0 + r;
    float scale = 1.0f;
    if constexpr (S == MmaScale::kMx32) scale = codec::decode_e8m0(mma_scale_at(l, a.w_scale, row, c0 / 32));
    if constexpr (S == MmaScale::kNv16) scale = codec::decode_e4m3(mma_scale_at(l, a.w_scale, row, c0 / 16)) * 0x1p-8f;
    __align__(16) __nv_bfloat16 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t code = mma_code_at(l, a.w, row, c0 + j);
      float x = 0.0f;
      if constexpr (C == MmaCode::kE4M3) x = codec::decode_e4m3(code);
      if constexpr (C == MmaCode::kE2M3) x = codec::decode_e2m3(code);
      if constexpr (C == MmaCode::kE3M2) x = codec::decode_e3m2(code);
      if constexpr (C == MmaCode::kE2M1) x = codec::decode_e2m1(code);
      v[j] = __float2bfloat16_rn(x * scale);
    }
    *reinterpret_cast<uint4*>(out + r * ld_out + c0) = *reinterpret_cast<const uint4*>(v);
  }
}


constexpr int kWidenWarps = 8;
constexpr int kWidenRowWords = 64 + 4;  // one unit row of 128 BF16 (64 words) + 4 words: conflict-free stores

// One warp per unit: decode_group (mma_decode.cuh) makes the lane's A fragments with the MMA kernel's exact
// factors (kRow 2^B: the code's value; kMx32 2^(B + s - 127): the weight's value; kNv16 e4m3 * 2^118: the
// value times 2^-8); lane (g, t) holds rows g, g + 8 at K pairs 2t, 2t + 8 of each 16-wide tile.
// FP8 (kMx32 only, mx_fp8_block.hpp): the factors are 2^(B + s - E - 8) with E the exponent of the unit's
// 128 x 128 block (blk_exp [ceil(N/128), K/128]), so the BF16 values are w 2^(-E-8); the store multiplies by
// 2^8 and converts to E4M3, exact for blocks the plan admitted (mx_fp8_block_math.hpp). All-zero groups'
// factors are clamped into BF16's normal range: 0 times them is 0.
template <MmaCode C, MmaScale S, bool kFp8 = false>
__global__ void __launch_bounds__(32 * kWidenWarps)
    mma_widen_fragments_kernel(const MmaDecodeArgs a, int64_t tile0, int64_t tiles, void* out_bytes, int64_t ld_out,
                               const int32_t* blk_exp) {
  constexpr int kWords = CodeTraits<C>::kWords, kBias = CodeTraits<C>::kBias;
  constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  __shared__ __align__(16) uint32_t rows_smem[kWidenWarps][kMmaTileN][kWidenRowWords];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k_slabs = a.layout.k_slabs(), units = tiles * k_slabs;
  uint32_t (*rs)[kWidenRowWords] = rows_smem[warp];
  const uint32_t e2m1_lo = C == MmaCode::kE2M1 ? e2m1_table_lo() : 0u;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kWidenWarps + warp; u < units;
       u += static_cast<int64_t>(gridDim.x) * kWidenWarps) {
    const int64_t tile = tile0 + u / k_slabs, slab = u % k_slabs;
    const int64_t unit = tile * k_slabs + slab;
    int shift = 0;  // added to the E8M0 byte: -(E + 8) in the FP8 variant
    if constexpr (kFp8) {
      const int64_t kb = a.layout.k / 128;  // the padding slabs past K hold zeros
      shift = (slab < kb ? -blk_exp[(tile * kMmaTileN / 128) * kb + slab] : 0) - 8;
    }
    uint32_t w[kWords];
#pragma unroll
    for (int p = 0; p < kWords / 4; ++p) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(a.w + unit * 32 * 4 * kWords + p * 512 + lane * 16));
      w[4 * p] = v.x;
      w[4 * p + 1] = v.y;
      w[4 * p + 2] = v.z;
      w[4 * p + 3] = v.w;
    }
    uint4 sc = make_uint4(0, 0, 0, 0);
    if constexpr (kRec == 8) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(a.w_scale + (unit * kMmaScaleRecords + g) * kRec));
      sc = make_uint4(v.x, v.y, 0, 0);
    } else if constexpr (kRec == 16) {
      sc = __ldg(reinterpret_cast<const uint4*>(a.w_scale + (unit * kMmaScaleRecords + g) * kRec));
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t f[2][2];
      if constexpr (S == MmaScale::kRow) {
        f[0][0] = f[0][1] = f[1][0] = f[1][1] = bf16_pow2_pair(kBias + 127);
      } else if constexpr (S == MmaScale::kMx32) {
        const int e0 = kBias + shift + static_cast<int>((sc.x >> (8 * q)) & 0xFF);
        const int e1 = kBias + shift + static_cast<int>((sc.y >> (8 * q)) & 0xFF);
        f[0][0] = f[1][0] = bf16_pow2_pair(kFp8 ? min(max(e0, 1), 254) : e0);
        f[0][1] = f[1][1] = bf16_pow2_pair(kFp8 ? min(max(e1, 1), 254) : e1);
      } else {
        const uint32_t words[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int gi = 2 * q + h;
            const uint32_t code = (words[2 * half + gi / 4] >> (8 * (gi % 4))) & 0xFF;
            const float v = codec::decode_e4m3(code) * 0x1p118f;
            f[h][half] = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v))) * 0x00010001u;
          }
        }
      }
      uint32_t af[2][4];
      decode_group<C>(w, q, f, af, e2m1_lo);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < 4; ++r) rs[g + 8 * (r & 1)][16 * q + 8 * h + 4 * (r >> 1) + t] = af[h][r];
    }
    __syncwarp();
    // 16 rows x 16 chunks of 8 BF16: half a warp per row, each row one 256-byte run.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = i * 32 + lane, row = c / 16, ch = c % 16;
      const int64_t n_row = tile * kMmaTileN + row, col = slab * kMmaSlabK + ch * 8;
      if (n_row < a.layout.n && col < a.layout.k) {
        const uint4 v = *reinterpret_cast<const uint4*>(&rs[row][4 * ch]);
        const int64_t at = (n_row - tile0 * kMmaTileN) * ld_out + col;
        if constexpr (kFp8) {
          const uint32_t words[4] = {v.x, v.y, v.z, v.w};
          float f[8];
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // BF16 pairs to f32, times 2^8 (exact)
            f[2 * j] = __uint_as_float(words[j] << 16) * 256.0f;
            f[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u) * 256.0f;
          }
          *reinterpret_cast<uint2*>(static_cast<uint8_t*>(out_bytes) + at) = codec::encode_e4m3x8(f);
        } else {
          *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(out_bytes) + at) = v;
        }
      }
    }
    __syncwarp();
  }
}

template <MmaCode C, MmaScale S>
Status launch_widen_fragments(const MmaDecodeArgs& a, int64_t row0, int64_t rows, __nv_bfloat16* out, int64_t ld_out,
                              Stream stream) {
  const int64_t tile0 = row0 / kMmaTileN, tiles = (rows + kMmaTileN - 1) / kMmaTileN;
  const int64_t units = tiles * a.layout.k_slabs();
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((units + kWidenWarps - 1) / kWidenWarps, int64_t{a.sm_count} * 8));
  mma_widen_fragments_kernel<C, S><<<blocks, 32 * kWidenWarps, 0, stream>>>(a, tile0, tiles, out, ld_out, nullptr);
  QL_CUDA_CHECK_LAUNCH("mma_widen_fragments_kernel");
  return Status::ok();
}

template <MmaCode C>
Status launch_widen_fp8(const MmaDecodeArgs& a, const int32_t* blk_exp, uint8_t* out, Stream stream) {
  const int64_t tiles = (a.layout.n + kMmaTileN - 1) / kMmaTileN, units = tiles * a.layout.k_slabs();
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((units + kWidenWarps - 1) / kWidenWarps, int64_t{a.sm_count} * 8));
  mma_widen_fragments_kernel<C, MmaScale::kMx32, true>
      <<<blocks, 32 * kWidenWarps, 0, stream>>>(a, 0, tiles, out, a.layout.k, blk_exp);
  QL_CUDA_CHECK_LAUNCH("mma_widen_fragments_kernel (E4M3)");
  return Status::ok();
}

template <MmaCode C, MmaScale S>
Status launch_widen(const MmaDecodeArgs& a, int64_t row0, int64_t rows, __nv_bfloat16* out, int64_t ld_out,
                    Stream stream) {
  if (mma_decode_forced().widen != MmaWidenKind::kGather) {
    return launch_widen_fragments<C, S>(a, row0, rows, out, ld_out, stream);
  }
  const int64_t threads = rows * (a.layout.k / 8);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((threads + 255) / 256, int64_t{a.sm_count} * 16));
  mma_widen_kernel<C, S><<<blocks, 256, 0, stream>>>(a, row0, rows, out, ld_out);
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

Status widen_fp8(const MmaDecodeArgs& a, const int32_t* blk_exp, uint8_t* out, Stream stream) {
  if (a.layout.scale != MmaScale::kMx32 || a.layout.k % 128 != 0) {
    return Status::error("mma_widen: the E4M3 widening takes MX weights with K a multiple of 128");
  }
  switch (a.layout.code) {
    case MmaCode::kE2M3: return launch_widen_fp8<MmaCode::kE2M3>(a, blk_exp, out, stream);
    case MmaCode::kE3M2: return launch_widen_fp8<MmaCode::kE3M2>(a, blk_exp, out, stream);
    case MmaCode::kE2M1: return launch_widen_fp8<MmaCode::kE2M1>(a, blk_exp, out, stream);
    default: return Status::error("mma_widen: E4M3 weights do not take the E4M3 widening");
  }
}

}  // namespace mma_detail

// The weight widened at once into one stream-ordered BF16 scratch, up to kWidenBlockMiB (row blocks of that
// size beyond): each cuBLASLt GEMM must cover enough output tiles to fill the GPU. Measured on the H200 at
// M = 256: 32 MiB row blocks (70B down_proj: 512 rows per block, 8 output tiles of 128 x 128 per GEMM)
// took 1.7x the whole-weight time, 8 MiB blocks (meant to stay in L2) 2.5x.
constexpr int64_t kWidenBlockMiB = 1024;

Status launch_mma_widen_gemm(const MmaDecodeArgs& a, Stream stream) {
  const int64_t n = a.layout.n, k = a.layout.k;
  const int64_t mib = mma_decode_forced().widen_block_mib != 0 ? mma_decode_forced().widen_block_mib : kWidenBlockMiB;
  const int64_t block =
      mib < 0 ? n : std::min<int64_t>(n, std::max<int64_t>(128, (mib << 20) / (2 * k) / 128 * 128));
  const bool direct = a.row_factor == nullptr && a.x_factor == nullptr && (a.bias == nullptr || a.bias_dtype == a.out_dtype);
  QL_ASSIGN_OR_RETURN(Scratch wb, Scratch::make(static_cast<size_t>(block * k * 2), stream));
  Scratch acc;
  if (!direct) {
    QL_ASSIGN_OR_RETURN(acc, Scratch::make(static_cast<size_t>(a.m * block * 4), stream));
  }
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
    if (direct) {
      g.out = static_cast<uint8_t*>(a.out) + n0 * out_es;
      g.out_dtype = a.out_dtype;
      g.ld_out = n;
      g.bias = a.bias ? static_cast<const uint8_t*>(a.bias) + n0 * bias_es : nullptr;
      QL_RETURN_IF_ERROR(lt_gemm(g, stream));
      continue;
    }
    g.out = acc.get();
    g.out_dtype = DType::kF32;
    QL_RETURN_IF_ERROR(lt_gemm(g, stream));
    EpilogueScales scales;
    scales.col = a.row_factor ? a.row_factor + n0 : nullptr;
    scales.activation = a.x_factor;
    scales.activation_stride = a.x_factor_stride;
    QL_RETURN_IF_ERROR(launch_scale_bias_epilogue(
        acc.as<float>(), a.m, nc, scales, a.bias ? static_cast<const uint8_t*>(a.bias) + n0 * bias_es : nullptr,
        a.bias_dtype, static_cast<uint8_t*>(a.out) + n0 * out_es, a.out_dtype, n, stream));
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
