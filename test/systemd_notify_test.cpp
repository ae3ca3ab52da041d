// sd_notify without libsystemd: a unix datagram socket bound by the test stands in for
// systemd's notification socket. And the watchdog gate: pings only while every worker's
// heartbeat moves.
#include "rsfc/io/systemd_notify.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace rsfc {
namespace {

// A bound unix datagram socket, as systemd's NOTIFY_SOCKET is.
class FakeSystemd {
 public:
  // `name`: "/path" or "@abstract".
  explicit FakeSystemd(std::string name) : name_(std::move(name)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, name_.data(), name_.size());
    if (name_[0] == '@') {
      sa.sun_path[0] = '\0';
    } else {
      unlink(name_.c_str());
    }
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), len), 0) << std::strerror(errno);
  }
  ~FakeSystemd() {
    close(fd_);
    if (name_[0] == '/') unlink(name_.c_str());
  }
  // The datagrams received so far.
  std::vector<std::string> messages() const {
    std::vector<std::string> out;
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0) break;
      out.emplace_back(buf, static_cast<size_t>(n));
    }
    return out;
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int fd_ = -1;
};

TEST(SystemdNotify, SendsStateToAPathSocket) {
  FakeSystemd sd("/tmp/rsfc-notify-test-" + std::to_string(getpid()));
  const SystemdNotifier n(sd.name());
  ASSERT_TRUE(n.enabled());
  ASSERT_TRUE(n.notify("READY=1").has_value());
  ASSERT_TRUE(n.notify("WATCHDOG=1").has_value());
  ASSERT_TRUE(n.notify("STATUS=two lines\nRELOADING=1").has_value());
  EXPECT_EQ(sd.messages(),
            (std::vector<std::string>{"READY=1", "WATCHDOG=1", "STATUS=two lines\nRELOADING=1"}));
}

TEST(SystemdNotify, SendsStateToAnAbstractSocket) {
  FakeSystemd sd("@rsfc-notify-test-" + std::to_string(getpid()));
  ASSERT_TRUE(SystemdNotifier(sd.name()).notify("READY=1").has_value());
  EXPECT_EQ(sd.messages(), (std::vector<std::string>{"READY=1"}));
}

TEST(SystemdNotify, ReadsTheEnvironment) {
  FakeSystemd sd("@rsfc-notify-env-" + std::to_string(getpid()));
  setenv("NOTIFY_SOCKET", sd.name().c_str(), 1);
  EXPECT_TRUE(SystemdNotifier::from_environment().notify("READY=1").has_value());
  EXPECT_EQ(sd.messages(), (std::vector<std::string>{"READY=1"}));
  // Not under systemd (unset), or a name systemd never gives: notifications are no-ops.
  for (const char* bad : {"", "relative/path", "x"}) {
    setenv("NOTIFY_SOCKET", bad, 1);
    EXPECT_FALSE(SystemdNotifier::from_environment().enabled()) << bad;
  }
  unsetenv("NOTIFY_SOCKET");
  const SystemdNotifier off = SystemdNotifier::from_environment();
  EXPECT_FALSE(off.enabled());
  EXPECT_TRUE(off.notify("READY=1").has_value());
}

TEST(SystemdNotify, WatchdogIntervalIsForThisProcessOnly) {
  unsetenv("WATCHDOG_PID");
  unsetenv("WATCHDOG_USEC");
  EXPECT_EQ(watchdog_interval_from_environment().count(), 0);
  setenv("WATCHDOG_USEC", "3000000", 1);
  EXPECT_EQ(watchdog_interval_from_environment().count(), 3'000'000);
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_EQ(watchdog_interval_from_environment().count(), 3'000'000);
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  EXPECT_EQ(watchdog_interval_from_environment().count(), 0) << "another process's";
  unsetenv("WATCHDOG_PID");
  for (const char* bad : {"", "0", "12x", "-5"}) {
    setenv("WATCHDOG_USEC", bad, 1);
    EXPECT_EQ(watchdog_interval_from_environment().count(), 0) << bad;
  }
  unsetenv("WATCHDOG_USEC");
}

TEST(WatchdogGate, PingsOnlyWhileEveryWorkerMoves) {
  WatchdogGate gate;
  Heartbeat a, b;
  auto beats = [&] { return std::vector<uint64_t>{a.count(), b.count()}; };
  EXPECT_EQ(gate.check(beats()), std::nullopt) << "the first check pings";
  a.beat();
  b.beat();
  EXPECT_EQ(gate.check(beats()), std::nullopt) << "both moved";
  a.beat();  // worker b is stuck
  EXPECT_EQ(gate.check(beats()), 1u);
  a.beat();
  EXPECT_EQ(gate.check(beats()), 1u) << "still no ping: b has not moved since the last one";
  b.beat();
  EXPECT_EQ(gate.check(beats()), std::nullopt) << "b moved once since the last ping: enough";
  EXPECT_EQ(gate.check(beats()), 0u) << "nothing moved since that ping";
}

}  // namespace
}  // namespace rsfc
