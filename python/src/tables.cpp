// Names to qlinear's tables (schemes, kernels, CPU features, dtypes) and selections as Python values.
#include <string>
#include <vector>

#include "bindings.hpp"

namespace qlinear::python {

DType parse_dtype(const std::string& text, const char* what) {
  const auto d = dtype_from_name(text);
  if (!d) throw Error(std::string(what) + ": unknown dtype '" + text + "'; expected f32, bf16 or f16");
  return *d;
}

const Scheme& scheme_by_name(const std::string& name) {
  const Scheme* s = find_scheme(name);
  if (s == nullptr) throw Error("unknown scheme '" + name + "'; known schemes: " + scheme_names());
  return *s;
}

KernelRef kernel_by_name(const std::string& name) {
  const LinearKernel* k = find_kernel(name);
  if (k == nullptr) {
    std::string known;
    for (const LinearKernel* each : all_kernels()) known += (known.empty() ? "" : ", ") + std::string(each->name());
    throw Error("unknown kernel '" + name + "'; known kernels: " + known);
  }
  return {k};
}

CpuFeatures features_from_names(const std::vector<std::string>& names) {
  CpuFeatures f;
  struct Flag {
    const char* name;
    bool CpuFeatures::*field;
  };
  static const Flag kFlags[] = {
      {"avx2", &CpuFeatures::avx2},           {"fma", &CpuFeatures::fma},
      {"f16c", &CpuFeatures::f16c},           {"avx512f", &CpuFeatures::avx512f},
      {"avx512bw", &CpuFeatures::avx512bw},   {"avx512vl", &CpuFeatures::avx512vl},
      {"avx512dq", &CpuFeatures::avx512dq},   {"avx512_vnni", &CpuFeatures::avx512vnni},
      {"avx512_bf16", &CpuFeatures::avx512bf16}, {"avx512_fp16", &CpuFeatures::avx512fp16},
      {"avx_vnni", &CpuFeatures::avx_vnni},   {"amx_tile", &CpuFeatures::amx_tile},
      {"amx_int8", &CpuFeatures::amx_int8},   {"amx_bf16", &CpuFeatures::amx_bf16},
  };
  for (const std::string& n : names) {
    bool found = false;
    for (const Flag& flag : kFlags) {
      if (n == flag.name) f.*flag.field = found = true;
    }
    if (!found) {
      std::string known;
      for (const Flag& flag : kFlags) known += (known.empty() ? "" : ", ") + std::string(flag.name);
      throw Error("Platform.synthetic_cpu: unknown CPU feature '" + n + "'; known: " + known);
    }
  }
  return f;
}

SelectOptions select_options(const std::vector<std::string>& disabled, const std::string& force, bool read_env) {
  SelectOptions o;
  o.disabled = disabled;
  o.force = force;
  o.read_environment = read_env;
  for (const std::string& name : disabled) kernel_by_name(name);  // unknown names are an error, as in the env
  if (!force.empty()) kernel_by_name(force);
  return o;
}

PySelection make_selection(const Selection& s) {
  PySelection p;
  if (s.kernel != nullptr) p.kernel = KernelRef{s.kernel};
  for (const CandidateVerdict& c : s.candidates) p.candidates.push_back({KernelRef{c.kernel}, c.chosen, c.reason});
  p.forced = s.forced;
  p.text = s.explain();
  return p;
}

}  // namespace qlinear::python
