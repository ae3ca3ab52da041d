// Privileges after start-up. Started as root outside systemd, rsfcd would otherwise keep
// every capability for its whole life; once its queues and its metrics socket are bound it
// needs only CAP_NET_ADMIN (verdicts, the queue length at shutdown) - and
// CAP_NET_BIND_SERVICE if the metrics port is below 1024. drop_privileges() keeps those,
// removes every other capability from the effective, permitted, inheritable and ambient
// sets and (when allowed to, i.e. with CAP_SETPCAP) from the bounding set, and sets
// no_new_privs. The uid stays what it was (root keeps owning its files and logs; without
// CAP_DAC_OVERRIDE etc. it can no longer use other users' files). Under the systemd unit
// (a dynamic user with CAP_NET_ADMIN only) it changes nothing but the no_new_privs bit.
//
// Capabilities are per thread: call it before starting any thread (new threads inherit
// the reduced sets). Raw capget/capset/prctl, no libcap.
#pragma once

#include <cstdint>
#include <string>

#include "rsfc/core/expected.h"

namespace rsfc {

struct PrivilegeOptions {
  bool keep_bind_service = false;  // CAP_NET_BIND_SERVICE too (metrics port < 1024)
};

struct PrivilegeState {
  uint64_t effective = 0;  // capability bit masks (bit n = capability n)
  uint64_t permitted = 0;
  uint64_t inheritable = 0;
  uint64_t bounding = 0;
  bool no_new_privs = false;
  int threads = 0;  // threads in the process when it was read
};

// The calling thread's capabilities and no_new_privs.
Expected<PrivilegeState> read_privileges();

// Drops to what rsfcd needs (see above) and returns the state after. An Error if a step
// failed, or if the process already has other threads (they would keep their sets).
Expected<PrivilegeState> drop_privileges(const PrivilegeOptions& opts);

// "cap_net_admin,cap_net_bind_service" (or "none"), for the log.
std::string capability_names(uint64_t mask);

}  // namespace rsfc
