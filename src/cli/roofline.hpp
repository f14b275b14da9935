#pragma once
// This machine's roofline, measured: the DRAM read bandwidth (a streaming sum over 1 GiB, all threads) and
// the peak rates of the dot-product units the CPU kernels use (independent FMA / dot chains, all threads).
#include <string>

#include "qlinear/platform.hpp"

namespace qlinear::cli {

struct Roofline {
  double dram_gbps = 0;      // bytes read per second
  double fp32_gflops = 0;    // FMA: 2 FLOP per lane
  double bf16_gflops = 0;    // vdpbf16ps where present, else 0
  double int8_gops = 0;      // vpdpbusd (AVX-512 VNNI) or vpmaddubsw+vpmaddwd (AVX2): 2 OP per MAC
  std::string describe() const;
};

Roofline measure_roofline(const Platform& platform);

// The best rate a kernel of `family` can reach at arithmetic intensity `ops_per_byte` (OP per DRAM byte).
double attainable_gops(const Roofline& r, bool int8_family, bool bf16_family, double ops_per_byte);

}  // namespace qlinear::cli
