// NFQUEUE over libmnl + libnetfilter_queue's nlmsg helpers.
//
// Kernel behaviour this file relies on (net/netfilter/nfnetlink_queue.c):
// - One NFQNL_MSG_CONFIG message may carry the bind command, the copy params, the queue
//   maxlen and the flags; they are applied in that order. Sending them together avoids
//   the window in which a freshly bound queue is in copy-none mode and drops packets.
// - We do NOT set NFQA_CFG_F_GSO. Without it the kernel segments GSO/GRO super-packets
//   (skb_gso_segment) before queueing and completes CHECKSUM_PARTIAL checksums
//   (skb_checksum_help) before copying, so every packet we see is an ordinary,
//   MTU-sized packet with a complete checksum: each data-carrying ACK is its own packet
//   whose window we can clamp, and a verdict payload never has to be re-segmented. The
//   price is the kernel's segmentation work, which only happens for the packets we queue.
// - With NFQA_CFG_F_FAIL_OPEN the kernel accepts a packet itself (a) when the queue holds
//   maxlen packets and (b) when the netlink message to us cannot be delivered (our receive
//   buffer is full). Case (b) consumes a packet id, so gaps in the ids we see count such
//   overruns even though NETLINK_NO_ENOBUFS hides the ENOBUFS error.
// - Setting maxlen to 0 on a fail-open queue makes the kernel accept every new packet
//   instead of queueing it: used to drain the queue on shutdown without losing packets.
// - Multiple verdict messages in one sendmsg are processed one after the other
//   (netlink_rcv_skb); an error in one is reported as an NLMSG_ERROR reply for that one.
#include "rsfc/io/nfqueue.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// clang-format off
#include <libnetfilter_queue/libnetfilter_queue.h>
// clang-format on

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "rsfc/io/netlink.h"

namespace rsfc {

namespace {

constexpr uint32_t kMaxCopyRange = 0xffff;
// Netlink + nfqueue attribute overhead per received message (headers, ifindex, hwaddr,
// timestamp, cap_len, skb_info ...) is a few hundred bytes; keep a wide margin so that a
// message never arrives truncated (an error reply may echo a whole verdict).
constexpr size_t kRxOverhead = 8192;
// A verdict message: nlmsghdr + nfgenmsg + verdict header attribute.
constexpr size_t kVerdictBase = MNL_ALIGN(sizeof(nlmsghdr)) + MNL_ALIGN(sizeof(nfgenmsg)) +
                                MNL_ATTR_HDRLEN + MNL_ALIGN(sizeof(nfqnl_msg_verdict_hdr));
// Largest payload one netlink attribute can carry (16-bit nla_len).
constexpr size_t kMaxVerdictPayload = 0xffff - MNL_ATTR_HDRLEN;
// Attribute table size for nfq_nlmsg_parse: larger than any NFQA_MAX the library was
// built with (it skips types above its own NFQA_MAX).
constexpr size_t kAttrTable = 64;
static_assert(NFQA_MAX < kAttrTable);

// The id of the packet a packet message names, read from the first `avail` bytes of it
// (a datagram cut by MSG_TRUNC, or a message whose attributes do not parse). The kernel
// writes NFQA_PACKET_HDR first (nfqnl_build_packet_message), so a few dozen bytes suffice.
std::optional<uint32_t> packet_id_of(const uint8_t* msg, size_t avail) {
  nlmsghdr h{};
  if (avail < sizeof(h)) return std::nullopt;
  std::memcpy(&h, msg, sizeof(h));
  const size_t end = std::min<size_t>(h.nlmsg_len, avail);
  for (size_t off = MNL_ALIGN(sizeof(nlmsghdr)) + MNL_ALIGN(sizeof(nfgenmsg));
       off + sizeof(nlattr) <= end;) {
    nlattr a{};
    std::memcpy(&a, msg + off, sizeof(a));
    if (a.nla_len < sizeof(nlattr) || off + a.nla_len > end) break;
    if ((a.nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR &&
        a.nla_len >= MNL_ATTR_HDRLEN + sizeof(uint32_t)) {
      uint32_t id_be = 0;
      std::memcpy(&id_be, msg + off + MNL_ATTR_HDRLEN, sizeof(id_be));
      return ntohl(id_be);
    }
    off += MNL_ALIGN(a.nla_len);
  }
  return std::nullopt;
}

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

char* as_chars(uint8_t* p) {
  return reinterpret_cast<char*>(p);
}

std::string queue_name(uint16_t q) {
  return "nfqueue " + std::to_string(q);
}

std::string bind_hint(int err) {
  switch (err) {
    case EPERM:
      return " (queue already bound by another process, or CAP_NET_ADMIN missing)";
    case EBUSY:
      return " (queue already bound)";
    case EOPNOTSUPP:
      return " (a queue flag is not supported by this kernel)";
    case EINVAL:
    case ENOENT:
      return " (is nfnetlink_queue available in this kernel?)";
    default:
      return "";
  }
}

}  // namespace

struct NfQueue::Impl {
  MnlSocket sock;    // the kernel's queue (open())
  int stub_fd = -1;  // or a stand-in for the kernel (attach()); owned
  Options opts;
  QueueCounters own_counters;
  QueueCounters* counters = nullptr;
  VerdictFaultCounters own_faults;
  VerdictFaultCounters* faults = nullptr;
  bool bound = false;

  // Receive slots for recvmmsg: one datagram (= one packet message) per slot.
  size_t slot_size = 0;
  std::unique_ptr<uint8_t[]> rx;
  std::vector<iovec> iovs;
  std::vector<mmsghdr> msgs;

  // Pending verdicts: consecutive netlink messages, sent with one sendmsg.
  std::unique_ptr<uint8_t[]> tx;
  size_t tx_cap = 0;
  size_t tx_len = 0;
  size_t tx_count = 0;
  size_t tx_with_payload = 0;
  uint32_t failed_flushes = 0;  // flushes the pending batch has failed so far

  uint32_t last_id = 0;
  int last_kernel_error = 0;
  int rcvbuf_granted = 0;

  ~Impl() {
    if (stub_fd >= 0) ::close(stub_fd);
  }
  int fd() const { return sock.is_open() ? sock.fd() : stub_fd; }
  bool is_open() const { return sock.is_open() || stub_fd >= 0; }
  // One message (or batch of messages) to the kernel: 0 or an errno.
  int send_raw(std::span<const uint8_t> buf);
  size_t tx_cap_wanted() const;
  Expected<void> alloc_buffers(size_t sndbuf_granted);

  // Called with every packet message; `fn` null means "accept it now" (open/close paths).
  void handle_datagram(uint8_t* buf, size_t len, PacketFn fn, void* ctx, size_t& packets,
                       uint32_t ack_seq, int* ack_code, std::string* ack_msg);
  void handle_packet(const nlmsghdr* nlh, PacketFn fn, void* ctx, size_t& packets);
  void accept_cut_datagram(const uint8_t* buf, size_t len);
  Expected<void> add_verdict(uint32_t id, uint32_t verdict, std::span<const uint8_t> payload);
  Expected<void> flush();
  int send_pending();
  void strip_payloads();
  void clear_pending();
  Expected<void> send_config(bool bind, uint32_t seq);
  void note_id(uint32_t id);
};

void NfQueue::Impl::note_id(uint32_t id) {
  if (last_id != 0) {
    const uint32_t gap = id - last_id - 1;
    // Ids grow by one per queued packet; a forward gap is packets the kernel could not
    // deliver to us (fail-open accepted them). Ignore backwards jumps (wrap, rebind).
    if (gap != 0 && gap < 0x80000000u) counters->overruns.add(gap);
  }
  last_id = id;
}

void NfQueue::Impl::handle_packet(const nlmsghdr* nlh, PacketFn fn, void* ctx, size_t& packets) {
  nlattr* attr[kAttrTable] = {};
  if (nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == nullptr ||
      mnl_attr_get_payload_len(attr[NFQA_PACKET_HDR]) < sizeof(uint32_t)) {
    // Malformed: still find the id (the kernel puts the packet header first) so that the
    // packet gets its verdict instead of waiting in the kernel queue forever.
    counters->recv_errors.add();
    if (auto id = packet_id_of(reinterpret_cast<const uint8_t*>(nlh), nlh->nlmsg_len)) {
      counters->packets_received.add();
      (void)add_verdict(*id, NF_ACCEPT, {});
    }
    return;
  }
  nfqnl_msg_packet_hdr hdr{};
  std::memcpy(&hdr, mnl_attr_get_payload(attr[NFQA_PACKET_HDR]),
              std::min<size_t>(sizeof(hdr), mnl_attr_get_payload_len(attr[NFQA_PACKET_HDR])));

  NfqPacket p;
  p.id = ntohl(hdr.packet_id);
  p.hw_protocol = ntohs(hdr.hw_protocol);
  if (attr[NFQA_PAYLOAD] != nullptr) {
    p.data = {static_cast<uint8_t*>(mnl_attr_get_payload(attr[NFQA_PAYLOAD])),
              mnl_attr_get_payload_len(attr[NFQA_PAYLOAD])};
  }
  p.orig_len = static_cast<uint32_t>(p.data.size());
  if (attr[NFQA_CAP_LEN] != nullptr) p.orig_len = ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN]));
  if (attr[NFQA_SKB_INFO] != nullptr) {
    const uint32_t info = ntohl(mnl_attr_get_u32(attr[NFQA_SKB_INFO]));
    p.checksum_not_ready = (info & NFQA_SKB_CSUMNOTREADY) != 0;
    p.gso = (info & NFQA_SKB_GSO) != 0;
  }
  counters->packets_received.add();
  if (p.gso) counters->gso_packets.add();
  note_id(p.id);
  ++packets;
  if (fn != nullptr) {
    fn(ctx, p);
  } else {
    (void)add_verdict(p.id, NF_ACCEPT, {});
  }
}

void NfQueue::Impl::accept_cut_datagram(const uint8_t* buf, size_t len) {
  counters->recv_errors.add();
  faults->truncated_datagrams.add();
  constexpr uint16_t kPacketType = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
  for (size_t off = 0; off + sizeof(nlmsghdr) <= len;) {
    nlmsghdr h{};
    std::memcpy(&h, buf + off, sizeof(h));
    if (h.nlmsg_len < sizeof(nlmsghdr)) break;
    if (h.nlmsg_type == kPacketType) {
      if (auto id = packet_id_of(buf + off, len - off)) {
        counters->packets_received.add();
        faults->truncated_accepted.add();
        note_id(*id);
        (void)add_verdict(*id, NF_ACCEPT, {});
      }
    }
    off += MNL_ALIGN(h.nlmsg_len);
  }
}

void NfQueue::Impl::handle_datagram(uint8_t* buf, size_t len, PacketFn fn, void* ctx,
                                    size_t& packets, uint32_t ack_seq, int* ack_code,
                                    std::string* ack_msg) {
  int remaining = static_cast<int>(len);
  const auto* nlh = reinterpret_cast<const nlmsghdr*>(buf);
  constexpr uint16_t kPacketType = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
  while (mnl_nlmsg_ok(nlh, remaining)) {
    if (nlh->nlmsg_type == kPacketType) {
      handle_packet(nlh, fn, ctx, packets);
    } else if (nlh->nlmsg_type == NLMSG_ERROR) {
      std::string msg;
      const int code = nlmsg_error_code(nlh, ack_msg != nullptr ? &msg : nullptr);
      if (ack_code != nullptr && nlh->nlmsg_seq == ack_seq && ack_seq != 0) {
        *ack_code = code;
        if (ack_msg != nullptr) *ack_msg = msg;
      } else if (code != 0) {
        // An error reply to a verdict or config message we sent without asking for an ACK.
        counters->send_errors.add();
        last_kernel_error = -code;
      }
    }
    nlh = mnl_nlmsg_next(nlh, &remaining);
  }
}

int NfQueue::Impl::send_raw(std::span<const uint8_t> buf) {
  if (opts.send_fault) {
    if (const int err = opts.send_fault(); err != 0) return err;
  }
  if (sock.is_open()) {
    auto r = sock.send(buf);
    return r ? 0 : (r.error().code != 0 ? r.error().code : EIO);
  }
  for (;;) {
    if (::send(stub_fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

Expected<void> NfQueue::Impl::add_verdict(uint32_t id, uint32_t verdict,
                                          std::span<const uint8_t> payload) {
  if (payload.size() > kMaxVerdictPayload) {  // cannot go back in one attribute: unchanged
    faults->payload_fallbacks.add();
    payload = {};
  }
  const size_t need =
      kVerdictBase + (payload.empty() ? 0 : MNL_ATTR_HDRLEN + MNL_ALIGN(payload.size()));
  Expected<void> result;
  if (tx_len + need > tx_cap) {
    result = flush();
    if (tx_len + need > tx_cap) {  // the failed batch kept its room: give it up for this one
      faults->verdicts_lost.add(tx_count);
      clear_pending();
    }
  }
  nlmsghdr* nlh = nfq_nlmsg_put(as_chars(tx.get() + tx_len), NFQNL_MSG_VERDICT, opts.queue_num);
  nfq_nlmsg_verdict_put(nlh, static_cast<int>(id), static_cast<int>(verdict));
  if (!payload.empty()) {
    nfq_nlmsg_verdict_put_pkt(nlh, payload.data(), static_cast<uint32_t>(payload.size()));
    ++tx_with_payload;
  }
  tx_len += nlh->nlmsg_len;
  ++tx_count;
  return result;
}

// Sends the pending batch, trying up to send_attempts times: 0 or the last errno.
int NfQueue::Impl::send_pending() {
  int err = 0;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, opts.send_attempts); ++i) {
    err = send_raw({tx.get(), tx_len});
    if (err == 0) return 0;
    counters->send_errors.add();
    faults->send_failures.add();
  }
  return err;
}

// Rewrites the pending batch in place as the same verdicts without payloads: every message
// is nlmsghdr + nfgenmsg + NFQA_VERDICT_HDR first (nfq_nlmsg_verdict_put), then the payload
// attribute, so cutting each message after kVerdictBase bytes leaves a plain verdict.
void NfQueue::Impl::strip_payloads() {
  size_t out = 0;
  for (size_t in = 0; in < tx_len;) {
    nlmsghdr h{};
    std::memcpy(&h, tx.get() + in, sizeof(h));
    const size_t len = MNL_ALIGN(std::max<size_t>(h.nlmsg_len, kVerdictBase));
    if (out != in) std::memmove(tx.get() + out, tx.get() + in, kVerdictBase);
    h.nlmsg_len = static_cast<uint32_t>(kVerdictBase);
    std::memcpy(tx.get() + out, &h, sizeof(h));
    in += len;
    out += kVerdictBase;
  }
  faults->payload_fallbacks.add(tx_with_payload);
  tx_len = out;
  tx_with_payload = 0;
}

void NfQueue::Impl::clear_pending() {
  tx_len = tx_count = tx_with_payload = 0;
  failed_flushes = 0;
}

Expected<void> NfQueue::Impl::flush() {
  if (tx_len == 0) return {};
  int err = send_pending();
  if (err != 0 && tx_with_payload > 0) {
    // The batch as built cannot be sent: the rewritten packets go on unchanged rather than
    // wait in the kernel for a verdict (a smaller message, valid whatever the payloads).
    strip_payloads();
    err = send_pending();
  }
  if (err == 0) {
    counters->verdicts_sent.add(tx_count);
    counters->verdicts_with_payload.add(tx_with_payload);
    clear_pending();
    return {};
  }
  std::string m = queue_name(opts.queue_num) + ": verdict send failed: " + std::strerror(err);
  if (++failed_flushes < std::max<uint32_t>(1, opts.flush_rounds)) {
    return Error{err, m + " (" + std::to_string(tx_count) + " verdicts kept for the next flush)"};
  }
  faults->verdicts_lost.add(tx_count);
  m += " (" + std::to_string(tx_count) + " verdicts given up after " +
       std::to_string(failed_flushes) + " flushes)";
  clear_pending();
  return Error{err, m};
}

Expected<void> NfQueue::Impl::send_config(bool bind, uint32_t seq) {
  alignas(nlmsghdr) uint8_t buf[512] = {};
  nlmsghdr* nlh = nfq_nlmsg_put(as_chars(buf), NFQNL_MSG_CONFIG, opts.queue_num);
  nlh->nlmsg_flags |= NLM_F_ACK;
  nlh->nlmsg_seq = seq;
  if (bind) nfq_nlmsg_cfg_put_cmd(nlh, AF_UNSPEC, NFQNL_CFG_CMD_BIND);
  if (opts.copy_range == 0) {
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_META, 0);
  } else {
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET,
                             static_cast<int>(std::min(opts.copy_range, kMaxCopyRange)));
  }
  nfq_nlmsg_cfg_put_qmaxlen(nlh, opts.maxlen);
  uint32_t flags = 0;
  if (opts.fail_open) flags |= NFQA_CFG_F_FAIL_OPEN;
  if (opts.gso) flags |= NFQA_CFG_F_GSO;
  // The mask names the flags this message sets or clears: both are set explicitly.
  mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(flags));
  mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO));
  if (const int err = send_raw({buf, nlh->nlmsg_len}); err != 0) {
    return Error{err, std::string("netlink send: ") + std::strerror(err)};
  }
  return {};
}

size_t NfQueue::Impl::tx_cap_wanted() const {
  // Room for a batch of MTU-sized modified packets, and always for one maximal verdict.
  return std::min<size_t>(size_t{opts.batch_size} * 1664, 4u << 20) + kVerdictBase +
         MNL_ATTR_HDRLEN + MNL_ALIGN(kMaxVerdictPayload);
}

Expected<void> NfQueue::Impl::alloc_buffers(size_t sndbuf_granted) {
  // Buffers, allocated once (uninitialised: pages are touched only when used).
  const uint32_t batch = opts.batch_size;
  const size_t range = opts.copy_range == 0 ? 0 : std::min(opts.copy_range, kMaxCopyRange);
  slot_size = MNL_ALIGN(range) + kRxOverhead;
  rx = std::make_unique_for_overwrite<uint8_t[]>(slot_size * batch);
  iovs.resize(batch);
  msgs.resize(batch);
  for (uint32_t i = 0; i < batch; ++i) {
    iovs[i] = {rx.get() + i * slot_size, slot_size};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  // netlink_sendmsg refuses messages larger than sk_sndbuf - 32.
  const size_t max_send = sndbuf_granted > 64 ? sndbuf_granted - 64 : 0;
  tx_cap = std::min(tx_cap_wanted(), max_send);
  if (tx_cap < kVerdictBase + MNL_ATTR_HDRLEN + MNL_ALIGN(kMaxVerdictPayload)) {
    return Error{ENOBUFS, "socket send buffer too small (" + std::to_string(sndbuf_granted) + ")"};
  }
  tx = std::make_unique_for_overwrite<uint8_t[]>(tx_cap);
  return {};
}

Expected<NfQueue> NfQueue::open(const Options& opts) {
  const std::string name = queue_name(opts.queue_num);
  auto fail = [&](const Error& e) { return Error{e.code, name + ": " + e.message}; };

  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->opts.batch_size = std::max<uint32_t>(1, opts.batch_size);
  impl->counters = opts.counters != nullptr ? opts.counters : &impl->own_counters;
  impl->faults = opts.faults != nullptr ? opts.faults : &impl->own_faults;

  auto sock = MnlSocket::open(NETLINK_NETFILTER);
  if (!sock) return fail(sock.error());
  impl->sock = std::move(sock).value();

  auto rcv =
      impl->sock.set_rcvbuf(static_cast<int>(std::min<uint32_t>(opts.rcvbuf_bytes, 1u << 30)));
  if (!rcv) return fail(rcv.error());
  impl->rcvbuf_granted = *rcv;
  // Overruns are handled by fail-open (the kernel accepts what it cannot deliver); do not
  // let them turn into socket errors. Counted via id gaps instead.
  if (auto r = impl->sock.set_netlink_option(NETLINK_NO_ENOBUFS, 1, "NETLINK_NO_ENOBUFS"); !r) {
    return fail(r.error());
  }
  // Optional: error text in replies; error replies without the echoed request payload.
  (void)impl->sock.set_netlink_option(NETLINK_EXT_ACK, 1, "NETLINK_EXT_ACK");
  (void)impl->sock.set_netlink_option(NETLINK_CAP_ACK, 1, "NETLINK_CAP_ACK");

  auto snd = impl->sock.set_sndbuf(static_cast<int>(impl->tx_cap_wanted() + 65536));
  if (!snd) return fail(snd.error());
  if (auto r = impl->alloc_buffers(static_cast<size_t>(*snd)); !r) return fail(r.error());

  // Bind + params + maxlen + flags in one message, then wait for its ACK.
  const uint32_t seq = static_cast<uint32_t>(monotonic_ms()) | 1u;
  if (auto r = impl->send_config(true, seq); !r) return fail(r.error());
  impl->bound = true;  // tentatively: unbind on the error paths below is harmless

  int ack_code = 1;  // 1 = not seen yet
  std::string ack_msg;
  const int64_t deadline = monotonic_ms() + 2000;
  while (ack_code == 1) {
    const int64_t left = deadline - monotonic_ms();
    if (left <= 0) return Error{ETIMEDOUT, name + ": no reply from the kernel to bind"};
    pollfd pfd{impl->sock.fd(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) {
      return fail(Error::from_errno(errno, "poll"));
    }
    const ssize_t n = recv(impl->sock.fd(), impl->rx.get(), impl->slot_size, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ENOBUFS) continue;
      return fail(Error::from_errno(errno, "recv"));
    }
    // Packets queued before the ACK was read are accepted unchanged (fail open).
    size_t early = 0;
    impl->handle_datagram(impl->rx.get(), static_cast<size_t>(n), nullptr, nullptr, early, seq,
                          &ack_code, &ack_msg);
  }
  if (ack_code != 0) {
    impl->bound = false;  // the bind (or a later part of the message) failed
    std::string m =
        name + ": bind/config failed: " + std::strerror(-ack_code) + bind_hint(-ack_code);
    if (!ack_msg.empty()) m += " [" + ack_msg + "]";
    return Error{-ack_code, m};
  }
  if (auto r = impl->flush(); !r) return r.error();
  return NfQueue(std::move(impl));
}

Expected<NfQueue> NfQueue::attach(const Options& opts, int fd) {
  auto impl = std::make_unique<Impl>();
  impl->stub_fd = fd;  // owned from here on, also on the error paths
  impl->opts = opts;
  impl->opts.batch_size = std::max<uint32_t>(1, opts.batch_size);
  impl->counters = opts.counters != nullptr ? opts.counters : &impl->own_counters;
  impl->faults = opts.faults != nullptr ? opts.faults : &impl->own_faults;
  int snd = static_cast<int>(impl->tx_cap_wanted() + 65536);
  socklen_t len = sizeof(snd);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, len) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &len) < 0) {
    return Error::from_errno(errno, queue_name(opts.queue_num) + ": SO_SNDBUF");
  }
  if (auto r = impl->alloc_buffers(static_cast<size_t>(snd)); !r) return r.error();
  return NfQueue(std::move(impl));
}

NfQueue::NfQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NfQueue::NfQueue() = default;
NfQueue::NfQueue(NfQueue&&) noexcept = default;
NfQueue& NfQueue::operator=(NfQueue&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
NfQueue::~NfQueue() {
  close();
}

int NfQueue::fd() const {
  return impl_ ? impl_->fd() : -1;
}
uint16_t NfQueue::queue_num() const {
  return impl_ ? impl_->opts.queue_num : 0;
}
uint32_t NfQueue::portid() const {
  return impl_ ? impl_->sock.portid() : 0;
}
bool NfQueue::is_open() const {
  return impl_ && impl_->is_open();
}
const QueueCounters& NfQueue::counters() const {
  return *impl_->counters;
}
const VerdictFaultCounters& NfQueue::faults() const {
  return *impl_->faults;
}
size_t NfQueue::pending_verdicts() const {
  return impl_ ? impl_->tx_count : 0;
}
int NfQueue::last_kernel_error() const {
  return impl_ ? impl_->last_kernel_error : 0;
}
int NfQueue::rcvbuf_bytes() const {
  return impl_ ? impl_->rcvbuf_granted : 0;
}

Expected<NfQueue::RecvResult> NfQueue::receive_impl(size_t max_packets, PacketFn fn, void* ctx) {
  if (!is_open()) return Error{EBADF, "nfqueue: receive on a closed queue"};
  Impl& q = *impl_;
  RecvResult res;
  const unsigned vlen =
      static_cast<unsigned>(std::clamp<size_t>(max_packets, 1, q.opts.batch_size));
  int n = -1;
  for (int attempt = 0; attempt < 4; ++attempt) {
    n = recvmmsg(q.fd(), q.msgs.data(), vlen, MSG_DONTWAIT, nullptr);
    if (n >= 0) break;
    if (errno == EAGAIN) {
      res.would_block = true;
      return res;
    }
    if (errno == EINTR) continue;
    q.counters->recv_errors.add();
    if (errno == ENOBUFS) {  // the kernel dropped messages to us (reported once): go on
      q.counters->overruns.add();
      continue;
    }
    return Error::from_errno(errno, queue_name(q.opts.queue_num) + ": recvmmsg");
  }
  if (n < 0) return res;
  for (int i = 0; i < n; ++i) {
    const mmsghdr& m = q.msgs[static_cast<size_t>(i)];
    if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0) {
      // Larger than a slot (should not happen with ours): its packets cannot be processed,
      // but each one it names gets ACCEPT instead of waiting in the kernel forever.
      q.accept_cut_datagram(q.rx.get() + static_cast<size_t>(i) * q.slot_size,
                            std::min<size_t>(m.msg_len, q.slot_size));
      continue;
    }
    q.handle_datagram(q.rx.get() + static_cast<size_t>(i) * q.slot_size, m.msg_len, fn, ctx,
                      res.packets, 0, nullptr, nullptr);
  }
  if (res.packets > 0) q.counters->batches.add();
  res.would_block = static_cast<unsigned>(n) < vlen;
  return res;
}

Expected<void> NfQueue::add_verdict(uint32_t id, uint32_t verdict,
                                    std::span<const uint8_t> payload) {
  if (!is_open()) return Error{EBADF, "nfqueue: verdict on a closed queue"};
  return impl_->add_verdict(id, verdict, payload);
}

Expected<void> NfQueue::flush() {
  if (!is_open()) return Error{EBADF, "nfqueue: flush on a closed queue"};
  return impl_->flush();
}

Expected<void> NfQueue::set_maxlen(uint32_t maxlen) {
  if (!is_open()) return Error{EBADF, "nfqueue: set_maxlen on a closed queue"};
  Impl& q = *impl_;
  alignas(nlmsghdr) uint8_t buf[256] = {};
  nlmsghdr* nlh = nfq_nlmsg_put(as_chars(buf), NFQNL_MSG_CONFIG, q.opts.queue_num);
  nfq_nlmsg_cfg_put_qmaxlen(nlh, maxlen);
  if (const int err = q.send_raw({buf, nlh->nlmsg_len}); err != 0) {
    return Error{err, queue_name(q.opts.queue_num) + ": set maxlen: " + std::strerror(err)};
  }
  q.opts.maxlen = maxlen;
  return {};
}

Expected<size_t> NfQueue::drain_impl(PacketFn fn, void* ctx, int quiet_ms, int timeout_ms) {
  if (!is_open()) return Error{EBADF, "nfqueue: drain on a closed queue"};
  Impl& q = *impl_;
  size_t drained = 0;
  std::optional<Error> first_error;
  auto note = [&](Expected<void> r) {
    if (!r && !first_error) first_error = r.error();
  };
  note(set_maxlen(0));
  const int64_t start = monotonic_ms();
  int64_t last_activity = start;
  for (;;) {
    auto r = receive_impl(q.opts.batch_size, fn, ctx);
    note(flush());
    if (!r) {
      note(r.error());
      break;
    }
    const int64_t now = monotonic_ms();
    if (r->packets > 0) {
      drained += r->packets;
      last_activity = now;
      if (!r->would_block) continue;
    }
    if (now - start >= timeout_ms) break;
    if (now - last_activity >= quiet_ms) {
      // The socket stayed empty: done when the kernel holds no packet of ours either.
      auto stats = read_kernel_queue_stats();
      bool waiting = false;
      if (stats) {
        for (const auto& s : *stats) {
          if (s.queue_num == q.opts.queue_num && s.portid == q.sock.portid()) {
            waiting = s.queue_total > 0;
          }
        }
      }
      if (!waiting) break;
    }
    pollfd pfd{q.fd(), POLLIN, 0};
    (void)poll(&pfd, 1, 10);
  }
  close();
  if (first_error) return *first_error;
  return drained;
}

void NfQueue::close() {
  if (!impl_ || !impl_->is_open()) return;
  Impl& q = *impl_;
  // Leftovers of failed flushes get their remaining tries now: an unbind drops them.
  for (uint32_t i = 0; i < std::max<uint32_t>(1, q.opts.flush_rounds) && q.tx_len > 0; ++i) {
    (void)q.flush();
  }
  if (q.bound) {
    alignas(nlmsghdr) uint8_t buf[256] = {};
    nlmsghdr* nlh = nfq_nlmsg_put(as_chars(buf), NFQNL_MSG_CONFIG, q.opts.queue_num);
    nfq_nlmsg_cfg_put_cmd(nlh, AF_UNSPEC, NFQNL_CFG_CMD_UNBIND);
    (void)q.send_raw({buf, nlh->nlmsg_len});
    q.bound = false;
  }
  q.sock.close();
  if (q.stub_fd >= 0) ::close(std::exchange(q.stub_fd, -1));
}

std::vector<KernelQueueStats> parse_kernel_queue_stats(std::string_view text) {
  std::vector<KernelQueueStats> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    uint64_t v[8] = {};
    size_t k = 0;
    const char* p = line.data();
    const char* end = line.data() + line.size();
    while (k < 8) {
      while (p < end && (*p == ' ' || *p == '\t')) ++p;
      if (p == end) break;
      auto [next, ec] = std::from_chars(p, end, v[k]);
      if (ec != std::errc()) break;
      p = next;
      ++k;
    }
    if (k < 8) continue;  // not a queue line
    KernelQueueStats s;
    s.queue_num = static_cast<uint16_t>(v[0]);
    s.portid = static_cast<uint32_t>(v[1]);
    s.queue_total = v[2];
    s.copy_mode = static_cast<uint32_t>(v[3]);
    s.copy_range = static_cast<uint32_t>(v[4]);
    s.queue_dropped = v[5];
    s.queue_user_dropped = v[6];
    s.id_sequence = v[7];
    out.push_back(s);
  }
  return out;
}

Expected<std::vector<KernelQueueStats>> read_kernel_queue_stats(const char* path) {
  std::ifstream in(path);
  if (!in) return Error::from_errno(errno, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_kernel_queue_stats(ss.str());
}

}  // namespace rsfc
