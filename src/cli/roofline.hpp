#pragma once
// This machine's roofline, measured.
//   CPU: the DRAM read bandwidth as the kernels read (all threads, vector loads, a set of max(1 GiB, 2 x the
//        last-level cache) read several times, the median) and the peak rates of the dot-product units the
//        CPU kernels use (independent FMA / dot chains, all threads).
//   CUDA: the DRAM read bandwidth (a 4 GiB read kernel timed with the DeviceTimer) and the peaks reached by
//        the vendor's GEMMs at 8192^3 (cuBLAS BF16, cuBLASLt FP8 per-tensor and INT8): the measured ceiling,
//        not the datasheet's.
#include <string>

#include <nlohmann/json.hpp>

#include "qlinear/platform.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::cli {

struct Roofline {
  double dram_gbps = 0;      // bytes read per second
  double fp32_gflops = 0;    // FMA: 2 FLOP per lane
  double bf16_gflops = 0;    // vdpbf16ps where present, else 0
  double int8_gops = 0;      // vpdpbusd (AVX-512 VNNI) or vpmaddubsw+vpmaddwd (AVX2): 2 OP per MAC
  double fp8_gflops = 0;     // CUDA: cuBLASLt FP8
  std::string describe() const;
  nlohmann::json to_json() const;
  // The peak of the units a scheme's kernels use: INT8 W8A8 the int8 rate, FP8 W8A8 the FP8 rate where
  // measured, the rest BF16 (FP32 where there is no BF16 rate).
  double peak_gops(const Scheme& scheme) const;
};

Roofline measure_cpu_roofline(const Platform& platform);
// An error without the CUDA backend.
Result<Roofline> measure_cuda_roofline(const Platform& platform);

// The best rate `scheme` can reach at arithmetic intensity `ops_per_byte` (OP per DRAM byte).
double attainable_gops(const Roofline& r, const Scheme& scheme, double ops_per_byte);

}  // namespace qlinear::cli
