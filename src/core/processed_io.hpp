#pragma once
// Helpers for kernels' export_impl / import_impl (kernel.hpp): copying state vectors and buffers into host
// tensors and back. Imports check every tensor's dtype and shape against what the layer's config implies
// (expect_processed_tensor), so a well-checksummed entry of the wrong shape is refused, never read past.
#include <cstdint>
#include <cstring>
#include <string>
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

}  // namespace qlinear::processed_io
