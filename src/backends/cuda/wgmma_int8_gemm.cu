// The wgmma INT8 GEMM's host side (wgmma_int8_gemm.hpp): checks, the parameters of the fused FP64
// epilogue, the launch of the instantiation (wgmma_persistent.cuh; one .cu per instantiation).
#include "backends/cuda/wgmma_int8_gemm.hpp"

#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda {

Status launch_wgmma_int8_gemm(const WgmmaInt8Args& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return Status::ok();
  wgp::Params p{};
  QL_RETURN_IF_ERROR(wgp::grid_params("wgmma_int8_gemm", a.m, a.n, a.k, a.x, a.ld_x, a.w, a.ld_w, a.group_m, p));
  p.x_scale = a.x_scale;
  p.x_scale_per_row = a.x_scale_per_row;
  p.x_scale_value = a.x_scale_value;
  p.x_zero_point = a.x_zero_point;
  p.x_zp_per_row = a.x_zero_point_per_row;
  p.x_zp_value = a.x_zero_point_value;
  p.w_scale = a.w_scale;
  p.w_scale_per_col = 1;
  p.w_colsum = a.w_colsum;
  p.bias = a.bias;
  switch (a.bias == nullptr ? DType::kU8 : a.bias_dtype) {
    case DType::kU8: p.bias_kind = wgp::kBiasNone; break;
    case DType::kBF16: p.bias_kind = wgp::kBiasBf16; break;
    case DType::kF16: p.bias_kind = wgp::kBiasF16; break;
    case DType::kF32: p.bias_kind = wgp::kBiasF32; break;
    default: return Status::error("wgmma_int8_gemm: bias dtype " + std::string(name(a.bias_dtype)));
  }
  switch (a.out_dtype) {
    case DType::kBF16: p.out_kind = wgp::kOutBf16; break;
    case DType::kF16: p.out_kind = wgp::kOutF16; break;
    case DType::kF32: p.out_kind = wgp::kOutF32; break;
    default: return Status::error("wgmma_int8_gemm: output dtype " + std::string(name(a.out_dtype)));
  }
  p.out = a.out;
  p.ld_out = a.ld_out > 0 ? a.ld_out : a.n;
  p.pairs = p.ld_out % 2 == 0 && reinterpret_cast<uintptr_t>(a.out) % (2 * element_size(a.out_dtype)) == 0;
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, wgmma::byte_map(a.x, a.m, a.k, a.ld_x, wgp::kBM));
  if (a.tile_n == 128) {
    if (a.cluster_m != 1) return Status::error("wgmma_int8_gemm: 128-column tiles run without clusters");
    return wgp::launch_tile<128, 1, wgp::Mode::kInt8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
  }
  if (a.tile_n != 256) return Status::error("wgmma_int8_gemm: tile_n must be 128 or 256");
  if (a.cluster_m == 2) return wgp::launch_tile<256, 2, wgp::Mode::kInt8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
  if (a.cluster_m != 1) return Status::error("wgmma_int8_gemm: cluster_m must be 1 or 2");
  return wgp::launch_tile<256, 1, wgp::Mode::kInt8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
}

}  // namespace qlinear::cuda
