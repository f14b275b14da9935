#pragma once
// Errors are values at the edges of qlinear: every public call that can fail on user input returns a
// Status or a Result<T> whose message names what was wrong, where (file, tensor, layer, flag) and what
// was expected. Nothing in the library aborts on bad input.
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace qlinear {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message), 0); }

  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string kOk = "ok";
    return message_ ? *message_ : kOk;
  }
  // Prefixes context ("layer model.layers.0.q_proj: ") to an error; an ok status stays ok.
  Status with_context(const std::string& where) const {
    return is_ok() ? *this : Status::error(where + ": " + *message_);
  }

 private:
  Status(std::string m, int) : message_(std::move(m)) {}
  std::optional<std::string> message_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose, `return value;`
  Result(Status error) : v_(std::move(error)) {}  // NOLINT: `return Status::error(...)`

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }
  const std::string& message() const { return std::get<Status>(v_).message(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace qlinear

// Propagates an error Status out of the calling function.
#define QL_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::qlinear::Status ql_status_ = (expr);       \
    if (!ql_status_.is_ok()) return ql_status_;  \
  } while (0)

#define QL_CONCAT_INNER(a, b) a##b
#define QL_CONCAT(a, b) QL_CONCAT_INNER(a, b)
// `QL_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define QL_ASSIGN_OR_RETURN(lhs, expr) QL_ASSIGN_OR_RETURN_IMPL(QL_CONCAT(ql_result_, __LINE__), lhs, expr)
#define QL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
