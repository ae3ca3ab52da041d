// drop_privileges() as root, each case in a forked child (capabilities are per process:
// the test runner keeps its own). The child reports through its exit code; the kernel's
// view is read from /proc/self/status.
#include "rsfc/io/privileges.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

namespace rsfc {
namespace {

// Fields of /proc/self/status: CapEff, CapPrm, CapInh, CapBnd, CapAmb (hex) and NoNewPrivs.
std::map<std::string, uint64_t> proc_status() {
  std::map<std::string, uint64_t> out;
  std::ifstream in("/proc/self/status");
  std::string key, value;
  while (in >> key >> value) {
    if (key.starts_with("Cap")) out[key] = std::stoull(value, nullptr, 16);
    if (key == "NoNewPrivs:") out[key] = std::stoull(value);
    in.ignore(1 << 20, '\n');
  }
  return out;
}

// Runs `body` in a child process; its return value is the child's exit code.
int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

constexpr uint64_t kNetAdmin = uint64_t{1} << CAP_NET_ADMIN;
constexpr uint64_t kBind = uint64_t{1} << CAP_NET_BIND_SERVICE;

// 0 when /proc/self/status shows exactly `keep` everywhere it may, else which check failed.
int check_status(uint64_t keep) {
  auto s = proc_status();
  if (s["CapEff:"] != keep) return 10;
  if (s["CapPrm:"] != keep) return 11;
  if (s["CapInh:"] != 0) return 12;
  if (s["CapBnd:"] != keep) return 13;
  if (s["CapAmb:"] != 0) return 14;
  if (s["NoNewPrivs:"] != 1) return 15;
  return 0;
}

TEST(Privileges, RootKeepsOnlyNetAdmin) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  EXPECT_EQ(in_child([] {
              auto r = drop_privileges({});
              if (!r) return 2;
              if (r->effective != kNetAdmin || r->bounding != kNetAdmin || !r->no_new_privs) {
                return 3;
              }
              return check_status(kNetAdmin);
            }),
            0);
}

TEST(Privileges, LowMetricsPortKeepsBindServiceToo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  EXPECT_EQ(in_child([] {
              if (!drop_privileges({.keep_bind_service = true})) return 2;
              return check_status(kNetAdmin | kBind);
            }),
            0);
}

TEST(Privileges, DroppingTwiceChangesNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  EXPECT_EQ(in_child([] {
              if (!drop_privileges({})) return 2;
              // As under systemd's unit: no CAP_SETPCAP any more, the bounding set stays.
              if (!drop_privileges({.keep_bind_service = true})) return 3;
              return check_status(kNetAdmin);
            }),
            0);
}

TEST(Privileges, RefusedOnceOtherThreadsRun) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  EXPECT_EQ(in_child([] {
              std::thread t([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
              auto r = drop_privileges({});
              t.join();
              if (r || r.error().code != EBUSY) return 2;
              return proc_status()["CapEff:"] == kNetAdmin ? 3 : 0;  // nothing was dropped
            }),
            0);
}

TEST(Privileges, NamesCapabilities) {
  EXPECT_EQ(capability_names(0), "none");
  EXPECT_EQ(capability_names(kNetAdmin), "cap_net_admin");
  EXPECT_EQ(capability_names(kNetAdmin | kBind), "cap_net_admin,cap_net_bind_service");
  EXPECT_EQ(capability_names(kNetAdmin | 1), "cap_net_admin,others(0x1)");
}

}  // namespace
}  // namespace rsfc
