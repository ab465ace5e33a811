// Status and Result<T>: how every fallible reshard function reports failure.
//
// A Status is OK or carries a Code and a message. Result<T> holds either a T
// or a non-OK Status; it never holds an OK Status (constructing one from OK is
// a programming error and becomes Code::kInternal). Library functions that
// take user input (parsers, layout factories, planners) return these instead
// of throwing or aborting. Both types are plain values: copyable, movable,
// and safe to share between threads when not mutated.
#ifndef RESHARD_STATUS_H_
#define RESHARD_STATUS_H_

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace reshard {

class [[nodiscard]] Status {
 public:
  enum class Code { kOk, kInvalidArgument, kNotSupported, kInternal, kUnavailable };

  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotSupported(std::string msg) { return Status(Code::kNotSupported, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed by `context` and ": ".
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

template <typename T>
class [[nodiscard]] Result {
 public:
  explicit Result() : value_(Status::Internal("default-constructed Result")) {}
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {  // NOLINT
    if (std::get<Status>(value_).ok()) value_ = Status::Internal("Result constructed from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(value_);
  }
  // REQUIRES: ok().
  const T& value() const& { return std::get<T>(value_); }
  T& value() & { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace reshard

// Internal helpers for propagating failures; used in src/ only.
#define RESHARD_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::reshard::Status _st = (expr);            \
    if (!_st.ok()) return _st;                 \
  } while (0)

#define RESHARD_CONCAT_INNER(a, b) a##b
#define RESHARD_CONCAT(a, b) RESHARD_CONCAT_INNER(a, b)
#define RESHARD_ASSIGN_OR_RETURN(lhs, expr) \
  RESHARD_ASSIGN_OR_RETURN_IMPL(RESHARD_CONCAT(_res_, __LINE__), lhs, expr)
#define RESHARD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#endif  // RESHARD_STATUS_H_
