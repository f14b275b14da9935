#pragma once
// A Tensor is a typed, shaped, strided view of bytes plus shared ownership of whatever holds them
// (a heap buffer, a memory-mapped checkpoint file, device memory). Copying a Tensor copies the view,
// not the data. Sub-byte formats are stored as U8 tensors of packed bytes (see formats.hpp).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qlinear/formats.hpp"
#include "qlinear/status.hpp"

namespace qlinear {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

using Shape = std::vector<int64_t>;
std::string shape_to_string(const Shape& shape);  // "[4096, 128]"
// The product of the dimensions; nullopt when a dimension is negative or the product overflows int64.
std::optional<int64_t> checked_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false

  // Allocates contiguous host memory, 64-byte aligned. Contents are unspecified (empty) or zero.
  // A shape with a negative dimension, or whose element or byte count does not fit in int64, throws
  // std::length_error naming the dtype and shape (as from_blob does); memory that cannot be had throws
  // std::bad_alloc.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // A contiguous view of memory someone else owns; `owner` keeps it alive (may be null for borrowed data).
  static Tensor from_blob(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                          Device device = {});
  // A scalar f32 tensor of shape [] holding `value`.
  static Tensor scalar_f32(float value);

  bool defined() const { return dtype_set_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements (packed formats: contiguous only)
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const;
  int64_t nbytes() const;       // bytes of the viewed elements (contiguous tensors)
  Device device() const { return device_; }
  bool is_contiguous() const;

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T> T* data() { return static_cast<T*>(data_); }
  template <class T> const T* data() const { return static_cast<const T*>(data_); }
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Same bytes, new shape (contiguous tensors only; numel must match).
  Result<Tensor> reshape(Shape shape) const;
  // Rows [begin, end) along dim 0 or columns along dim 1 of a 2-D tensor, as a (possibly strided) view.
  Result<Tensor> narrow(int dim, int64_t begin, int64_t length) const;
  // A contiguous host copy.
  Tensor contiguous() const;
  Tensor clone() const;

  // "f32[4096, 128]"
  std::string describe() const;

 private:
  DType dtype_ = DType::kF32;
  bool dtype_set_ = false;
  Shape shape_;
  Shape strides_;
  Device device_;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

// Reads element i of a 1-D-flattened contiguous float/integer tensor as double (tests, reference code).
double element_as_double(const Tensor& t, int64_t flat_index);

// Stacks host tensors of one dtype along dim 0 (fused shards: weights, per-row and block scales).
Tensor concat_rows(const std::vector<Tensor>& parts);
// An f32 [values.size()] tensor (per-shard scalar scales).
Tensor f32_vector(const std::vector<float>& values);

}  // namespace qlinear
