#include "rsfc/io/privileges.h"

#include <dirent.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>

namespace rsfc {

namespace {

struct CapSets {
  uint64_t effective = 0, permitted = 0, inheritable = 0;
};

Expected<CapSets> capget_self() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return Error::from_errno(errno, "capget");
  auto join = [](uint32_t lo, uint32_t hi) { return uint64_t{hi} << 32 | lo; };
  return CapSets{join(data[0].effective, data[1].effective),
                 join(data[0].permitted, data[1].permitted),
                 join(data[0].inheritable, data[1].inheritable)};
}

Expected<void> capset_self(const CapSets& s) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  for (int i = 0; i < 2; ++i) {
    const int shift = 32 * i;
    data[i].effective = static_cast<uint32_t>(s.effective >> shift);
    data[i].permitted = static_cast<uint32_t>(s.permitted >> shift);
    data[i].inheritable = static_cast<uint32_t>(s.inheritable >> shift);
  }
  if (syscall(SYS_capset, &hdr, data) != 0) return Error::from_errno(errno, "capset");
  return {};
}

// The bounding set: one PR_CAPBSET_READ per capability the kernel knows (EINVAL past the
// last one).
uint64_t bounding_set() {
  uint64_t mask = 0;
  for (int cap = 0; cap < 64; ++cap) {
    const int r = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (r < 0) break;
    if (r == 1) mask |= uint64_t{1} << cap;
  }
  return mask;
}

int thread_count() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return 0;
  int n = 0;
  while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

constexpr uint64_t bit(int cap) {
  return uint64_t{1} << cap;
}

}  // namespace

Expected<PrivilegeState> read_privileges() {
  auto c = capget_self();
  if (!c) return c.error();
  PrivilegeState s;
  s.effective = c->effective;
  s.permitted = c->permitted;
  s.inheritable = c->inheritable;
  s.bounding = bounding_set();
  s.no_new_privs = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
  s.threads = thread_count();
  return s;
}

Expected<PrivilegeState> drop_privileges(const PrivilegeOptions& opts) {
  if (const int n = thread_count(); n > 1) {
    return Error{EBUSY, "privileges: " + std::to_string(n - 1) +
                            " other threads already run and would keep their capabilities"};
  }
  auto now = capget_self();
  if (!now) return Error{now.error().code, "privileges: " + now.error().message};
  uint64_t keep = bit(CAP_NET_ADMIN) | (opts.keep_bind_service ? bit(CAP_NET_BIND_SERVICE) : 0);
  keep &= now->permitted;  // nothing can be added
  // The bounding set first: dropping from it needs CAP_SETPCAP, which the capset below
  // removes. Without CAP_SETPCAP (systemd's unit) the bounding set is the unit's already.
  if ((now->effective & bit(CAP_SETPCAP)) != 0) {
    const uint64_t bounding = bounding_set();
    for (int cap = 0; cap < 64; ++cap) {
      if ((bounding & bit(cap)) != 0 && (keep & bit(cap)) == 0 &&
          prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
        return Error::from_errno(errno, "privileges: PR_CAPBSET_DROP " + std::to_string(cap));
      }
    }
  }
  // Ambient capabilities would survive an exec: none (EINVAL: a kernel without them).
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return Error::from_errno(errno, "privileges: PR_CAP_AMBIENT_CLEAR_ALL");
  }
  if (auto r = capset_self({keep, keep, 0}); !r) {
    return Error{r.error().code, "privileges: " + r.error().message};
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Error::from_errno(errno, "privileges: PR_SET_NO_NEW_PRIVS");
  }
  return read_privileges();
}

std::string capability_names(uint64_t mask) {
  static constexpr struct {
    int cap;
    const char* name;
  } kNames[] = {{CAP_NET_ADMIN, "cap_net_admin"}, {CAP_NET_BIND_SERVICE, "cap_net_bind_service"}};
  std::string out;
  for (const auto& n : kNames) {
    if ((mask & bit(n.cap)) == 0) continue;
    if (!out.empty()) out += ',';
    out += n.name;
    mask &= ~bit(n.cap);
  }
  if (mask != 0) {
    char hex[17];
    const auto r = std::to_chars(hex, hex + sizeof(hex), mask, 16);
    out += (out.empty() ? "others(0x" : ",others(0x") + std::string(hex, r.ptr) + ")";
  }
  return out.empty() ? "none" : out;
}

}  // namespace rsfc
