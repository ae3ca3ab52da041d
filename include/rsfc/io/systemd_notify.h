// sd_notify(3) without libsystemd: state lines ("READY=1", "WATCHDOG=1", ...) sent as one
// datagram to the unix socket $NOTIFY_SOCKET names ("/path", or "@name" in the abstract
// namespace), and the watchdog interval systemd sets in $WATCHDOG_USEC. With the gate that
// lets the main thread ping the watchdog only while every worker makes progress: a worker
// stuck in a loop or a lock then gets rsfcd restarted (WatchdogSec=) instead of failing
// open silently.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "rsfc/core/expected.h"

namespace rsfc {

class SystemdNotifier {
 public:
  // From $NOTIFY_SOCKET; disabled when it is unset or not an absolute or abstract name.
  static SystemdNotifier from_environment();
  // `socket_path`: "/path" or "@abstract"; anything else gives a disabled notifier.
  explicit SystemdNotifier(std::string_view socket_path = {});

  bool enabled() const { return addr_len_ != 0; }
  // Sends `state` in one datagram; a no-op (success) when disabled.
  Expected<void> notify(std::string_view state) const;

 private:
  sockaddr_un addr_{};
  socklen_t addr_len_ = 0;
};

// The interval within which systemd expects WATCHDOG=1 ($WATCHDOG_USEC), if the watchdog is
// meant for this process ($WATCHDOG_PID unset or equal to getpid()); 0 = no watchdog.
std::chrono::microseconds watchdog_interval_from_environment();

// A worker's sign of life: its thread beats once per loop pass (a batch, a tick).
class Heartbeat {
 public:
  void beat() { n_.store(n_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  uint64_t count() const { return n_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> n_{0};
};

// Decides at each check (every quarter of the watchdog interval) whether the watchdog may
// be pinged: only if every worker's heartbeat moved since the last ping.
class WatchdogGate {
 public:
  // `beats`: each worker's count now, in a fixed order. nullopt: ping (all moved; the first
  // check always pings); else the index of a worker that did not move since the last ping.
  std::optional<size_t> check(std::span<const uint64_t> beats);

 private:
  std::vector<uint64_t> at_last_ping_;
};

}  // namespace rsfc
