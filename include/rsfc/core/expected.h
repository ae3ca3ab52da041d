// A tiny result type for OS-facing calls of the I/O shell (sockets, netlink, files): either a
// value or an Error (errno + one-line message). Per-packet paths use it instead of
// exceptions; start-up code turns an Error into a one-line message and a non-zero exit.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rsfc {

struct Error {
  int code = 0;         // errno value, 0 when not an OS error
  std::string message;  // one line, names the object ("nfqueue 3: bind: Operation not permitted")

  // "<what>: <strerror(err)>", code = err.
  static Error from_errno(int err, std::string_view what) {
    std::string m(what);
    m += ": ";
    m += std::strerror(err);  // glibc: thread-safe for known errno values
    return Error{err, std::move(m)};
  }
  static Error msg(std::string_view what) { return Error{0, std::string(what)}; }
};

namespace detail {
[[noreturn]] inline void bad_expected_access(const Error& e) {
  std::fprintf(stderr, "rsfc: value() of an Expected holding an error: %s\n", e.message.c_str());
  std::abort();
}
}  // namespace detail

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit
  Expected(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    if (!has_value()) detail::bad_expected_access(std::get<1>(v_));
    return std::get<0>(v_);
  }
  const T& value() const& {
    if (!has_value()) detail::bad_expected_access(std::get<1>(v_));
    return std::get<0>(v_);
  }
  T&& value() && {
    if (!has_value()) detail::bad_expected_access(std::get<1>(v_));
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : error_(std::move(error)) {}  // NOLINT: implicit

  bool has_value() const { return !error_.has_value(); }
  explicit operator bool() const { return has_value(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

}  // namespace rsfc
