// Large-M route of the tensor-core decode kernels: the packed weights (layout/mma_layout.hpp) widened to
// row-major BF16 in row blocks (element by element from the packed layout, exact scalar decode), then a
// cuBLASLt BF16 GEMM; row scales, bias and the output cast in launch_scale_bias_epilogue. Exact where the MMA kernel folds
// its scales (every widened value is the weight's exact BF16 value, or for NVFP4 that value times 2^-8 with
// 2^8 / g in the row scale); layers whose MX scales leave the fold range never take it (mma_decode.hpp).
#include <algorithm>

#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/mma_decode.cuh"

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

template <MmaCode C, MmaScale S>
Status launch_widen(const MmaDecodeArgs& a, int64_t row0, int64_t rows, __nv_bfloat16* out, int64_t ld_out,
                    Stream stream) {
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
