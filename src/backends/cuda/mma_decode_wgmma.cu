// Host side of the swap-AB wgmma decode GEMM (mma_decode_wgmma.hpp): where it runs, its token tile and
// split of K, the launch and the split-K reduction (the mma.sync kernel's, in split order).
#include "backends/cuda/mma_decode_wgmma.hpp"

#include <algorithm>
#include <cmath>

#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda {

namespace {

// The M range the wgmma kernel runs by default, per measured (code, scale) pair (H200, llama3-8b and -70b
// shapes at M = 32, 64, 128, 256 against the mma.sync kernel and the widen route in one process): FP8
// per-channel won at every M measured but 70b.down / gate_up at M = 64 (within 7%); MXFP4 lost at M <= 64
// (its decode-bound stages) and won at 128 and 256 on all but the two smallest 8B layers at 256. MXFP8
// and NVFP4 were not timed on it: they keep the mma.sync kernel unless forced.
struct WgmmaRange {
  int64_t min_m, max_m;
};
constexpr WgmmaRange kDefaultFp8Channel{17, 256}, kDefaultMxfp4{65, 256}, kNotByDefault{1, 0};
constexpr int64_t kWgmmaMinM = 17;  // below: the M <= 16 kernels
constexpr int kWgmmaRowsPerBlock = 128;
constexpr int kWgmmaMinStagesPerSplit = 8;  // 512 K

}  // namespace

bool mma_wgmma_supports(const MmaDecodeArgs& a, std::string* why_not) {
  auto no = [&](const char* why) {
    if (why_not != nullptr) *why_not = why;
    return false;
  };
  if (a.layout.code != MmaCode::kE4M3 && a.layout.code != MmaCode::kE2M1) {
    return no("FP6 codes are not instantiated in the wgmma kernel");
  }
  if (a.layout.scale == MmaScale::kMx32 && !a.fold) return no("MX scales outside the fold range are promoted per 32");
  return true;
}

bool mma_takes_wgmma_route(const MmaDecodeArgs& a) {
  if (a.m < kWgmmaMinM || !mma_wgmma_supports(a)) return false;
  const int forced = mma_decode_forced().wgmma;
  if (forced != 0) return forced > 0;
  const WgmmaRange r = a.layout.code == MmaCode::kE4M3 && a.layout.scale == MmaScale::kRow   ? kDefaultFp8Channel
                       : a.layout.code == MmaCode::kE2M1 && a.layout.scale == MmaScale::kMx32 ? kDefaultMxfp4
                                                                                              : kNotByDefault;
  return a.m >= r.min_m && a.m <= r.max_m;
}

int mma_wgmma_tokens(const MmaDecodeArgs& a) {
  const int forced = mma_decode_forced().wgmma_tokens;
  if (forced != 0) return forced;
  return a.m <= 32 ? 32 : (a.m <= 64 ? 64 : (a.m <= 128 ? 128 : 256));
}

// One block per SM (its ring takes most of the shared memory): split K only while the blocks leave SMs
// idle, into the most splits that still fit one wave, with at least 512 K per split and the FP32 partial
// sums no larger than the packed weights. Measured on the H200: splitting layers that already fill the SMs
// (8b.gate_up, 224 blocks; 70b.gate_up, 448) into several waves of short blocks lost up to 35% (the ring's
// fill per block and the partial sums); splitting the ones that leave them idle (64 blocks: 2 splits,
// 32 blocks: 4) won up to 3x.
int mma_wgmma_splits(const MmaDecodeArgs& a) {
  const int64_t tokens = mma_wgmma_tokens(a);
  const int64_t blocks = (a.layout.n + kWgmmaRowsPerBlock - 1) / kWgmmaRowsPerBlock * ((a.m + tokens - 1) / tokens);
  const int64_t stages = a.layout.k_slabs() * 2;
  int64_t best = 1;
  if (mma_decode_forced().splits > 0) {
    best = std::min<int64_t>(mma_decode_forced().splits, stages);
  } else {
    for (int64_t s = 2; s <= 8 && blocks * s <= a.sm_count && stages / s >= kWgmmaMinStagesPerSplit; ++s) {
      if (s * a.m * a.layout.n * 4 > a.layout.weight_bytes()) break;
      best = s;
    }
  }
  const int64_t per = (stages + best - 1) / best;
  return static_cast<int>((stages + per - 1) / per);
}

std::string mma_wgmma_description(const MmaDecodeArgs& a) {
  const int splits = mma_wgmma_splits(a);
  std::string why = "swap-AB wgmma kernel: " + std::to_string(mma_wgmma_tokens(a)) +
                    " tokens (wgmma N) x 128 rows per block (weights decoded into the register A operand), TMA / "
                    "bulk-copy ring of 64 K stages, split-K " + std::to_string(splits);
  if (a.m > mma_wgmma_tokens(a)) why += ", M tiles decode the weights again each";
  return why;
}

Status launch_mma_wgmma(const MmaDecodeArgs& a, Stream stream) {
  if (a.m == 0 || a.layout.n == 0) return Status::ok();
  std::string why;
  if (!mma_wgmma_supports(a, &why)) return Status::error("mma_decode wgmma: " + why);
  if (a.ld_x % 8 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0) {
    return Status::error("mma_decode wgmma: activation rows must start 16-byte aligned (TMA)");
  }
  const int tokens = mma_wgmma_tokens(a), splits = mma_wgmma_splits(a);
  Scratch partial;
  if (splits > 1) {
    QL_ASSIGN_OR_RETURN(partial, Scratch::make(sizeof(float) * splits * a.m * a.layout.n, stream));
  }
  float* p = splits > 1 ? partial.as<float>() : nullptr;
  if (a.layout.code == MmaCode::kE4M3) {
    QL_RETURN_IF_ERROR(mma_wgmma::launch_e4m3(a, tokens, splits, p, stream));
  } else {
    QL_RETURN_IF_ERROR(mma_wgmma::launch_e2m1(a, tokens, splits, p, stream));
  }
  if (p != nullptr) {
    const int64_t total = a.m * a.layout.n;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4 * a.sm_count));
    mma_detail::mma_decode_reduce_kernel<<<blocks, 256, 0, stream>>>(a, splits, p);
    QL_CUDA_CHECK_LAUNCH("mma_decode_reduce_kernel (wgmma splits)");
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
