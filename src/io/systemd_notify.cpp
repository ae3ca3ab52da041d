#include "rsfc/io/systemd_notify.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rsfc {

namespace {

// The value of an unsigned decimal environment variable; nullopt if unset or malformed.
std::optional<uint64_t> env_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view s(text);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

SystemdNotifier SystemdNotifier::from_environment() {
  const char* path = std::getenv("NOTIFY_SOCKET");
  return SystemdNotifier(path != nullptr ? std::string_view(path) : std::string_view());
}

SystemdNotifier::SystemdNotifier(std::string_view socket_path) {
  if (socket_path.size() < 2 || socket_path.size() >= sizeof(addr_.sun_path) ||
      (socket_path[0] != '/' && socket_path[0] != '@')) {
    return;
  }
  addr_.sun_family = AF_UNIX;
  std::memcpy(addr_.sun_path, socket_path.data(), socket_path.size());
  if (socket_path[0] == '@') addr_.sun_path[0] = '\0';  // abstract: no trailing NUL counted
  addr_len_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path.size());
}

Expected<void> SystemdNotifier::notify(std::string_view state) const {
  if (!enabled()) return {};
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::from_errno(errno, "sd_notify: socket");
  const ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                           reinterpret_cast<const sockaddr*>(&addr_), addr_len_);
  const int err = errno;
  ::close(fd);
  if (n < 0) return Error::from_errno(err, "sd_notify: sendto");
  return {};
}

std::chrono::microseconds watchdog_interval_from_environment() {
  const auto usec = env_number("WATCHDOG_USEC");
  if (!usec || *usec == 0) return std::chrono::microseconds(0);
  if (const auto pid = env_number("WATCHDOG_PID"); pid && *pid != static_cast<uint64_t>(getpid())) {
    return std::chrono::microseconds(0);  // meant for another process (e.g. our parent)
  }
  return std::chrono::microseconds(static_cast<int64_t>(std::min<uint64_t>(*usec, 1ull << 62)));
}

std::optional<size_t> WatchdogGate::check(std::span<const uint64_t> beats) {
  if (at_last_ping_.size() == beats.size()) {
    for (size_t i = 0; i < beats.size(); ++i) {
      if (beats[i] == at_last_ping_[i]) return i;
    }
  }
  at_last_ping_.assign(beats.begin(), beats.end());
  return std::nullopt;
}

}  // namespace rsfc
