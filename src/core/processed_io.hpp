#pragma once
// Helpers for kernels' export_impl / import_impl (kernel.hpp): copying state vectors and buffers into host
// tensors and back. Imports check every tensor's dtype and shape against what the layer's config implies
// (expect_processed_tensor), so a well-checksummed entry of the wrong shape is refused, never read past.
//
// StateSchema declares a kernel state's processed form once (its scalar fields, grouped into small 1-D
// tensors, and its tensors with dtype and shape from the planned state); export_state and import_state are
// derived from it, so a field added to the state is added in one place.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "qlinear/kernel.hpp"

namespace qlinear::processed_io {

// A host copy of `count` elements at `data` as a 1-D `dtype` tensor ([0] tensors are allowed).
inline Tensor copy_1d(const void* data, DType dtype, int64_t count) {
  Tensor t = Tensor::empty(dtype, {count});
  if (count > 0) std::memcpy(t.raw(), data, static_cast<size_t>(t.nbytes()));
  return t;
}

template <class T>
Tensor from_vector(const std::vector<T>& v, DType dtype) {
  return copy_1d(v.data(), dtype, static_cast<int64_t>(v.size()));
}

// Reads tensor `name` (1-D `dtype` [count]) into `out`.
template <class T>
Status to_vector(const ProcessedWeights& w, const std::string& name, DType dtype, int64_t count, std::vector<T>& out) {
  QL_ASSIGN_OR_RETURN(Tensor t, expect_processed_tensor(w, name, dtype, {count}));
  out.assign(t.data<T>(), t.data<T>() + count);
  return Status::ok();
}

// Small integer fields (sizes, modes, flags) in one I64 tensor "meta", checked field by field on import.
inline Tensor meta_tensor(const std::vector<int64_t>& fields) { return from_vector(fields, DType::kI64); }

// Checks that "meta" holds exactly `expected` (what this layer's config implies), naming the first field that
// differs; `names` labels the fields for the message.
inline Status expect_meta(const ProcessedWeights& w, const std::vector<int64_t>& expected,
                          const std::vector<const char*>& names) {
  std::vector<int64_t> got;
  QL_RETURN_IF_ERROR(to_vector(w, "meta", DType::kI64, static_cast<int64_t>(expected.size()), got));
  for (size_t i = 0; i < expected.size(); ++i) {
    if (got[i] != expected[i]) {
      return Status::error("processed field " + std::string(names[i]) + " is " + std::to_string(got[i]) +
                           ", the layer implies " + std::to_string(expected[i]));
    }
  }
  return Status::ok();
}

// One scalar field of a state, stored as one element of its group's tensor. A field without `set` is
// checked on import against the value in the planned state (what the layer's config implies: sizes, modes);
// a field with `set` is read back.
template <class State, class T>
struct StateField {
  const char* name;
  T (*get)(const State&);
  void (*set)(State&, T) = nullptr;
};

// Fields stored together in one 1-D tensor named `tensor` of `dtype` (kI64 for T = int64_t, kF32 for float).
template <class State, class T>
struct FieldGroup {
  const char* tensor;
  std::vector<StateField<State, T>> fields;
};

// One tensor of a state: its member, dtype and shape (from the planned state) and whether this layer has it.
// A buffer that is not a Tensor member (a vector, aligned bytes, a scalar) leaves `member` null and names
// `get` (its host tensor) and `set` (stores the checked tensor) instead.
template <class State>
struct StateTensor {
  const char* name;
  Tensor State::*member;
  DType (*dtype)(const State&);
  Shape (*shape)(const State&);
  bool (*present)(const State&) = nullptr;  // null: every layer has it
  Tensor (*get)(const State&) = nullptr;
  void (*set)(State&, const Tensor&) = nullptr;

  bool in(const State& s) const { return present == nullptr || present(s); }
};

namespace detail {
template <class M>
struct MemberOf;
template <class C, class V>
struct MemberOf<V C::*> {
  using State = C;
  using Value = V;
};
}  // namespace detail

// A std::vector member stored as a 1-D D tensor of `shape`, present where `present` says (null: always):
// vector_entry<&S::col_scale, DType::kF32>("col_scale", shape_fn, present_fn).
template <auto Member, DType D>
auto vector_entry(const char* name, Shape (*shape)(const typename detail::MemberOf<decltype(Member)>::State&),
                  bool (*present)(const typename detail::MemberOf<decltype(Member)>::State&) = nullptr) {
  using State = typename detail::MemberOf<decltype(Member)>::State;
  using T = typename detail::MemberOf<decltype(Member)>::Value::value_type;
  return StateTensor<State>{name,
                            nullptr,
                            [](const State&) { return D; },
                            shape,
                            present,
                            [](const State& st) { return from_vector(st.*Member, D); },
                            [](State& st, const Tensor& t) { (st.*Member).assign(t.data<T>(), t.data<T>() + t.numel()); }};
}

// A state's processed form: the I64 groups, then the F32 groups, then the tensors, in that order on export.
template <class State>
struct StateSchema {
  std::vector<FieldGroup<State, int64_t>> i64_groups;
  std::vector<FieldGroup<State, float>> f32_groups;
  std::vector<StateTensor<State>> tensors;
};

namespace detail {
template <class State, class T>
void export_group(const FieldGroup<State, T>& g, const State& st, DType dtype, ProcessedWeights& w) {
  std::vector<T> values;
  for (const auto& f : g.fields) values.push_back(f.get(st));
  w.tensors.emplace_back(g.tensor, from_vector(values, dtype));
}

template <class State, class T>
Status import_group(const FieldGroup<State, T>& g, const ProcessedWeights& w, DType dtype, State& st) {
  std::vector<T> got;
  QL_RETURN_IF_ERROR(to_vector(w, g.tensor, dtype, static_cast<int64_t>(g.fields.size()), got));
  for (size_t i = 0; i < g.fields.size(); ++i) {
    const auto& f = g.fields[i];
    if (f.set != nullptr) {
      f.set(st, got[i]);
    } else if (const T want = f.get(st); got[i] != want) {
      return Status::error("processed field " + std::string(f.name) + " is " + std::to_string(got[i]) +
                           ", the layer implies " + std::to_string(want));
    }
  }
  return Status::ok();
}
}  // namespace detail

// The state as host tensors, in schema order; `to_host` makes each present tensor a contiguous host tensor
// (a device copy, or the tensor itself).
template <class State, class ToHost>
Result<ProcessedWeights> export_state(const StateSchema<State>& schema, const State& st, ToHost&& to_host) {
  ProcessedWeights w;
  for (const auto& g : schema.i64_groups) detail::export_group(g, st, DType::kI64, w);
  for (const auto& g : schema.f32_groups) detail::export_group(g, st, DType::kF32, w);
  for (const auto& t : schema.tensors) {
    if (!t.in(st)) continue;
    QL_ASSIGN_OR_RETURN(Tensor host, to_host(t.member != nullptr ? st.*t.member : t.get(st)));
    w.tensors.emplace_back(t.name, std::move(host));
  }
  return w;
}

// Fills `st` (planned from the layer's config) from `w`: checked fields compared, read fields set, and each
// tensor the layer has checked to be a host tensor of the dtype and shape the plan implies, then stored.
template <class State>
Status import_state(const StateSchema<State>& schema, const ProcessedWeights& w, State& st) {
  for (const auto& g : schema.i64_groups) QL_RETURN_IF_ERROR(detail::import_group(g, w, DType::kI64, st));
  for (const auto& g : schema.f32_groups) QL_RETURN_IF_ERROR(detail::import_group(g, w, DType::kF32, st));
  for (const auto& t : schema.tensors) {
    if (!t.in(st)) continue;
    QL_ASSIGN_OR_RETURN(Tensor host, expect_processed_tensor(w, t.name, t.dtype(st), t.shape(st)));
    if (t.member != nullptr) {
      st.*t.member = std::move(host);
    } else {
      t.set(st, host);
    }
  }
  return Status::ok();
}

}  // namespace qlinear::processed_io
