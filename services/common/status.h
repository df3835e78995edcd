// Status and StatusOr: the error values returned where files, networks and
// users are met (leveldb / absl style). Numeric code throws instead.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace scdino {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kIOError,
  kDataLoss,
  kUnavailable,
  kAborted,
  kInternal,
  /// Training went wrong in a way that running it again would repeat (a
  /// non-finite loss, a collapse with on_collapse: stop): never a requeue.
  kDiverged,
  /// A write found the disk or the quota full (ENOSPC, EDQUOT): running
  /// again fails the same way until space is made, so never a requeue.
  kNoSpace,
  /// A peer rank (or its node) was lost mid-run: the work resumes from its
  /// last checkpoint on the ranks and nodes that are left (a requeue).
  kPeerLost,
};

/// The outcome of an operation: ok, or a code plus a message that names the
/// file, key or value concerned and what was expected. Immutable, copyable;
/// safe to share between threads.
class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Diverged(std::string m) { return {StatusCode::kDiverged, std::move(m)}; }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status PeerLost(std::string m) { return {StatusCode::kPeerLost, std::move(m)}; }
  /// A failed write, said again with more context: NoSpace stays NoSpace,
  /// anything else becomes IOError.
  static Status WriteFailed(const Status& cause, std::string m) {
    return {cause.code() == StatusCode::kNoSpace ? StatusCode::kNoSpace : StatusCode::kIOError, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

 private:
  Status(StatusCode c, std::string m) : code_(c), message_(std::move(m)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* StatusCodeName(StatusCode code);

/// Thrown by ThrowIfError; carries the Status across layers that use
/// exceptions (the numeric code, the trainer loop).
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status s) : std::runtime_error(s.ToString()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

/// A value or the Status explaining why there is none.
template <typename T>
class StatusOr {
 public:
  StatusOr(Status s) : status_(std::move(s)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("StatusOr built from an OK status without a value");
  }
  StatusOr(T v) : value_(std::move(v)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { Check(); return *value_; }
  const T& value() const& { Check(); return *value_; }
  T&& value() && { Check(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (!status_.ok()) throw StatusError(status_);
  }
  Status status_;
  std::optional<T> value_;
};

/// "%g" of a number: how messages and plot labels show a value.
std::string FormatNumber(double v);
/// A number with `digits` digits after the point (CSV and JSON reports).
std::string FormatFixed(double v, int digits);

}  // namespace scdino
