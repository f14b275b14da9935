// The persistent wgmma FP8 GEMM's host side: checks, the x tensor map, the tile choice and the launch of
// the instantiation (wgmma_persistent.cuh; one .cu per instantiation).
#include "backends/cuda/wgmma_fp8_gemm.hpp"

#include "backends/cuda/wgmma_persistent.cuh"

namespace qlinear::cuda {

WgmmaFp8Tile wgmma_fp8_auto_tile(int64_t m, int64_t n, int sms) {
  // Time ~ waves x the tile's work per wave x its cost per column, from the H200 figures (equal wave counts:
  // 192 columns ran 3-4% faster per column than 256, 128 columns 0-3% slower).
  struct Cand {
    WgmmaFp8Tile tile;
    int bn;
    double cost_per_col;
  };
  const Cand cands[] = {{WgmmaFp8Tile::kN256, 256, 1.0}, {WgmmaFp8Tile::kN192, 192, 0.96},
                        {WgmmaFp8Tile::kN128, 128, 1.02}};
  const int64_t rows = (m + wgp::kBM - 1) / wgp::kBM;
  WgmmaFp8Tile best = WgmmaFp8Tile::kN256;
  double best_cost = 0;
  for (const Cand& c : cands) {
    const int64_t tiles = rows * ((n + c.bn - 1) / c.bn);
    const int64_t waves = (tiles + sms - 1) / sms;
    const double cost = static_cast<double>(waves) * c.bn * c.cost_per_col;
    if (best_cost == 0 || cost < best_cost) {
      best = c.tile;
      best_cost = cost;
    }
  }
  return best;
}

namespace {

Result<int> out_kind(DType d) {
  switch (d) {
    case DType::kBF16: return static_cast<int>(wgp::kOutBf16);
    case DType::kF16: return static_cast<int>(wgp::kOutF16);
    case DType::kF32: return static_cast<int>(wgp::kOutF32);
    default: return Status::error("wgmma_fp8_gemm: output dtype " + std::string(name(d)) + " (BF16, F16 or F32)");
  }
}

Result<int> bias_kind(const void* bias, DType d) {
  if (bias == nullptr) return static_cast<int>(wgp::kBiasNone);
  switch (d) {
    case DType::kBF16: return static_cast<int>(wgp::kBiasBf16);
    case DType::kF16: return static_cast<int>(wgp::kBiasF16);
    case DType::kF32: return static_cast<int>(wgp::kBiasF32);
    default: return Status::error("wgmma_fp8_gemm: bias dtype " + std::string(name(d)) + " (BF16, F16 or F32)");
  }
}

}  // namespace

Status launch_wgmma_fp8_gemm(const WgmmaFp8Args& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return Status::ok();
  wgp::Params p{};
  QL_RETURN_IF_ERROR(wgp::grid_params("wgmma_fp8_gemm", a.m, a.n, a.k, a.x, a.ld_x, a.w, a.ld_w, a.group_m, p));
  p.x_scale = a.x_scale;
  p.w_scale = a.w_scale;
  p.bias = a.bias;
  p.out = a.out;
  p.ld_out = a.ld_out > 0 ? a.ld_out : a.n;
  p.x_scale_per_row = a.x_scale_per_row;
  p.w_scale_per_col = a.w_scale_per_col;
  p.pdl = a.pdl;
  if (a.q_mode != WgmmaFp8Args::FusedQuant::kNone) {
    if (a.q_src == nullptr || a.ready == nullptr || a.k % 8 != 0 || a.q_ld_src % 8 != 0 ||
        reinterpret_cast<uintptr_t>(a.q_src) % 16 != 0 || a.ld_x < a.k) {
      return Status::error("wgmma_fp8_gemm: fused quantization needs BF16 rows 16-byte aligned, K % 8 == 0, "
                           "ready scratch and code rows of at least K bytes");
    }
    const bool token = a.q_mode == WgmmaFp8Args::FusedQuant::kToken;
    if (token && (a.x_scale == nullptr || !a.x_scale_per_row)) {
      return Status::error("wgmma_fp8_gemm: fused per-token quantization writes x_scale [m]");
    }
    p.q_mode = token ? wgp::kQuantToken : wgp::kQuantStatic;
    p.q_k = static_cast<int>(a.k);
    p.q_src = a.q_src;
    p.q_ld_src = a.q_ld_src;
    p.q_ld_codes = a.ld_x;
    p.q_static_scale = a.q_static_scale;
    p.q_codes = static_cast<uint8_t*>(const_cast<void*>(a.x));
    p.q_scale_out = const_cast<float*>(a.x_scale);
    p.ready = a.ready;
    if (!token) {
      p.x_scale = nullptr;
      p.x_scale_value = a.q_static_scale;
    }
  }
  QL_ASSIGN_OR_RETURN(p.bias_kind, bias_kind(a.bias, a.bias_dtype));
  QL_ASSIGN_OR_RETURN(p.out_kind, out_kind(a.out_dtype));
  const size_t pair_bytes = 2 * element_size(a.out_dtype);
  p.pairs = p.ld_out % 2 == 0 && reinterpret_cast<uintptr_t>(a.out) % pair_bytes == 0;
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, wgmma::byte_map(a.x, a.m, a.k, a.ld_x, wgp::kBM));
  WgmmaFp8Tile tile = a.tile;
  if (tile == WgmmaFp8Tile::kAuto) {
    QL_ASSIGN_OR_RETURN(int sms, wgmma::multiprocessors());
    tile = wgmma_fp8_auto_tile(a.m, a.n, sms);
  }
  const int cm = a.cluster_m > 0 ? a.cluster_m : 1;
  if (cm != 1 && cm != 2) return Status::error("wgmma_fp8_gemm: cluster_m must be 1 or 2");
  if (a.fast_accum) {
    if (tile != WgmmaFp8Tile::kN256 || cm != 1) {
      return Status::error("wgmma_fp8_gemm: fast accumulation exists for 256-column tiles without clusters only");
    }
    return wgp::launch_tile<256, 1, wgp::Mode::kFp8Fast>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
  }
  switch (tile) {
    case WgmmaFp8Tile::kN128:
      return cm == 2 ? wgp::launch_tile<128, 2, wgp::Mode::kFp8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream)
                     : wgp::launch_tile<128, 1, wgp::Mode::kFp8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
    case WgmmaFp8Tile::kN192:
      return cm == 2 ? wgp::launch_tile<192, 2, wgp::Mode::kFp8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream)
                     : wgp::launch_tile<192, 1, wgp::Mode::kFp8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
    case WgmmaFp8Tile::kN256:
    case WgmmaFp8Tile::kAuto: break;
  }
  return cm == 2 ? wgp::launch_tile<256, 2, wgp::Mode::kFp8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream)
                 : wgp::launch_tile<256, 1, wgp::Mode::kFp8>(map_x, a.w, a.ld_w, a.n, a.k, p, stream);
}

}  // namespace qlinear::cuda
