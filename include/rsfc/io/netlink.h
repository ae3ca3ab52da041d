// Move-only RAII owner of a libmnl netlink socket, and small helpers around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "rsfc/core/expected.h"

struct mnl_socket;
struct nlmsghdr;

namespace rsfc {

class MnlSocket {
 public:
  // Opens a netlink socket of `bus` (e.g. NETLINK_NETFILTER), close-on-exec, bound to an
  // automatically chosen port id.
  static Expected<MnlSocket> open(int bus);

  MnlSocket() = default;
  MnlSocket(MnlSocket&& o) noexcept;
  MnlSocket& operator=(MnlSocket&& o) noexcept;
  MnlSocket(const MnlSocket&) = delete;
  MnlSocket& operator=(const MnlSocket&) = delete;
  ~MnlSocket();

  int fd() const;
  uint32_t portid() const;
  bool is_open() const { return nl_ != nullptr; }
  void close();

  // SOL_NETLINK option (int value). Returns an Error naming `what` on failure.
  Expected<void> set_netlink_option(int option, int value, const char* what);
  // SO_RCVBUFFORCE (needs CAP_NET_ADMIN), falling back to SO_RCVBUF (capped by
  // net.core.rmem_max). Returns the size the kernel granted (it doubles the request).
  Expected<int> set_rcvbuf(int bytes);
  Expected<int> set_sndbuf(int bytes);

  // One sendto() to the kernel (port id 0). EINTR is retried.
  Expected<void> send(std::span<const uint8_t> buf);

 private:
  explicit MnlSocket(mnl_socket* nl) : nl_(nl) {}
  mnl_socket* nl_ = nullptr;
};

// Error code of an NLMSG_ERROR message (0 = ACK), and its extended-ack text if any
// (NETLINK_EXT_ACK), or "" when none.
int nlmsg_error_code(const nlmsghdr* nlh, std::string* ext_ack_msg = nullptr);

}  // namespace rsfc
