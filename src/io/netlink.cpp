#include "rsfc/io/netlink.h"

#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <utility>

namespace rsfc {

Expected<MnlSocket> MnlSocket::open(int bus) {
  mnl_socket* nl = mnl_socket_open2(bus, SOCK_CLOEXEC);
  if (nl == nullptr) return Error::from_errno(errno, "netlink socket");
  MnlSocket s(nl);
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
    return Error::from_errno(errno, "netlink bind");
  }
  return s;
}

MnlSocket::MnlSocket(MnlSocket&& o) noexcept : nl_(std::exchange(o.nl_, nullptr)) {}

MnlSocket& MnlSocket::operator=(MnlSocket&& o) noexcept {
  if (this != &o) {
    close();
    nl_ = std::exchange(o.nl_, nullptr);
  }
  return *this;
}

MnlSocket::~MnlSocket() {
  close();
}

void MnlSocket::close() {
  if (nl_ != nullptr) {
    mnl_socket_close(nl_);
    nl_ = nullptr;
  }
}

int MnlSocket::fd() const {
  return nl_ != nullptr ? mnl_socket_get_fd(nl_) : -1;
}

uint32_t MnlSocket::portid() const {
  return nl_ != nullptr ? mnl_socket_get_portid(nl_) : 0;
}

Expected<void> MnlSocket::set_netlink_option(int option, int value, const char* what) {
  if (mnl_socket_setsockopt(nl_, option, &value, sizeof(value)) < 0) {
    return Error::from_errno(errno, what);
  }
  return {};
}

namespace {
Expected<int> set_buf(int fd, int force_opt, int opt, int bytes, const char* what) {
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) < 0 &&
      setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)) < 0) {
    return Error::from_errno(errno, what);
  }
  int granted = 0;
  socklen_t len = sizeof(granted);
  if (getsockopt(fd, SOL_SOCKET, opt, &granted, &len) < 0) return Error::from_errno(errno, what);
  return granted;
}
}  // namespace

Expected<int> MnlSocket::set_rcvbuf(int bytes) {
  return set_buf(fd(), SO_RCVBUFFORCE, SO_RCVBUF, bytes, "SO_RCVBUF");
}

Expected<int> MnlSocket::set_sndbuf(int bytes) {
  return set_buf(fd(), SO_SNDBUFFORCE, SO_SNDBUF, bytes, "SO_SNDBUF");
}

Expected<void> MnlSocket::send(std::span<const uint8_t> buf) {
  for (;;) {
    if (mnl_socket_sendto(nl_, buf.data(), buf.size()) >= 0) return {};
    if (errno != EINTR) return Error::from_errno(errno, "netlink send");
  }
}

namespace {
int ext_ack_attr_cb(const nlattr* attr, void* data) {
  if (mnl_attr_get_type(attr) == NLMSGERR_ATTR_MSG &&
      mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) >= 0) {
    *static_cast<std::string*>(data) = mnl_attr_get_str(attr);
  }
  return MNL_CB_OK;
}
}  // namespace

int nlmsg_error_code(const nlmsghdr* nlh, std::string* ext_ack_msg) {
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(nlmsgerr))) return -EBADMSG;
  const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
  if (ext_ack_msg != nullptr && (nlh->nlmsg_flags & NLM_F_ACK_TLVS) != 0) {
    // TLVs follow the echoed request: only its header when NLM_F_CAPPED, else all of it.
    size_t offset = (nlh->nlmsg_flags & NLM_F_CAPPED) != 0
                        ? sizeof(nlmsgerr)
                        : sizeof(int) + static_cast<size_t>(err->msg.nlmsg_len);
    if (mnl_nlmsg_size(offset) <= nlh->nlmsg_len) {
      mnl_attr_parse(nlh, static_cast<unsigned>(offset), ext_ack_attr_cb, ext_ack_msg);
    }
  }
  return err->error;
}

}  // namespace rsfc
