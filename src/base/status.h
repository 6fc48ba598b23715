// Status and Result<T>: errors as values across module boundaries (style rule 9).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace peregrine {

enum class StatusCode {
  kOk,
  kInvalidArgument,   // the caller passed something malformed
  kNotFound,          // a file, tensor or key that must exist does not
  kOutOfRange,        // an offset, index or size past its bound
  kDataLoss,          // a file is truncated or inconsistent
  kUnimplemented,     // a valid request this build cannot serve
  kResourceExhausted, // memory, pages or queue slots ran out
  kInternal,          // a broken invariant surfaced as a value
  kUnavailable,       // a device or peer cannot be reached
  kDeadlineExceeded,  // work did not finish within its time limit
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }

// A value or the Status that explains its absence. Never holds an ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
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

}  // namespace peregrine

#define PG_CONCAT_INNER(a, b) a##b
#define PG_CONCAT(a, b) PG_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` fails.
#define PG_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::peregrine::Status pg_status_ = (expr);          \
    if (!pg_status_.ok()) return pg_status_;          \
  } while (0)

// `PG_ASSIGN_OR_RETURN(auto x, MakeX())` binds the value or returns the Status.
#define PG_ASSIGN_OR_RETURN(lhs, expr) PG_ASSIGN_OR_RETURN_IMPL(PG_CONCAT(pg_result_, __LINE__), lhs, expr)
#define PG_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
