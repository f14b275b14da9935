#include "qlinear/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace qlinear {

std::string Device::to_string() const {
  return kind == DeviceKind::kCpu ? "cpu" : "cuda:" + std::to_string(index);
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

namespace {

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    // Only a shape with a zero dimension (no elements, so no stride is ever used) can overflow here.
    if (__builtin_mul_overflow(strides[i + 1], shape[i + 1], &strides[i])) strides[i] = 0;
  }
  return strides;
}

// The element count of a shape a tensor is built with, or std::length_error: a negative dimension or a
// count beyond int64 would otherwise wrap (undefined behaviour) into a small buffer that later writes overrun.
void check_shape(DType dtype, const Shape& shape) {
  const std::optional<int64_t> n = checked_numel(shape);
  if (!n || !checked_storage_bytes(dtype, *n)) {
    throw std::length_error("tensor " + std::string(name(dtype)) + shape_to_string(shape) +
                            (n ? ": its size in bytes" : ": its element count") +
                            " is negative or does not fit in int64");
  }
}

}  // namespace

std::optional<int64_t> checked_numel(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  // Zero in any dimension makes the count 0 whatever overflowed before it.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  if (overflow) return std::nullopt;
  return n;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  check_shape(dtype, shape);
  Tensor t;
  t.dtype_ = dtype;
  t.dtype_set_ = true;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  // 64-byte alignment: a cache line and a full AVX-512 vector; at least one line so data() is never null.
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(t.nbytes(), 1)) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, static_cast<size_t>(t.nbytes()));
  return t;
}

Tensor Tensor::from_blob(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner, Device device) {
  check_shape(dtype, shape);
  Tensor t;
  t.dtype_ = dtype;
  t.dtype_set_ = true;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  t.device_ = device;
  return t;
}

Tensor Tensor::scalar_f32(float value) {
  Tensor t = empty(DType::kF32, {});
  *t.data<float>() = value;
  return t;
}

int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += rank();
  return shape_.at(static_cast<size_t>(dim));
}

// Every constructor checked the shape (check_shape), so the count is representable.
int64_t Tensor::numel() const { return *checked_numel(shape_); }

int64_t Tensor::nbytes() const { return storage_bytes(dtype_, numel()); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Result<Tensor> Tensor::reshape(Shape shape) const {
  if (!is_contiguous()) return Status::error("reshape of a non-contiguous tensor " + describe());
  if (checked_numel(shape) != numel()) {
    return Status::error("cannot reshape " + describe() + " to " + shape_to_string(shape) +
                         ": element counts differ");
  }
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Result<Tensor> Tensor::narrow(int dim, int64_t begin, int64_t length) const {
  if (rank() < 1 || dim < 0 || dim >= rank()) {
    return Status::error("narrow: dim " + std::to_string(dim) + " out of range for " + describe());
  }
  if (begin < 0 || length < 0 || begin + length > shape_[dim]) {
    return Status::error("narrow: [" + std::to_string(begin) + ", " + std::to_string(begin + length) +
                         ") out of range for dim " + std::to_string(dim) + " of " + describe());
  }
  if (is_packed(dtype_)) return Status::error("narrow: packed dtype " + std::string(name(dtype_)));
  Tensor t = *this;
  t.shape_[dim] = length;
  t.data_ = static_cast<char*>(data_) + begin * strides_[dim] * element_size(dtype_);
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(dtype_, shape_);
  const int es = element_size(dtype_);
  // Copy innermost contiguous runs; qlinear's views are 2-D narrows, so this is a row loop.
  const int64_t inner = shape_.empty() ? 1 : shape_.back();
  const int64_t rows = inner == 0 ? 0 : numel() / inner;
  Shape index(shape_.size(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    int64_t rem = r;
    for (int d = rank() - 2; d >= 0; --d) {
      index[d] = rem % shape_[d];
      rem /= shape_[d];
      offset += index[d] * strides_[d];
    }
    const char* src = static_cast<const char*>(data_) + offset * es;
    char* dst = static_cast<char*>(out.data_) + r * inner * es;
    if (strides_.back() == 1) {
      std::memcpy(dst, src, static_cast<size_t>(inner * es));
    } else {
      for (int64_t i = 0; i < inner; ++i) std::memcpy(dst + i * es, src + i * strides_.back() * es, es);
    }
  }
  return out;
}

Tensor Tensor::clone() const {
  Tensor c = contiguous();
  if (c.data_ != data_) return c;
  Tensor out = empty(dtype_, shape_);
  std::memcpy(out.data_, data_, static_cast<size_t>(nbytes()));
  return out;
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined tensor>";
  return std::string(name(dtype_)) + shape_to_string(shape_);
}

double element_as_double(const Tensor& t, int64_t i) {
  const void* p = t.raw();
  switch (t.dtype()) {
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kI8: return static_cast<const int8_t*>(p)[i];
    case DType::kU8: return static_cast<const uint8_t*>(p)[i];
    case DType::kI16: return static_cast<const int16_t*>(p)[i];
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kE8M0: return decode(t.dtype(), static_cast<const uint8_t*>(p)[i]);
    default: return decode(t.dtype(), unpack_code(t.dtype(), static_cast<const uint8_t*>(p), i));
  }
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  if (parts.size() == 1) return parts[0].contiguous();
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Shape shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(parts[0].dtype(), shape);
  char* dst = static_cast<char*>(out.raw());
  for (const Tensor& p : parts) {
    const Tensor c = p.contiguous();
    std::memcpy(dst, c.raw(), static_cast<size_t>(c.nbytes()));
    dst += c.nbytes();
  }
  return out;
}

Tensor f32_vector(const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::kF32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data<float>(), values.data(), sizeof(float) * values.size());
  return t;
}

}  // namespace qlinear
