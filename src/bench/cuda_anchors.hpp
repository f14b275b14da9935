#pragma once
// The CUDA anchors of `qlinear bench --compare` (what a user would run instead), measured with the
// DeviceTimer on operands already on the device (weight copies rotated as the timer asks):
//   bf16    cuBLAS BF16 GEMM (cublasGemmEx, FP32 compute, as torch.mm) on the unquantized weights in BF16;
//   vendor  cuBLASLt's quantized GEMM on operands already quantized (what torch._scaled_mm / torch._int_mm
//           time): FP8 per-tensor (scalar scales), FP8 per-channel/per-token (outer-vector scales), FP8
//           128x128 weight blocks with 1x128 input groups, INT8 with INT32 output. The 8-bit weight-only and
//           MXFP8 schemes get FP8 outer-vector (the 8-bit GEMM a Hopper user runs); 4- and 6-bit schemes
//           have no vendor GEMM on sm_90 (cuBLASLt's MX/NVFP4 block-scale modes need sm_100): an error;
//   read    the read floor: a plain streaming kernel (cuda::dram_read_floor) reading as many bytes as the
//           layer must at least read, its weights as stored plus the M x K BF16 activations, from a flushed
//           L2. Not a GEMM: the time no kernel of that layer can beat by much at that size, launch, first
//           bytes and tail included (a 4 GiB read, --roofline's, hides them). anchor / ours is the fraction of
//           that floor reached, and bf16 / read the largest ratio to BF16 the layer's bytes allow.
#include <cstdint>
#include <memory>
#include <string>

#include "bench/timing.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::bench {

class CudaAnchor {
 public:
  // kind "bf16" or "vendor"; an error says why this anchor has no counterpart for `scheme` (or that qlinear
  // was built without CUDA).
  // The anchor's name ("cublas_bf16", "cublaslt_fp8_rowwise", ...) without creating it: schemes that share
  // an anchor share its measurement. The same errors as create.
  static Result<std::string> name_for(const std::string& kind, const Scheme& scheme, int64_t k);
  static Result<std::unique_ptr<CudaAnchor>> create(const std::string& kind, const Scheme& scheme, int64_t n,
                                                    int64_t k, DeviceTimer& timer);
  // The read anchor of a layer whose stored weights take `weight_bytes`, with K input features.
  static Result<std::unique_ptr<CudaAnchor>> create_read_floor(int64_t weight_bytes, int64_t k, DeviceTimer& timer);
  virtual ~CudaAnchor() = default;
  virtual const std::string& name() const = 0;
  virtual Result<Timing> time(int64_t m, int reps) = 0;
};

}  // namespace qlinear::bench
