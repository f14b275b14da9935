#pragma once
// Processed export / import of an x86 kernel's host state, both derived from the state's StateSchema
// (core/processed_io.hpp). Included by the kernels' baseline-flag files only: the templates instantiated here
// must never come from an ISA translation unit (see int8_isa.hpp).
#include <memory>
#include <utility>
#include <vector>

#include "backends/x86/x86_kernels.hpp"
#include "core/processed_io.hpp"
#include "qlinear/kernel.hpp"

namespace qlinear::x86 {

// A state with n and k from the layer's config, N padded to 16-column panels and K to `k_align`.
template <class State>
State planned_sizes(const LinearConfig& c, int64_t k_align) {
  State st;
  st.n = c.n;
  st.k = c.k;
  st.n_pad = (c.n + 15) / 16 * 16;
  st.k_pad = (c.k + k_align - 1) / k_align * k_align;
  return st;
}

// The check-only size fields every x86 state leads its "meta" with, then `more`.
template <class State>
std::vector<processed_io::StateField<State, int64_t>> size_fields_and(
    std::vector<processed_io::StateField<State, int64_t>> more = {}) {
  std::vector<processed_io::StateField<State, int64_t>> fields{{"n", [](const State& s) { return s.n; }},
                                                               {"k", [](const State& s) { return s.k; }},
                                                               {"n_pad", [](const State& s) { return s.n_pad; }},
                                                               {"k_pad", [](const State& s) { return s.k_pad; }}};
  fields.insert(fields.end(), more.begin(), more.end());
  return fields;
}

// The state's prepacked `packed` buffer as a 1-D D tensor of Bytes(state) elements.
template <class State, DType D, int64_t (*Bytes)(const State&)>
processed_io::StateTensor<State> packed_entry() {
  return {"packed",
          nullptr,
          [](const State&) { return D; },
          [](const State& s) { return Shape{Bytes(s)}; },
          nullptr,
          [](const State& s) { return aligned_bytes_tensor(s.packed, D, Bytes(s)); },
          [](State& s, const Tensor& t) { s.packed = aligned_bytes_of(t); }};
}

// The layer's state (host memory already) as processed tensors, in schema order.
template <class State>
Result<ProcessedWeights> export_host_state(const processed_io::StateSchema<State>& schema, const LinearLayer& layer) {
  return processed_io::export_state(schema, *static_cast<const State*>(layer.kernel_state.get()),
                                    [](const Tensor& t) -> Result<Tensor> { return t; });
}

// Fills `planned` (sizes and modes from the layer's config) from `weights`, runs `finish` on it (values
// derived from the imported buffers), and installs it; the packed buffers replace the checkpoint weight.
template <class State>
Status import_host_state(const processed_io::StateSchema<State>& schema, State planned, const ProcessedWeights& weights,
                         LinearLayer& layer, void (*finish)(State&) = nullptr) {
  auto st = std::make_shared<State>(std::move(planned));
  QL_RETURN_IF_ERROR(processed_io::import_state(schema, weights, *st));
  if (finish != nullptr) finish(*st);
  layer.kernel_state = st;
  layer.params.erase("weight");
  return Status::ok();
}

}  // namespace qlinear::x86
