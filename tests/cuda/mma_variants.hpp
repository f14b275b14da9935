#pragma once
// The forced variants of the tensor-core decode GEMM (cuda::MmaDecodeForce) that the tests check against the
// reference and the benchmark times side by side with the table's choice, by the M range each applies to.
#include <string>
#include <vector>

#include "backends/cuda/mma_decode.hpp"

namespace qlinear::cuda_test {

struct MmaVariant {
  std::string name;
  int64_t min_m, max_m;  // the M range where it changes what runs
  cuda::MmaDecodeForce force;
};

inline std::vector<MmaVariant> mma_variants() {
  using cuda::MmaDecodeForce;
  using cuda::MmaSmallMKernel;
  using cuda::MmaWidenKind;
  std::vector<MmaVariant> v;
  auto add = [&](const char* name, int64_t lo, int64_t hi, auto&& set) {
    MmaDecodeForce f;
    set(f);
    v.push_back({name, lo, hi, f});
  };
  // M <= 16: the pipelined kernel's knobs, then the registers kernel.
  add("pipe", 1, 16, [](MmaDecodeForce& f) { f.small_m = MmaSmallMKernel::kPipelined; });
  add("st3", 1, 16, [](MmaDecodeForce& f) {  // 3 stages exist for 64-row blocks only
    f.small_m = MmaSmallMKernel::kPipelined;
    f.stages = 3;
    f.n16_per_warp = 1;
  });
  add("nt1", 1, 16, [](MmaDecodeForce& f) { f.small_m = MmaSmallMKernel::kPipelined; f.n16_per_warp = 1; });
  add("nt2", 1, 16, [](MmaDecodeForce& f) { f.small_m = MmaSmallMKernel::kPipelined; f.n16_per_warp = 2; });
  add("pipe_s1", 1, 16, [](MmaDecodeForce& f) { f.small_m = MmaSmallMKernel::kPipelined; f.splits = 1; });
  // Split-K on the pipelined kernel: added in a cluster (forced counts), or through partial sums and a
  // second launch with the splits that rule chose.
  using cuda::MmaSplitReduce;
  add("ps", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kPartials; });
  add("cl2", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kCluster; f.splits = 2; });
  add("cl3", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kCluster; f.splits = 3; });
  add("cl4", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kCluster; f.splits = 4; });
  add("cl8", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kCluster; f.splits = 8; });
  add("p2", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kPartials; f.splits = 2; });
  add("p3", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kPartials; f.splits = 3; });
  add("p4", 1, 16, [](MmaDecodeForce& f) { f.split_reduce = MmaSplitReduce::kPartials; f.splits = 4; });
  // M <= 16: the weights read without the L2 streaming (evict-first) window.
  add("nostream", 1, 16, [](MmaDecodeForce& f) { f.no_l2_streaming = true; });
  // Quantized activations: the GEMM launched plainly after the activation pass (no programmatic launch).
  add("nopdl", 1, 1 << 20, [](MmaDecodeForce& f) { f.no_programmatic = true; });
  add("reg2", 1, 16, [](MmaDecodeForce& f) { f.small_m = MmaSmallMKernel::kRegisters; f.register_depth = 2; });
  add("reg4", 1, 16, [](MmaDecodeForce& f) { f.small_m = MmaSmallMKernel::kRegisters; f.register_depth = 4; });
  add("reg4_nocl", 1, 16, [](MmaDecodeForce& f) {
    f.small_m = MmaSmallMKernel::kRegisters;
    f.register_depth = 4;
    f.no_cluster_reduce = true;
  });
  add("reg4_s1", 1, 16, [](MmaDecodeForce& f) {
    f.small_m = MmaSmallMKernel::kRegisters;
    f.register_depth = 4;
    f.splits = 1;
  });
  // 17 <= M: larger tiles of the pipelined kernel (the widen route and the wgmma kernel off so that they run
  // at every M).
  add("mma64", 17, 1 << 20, [](MmaDecodeForce& f) { f.widen_above_m = -1; f.wgmma = -1; });
  add("t64x64", 17, 1 << 20, [](MmaDecodeForce& f) { f.widen_above_m = -1; f.wgmma = -1; f.large_m_config = 1; });
  add("t64x128", 17, 1 << 20, [](MmaDecodeForce& f) { f.widen_above_m = -1; f.wgmma = -1; f.large_m_config = 2; });
  // The swap-AB wgmma kernel (mma_decode_wgmma.hpp; every code, MX layers whose scales do not fold keep the
  // mma.sync kernel): its token tile by M (64, 128, 256) or forced, split counts, one block per unit, 256-row
  // units, stream-K or split-K, L2 hints, the groups drained every 4 stages, the ring depth.
  add("wgmma", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; });
  add("wg_t64", 65, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_tokens = 64; });
  add("wg_t128", 129, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_tokens = 128; });
  add("wg_s1", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.splits = 1; });
  add("wg_s2", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.splits = 2; });
  add("wg_s4", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.splits = 4; });
  add("wg_np", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_persist = -1; });  // a block per unit
  add("wg_r256", 17, 64, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_rows = 256; });  // 256 rows, 64 tokens
  add("wg_cl2", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_cluster = 2; });  // block pairs
  // Its shared-memory variant (tokens as wgmma M, 128 per block): 256 and 128 weight rows per block.
  add("wg_ss", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_smem_b = 1; });
  add("wg_ss_r128", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_smem_b = 1; f.wgmma_rows = 128; });
  add("wg_ss_s1", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_smem_b = 1; f.splits = 1; });
  add("wg_cl4", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_cluster = 4; });
  add("wg_cl2s2", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_cluster = 2; f.splits = 2; });
  add("wg_cl2r", 17, 64, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_cluster = 2; f.wgmma_rows = 256; });
  add("wg_sk", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_stream_k = 1; });
  add("wg_nosk", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_stream_k = -1; });
  add("wg_nohint", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_no_hint = true; });
  add("wg_drain", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_drain = true; });
  add("wg_st4", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_stages = 4; });
  add("wg_st8", 17, 1 << 20, [](MmaDecodeForce& f) { f.wgmma = 1; f.wgmma_stages = 8; });
  // The widen route from M = 65 (the wgmma kernel off): fragments or gathered elements, row blocks or the
  // whole weight (the table: whole up to 1 GiB of BF16).
  add("wfrag32", 65, 1 << 20, [](MmaDecodeForce& f) {
    f.widen_above_m = 64;
    f.wgmma = -1;
    f.widen = MmaWidenKind::kFragments;
    f.widen_block_mib = 32;
  });
  add("wgather32", 65, 1 << 20, [](MmaDecodeForce& f) {
    f.widen_above_m = 64;
    f.wgmma = -1;
    f.widen = MmaWidenKind::kGather;
    f.widen_block_mib = 32;
  });
  add("wfrag8", 65, 1 << 20, [](MmaDecodeForce& f) {
    f.widen_above_m = 64;
    f.wgmma = -1;
    f.widen = MmaWidenKind::kFragments;
    f.widen_block_mib = 8;
  });
  add("wfrag_all", 65, 1 << 20, [](MmaDecodeForce& f) {
    f.widen_above_m = 64;
    f.wgmma = -1;
    f.widen = MmaWidenKind::kFragments;
    f.widen_block_mib = -1;
  });
  return v;
}

// Timing probes (benchmark only: their outputs are wrong): a stage without its decode, without its weight
// copies, without both, without its MMAs, with only its activation copies, no stage at all; of the pipelined kernel at 1-8 tokens (MXFP4 only: the other schemes' rows say so)
// and of the wgmma kernel.
inline std::vector<MmaVariant> mma_probe_variants() {
  std::vector<MmaVariant> v;
  cuda::MmaDecodeForce p;
  p.small_m = cuda::MmaSmallMKernel::kPipelined;
  p.small_m_probe = 1;
  v.push_back({"nodec", 1, 8, p});
  p.small_m_probe = 2;
  v.push_back({"nowt", 1, 8, p});
  p.small_m_probe = 3;
  v.push_back({"xonly", 1, 8, p});
  p.small_m_probe = 4;
  v.push_back({"nomma", 1, 8, p});
  p.small_m_probe = 7;
  v.push_back({"xcopy", 1, 8, p});  // only the activation copies, barriers and fragment loads
  p.small_m_probe = 8;
  v.push_back({"noloop", 1, 8, p});
  cuda::MmaDecodeForce f;
  f.wgmma = 1;
  f.wgmma_probe = 1;
  v.push_back({"wg_nodec", 17, 1 << 20, f});
  f.wgmma_probe = 2;
  v.push_back({"wg_nowt", 17, 1 << 20, f});
  f.wgmma_probe = 3;
  v.push_back({"wg_xonly", 17, 1 << 20, f});
  return v;
}

// Sets a variant for its scope, restores the table's choices after.
class ForceScope {
 public:
  explicit ForceScope(const cuda::MmaDecodeForce& f) { cuda::mma_decode_force(f); }
  ~ForceScope() { cuda::mma_decode_force({}); }
  ForceScope(const ForceScope&) = delete;
  ForceScope& operator=(const ForceScope&) = delete;
};

}  // namespace qlinear::cuda_test
