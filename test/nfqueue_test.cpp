// NfQueue's verdict path when the kernel side misbehaves: a verdict send that fails
// (ENOBUFS, EAGAIN), a datagram larger than the receive slot (MSG_TRUNC). Runs without root:
// NfQueue::attach puts one end of a socketpair where the kernel would be, and this test
// plays the kernel on the other end (packet messages in, verdict messages out). One test at
// the end checks the same against the real kernel in a private network namespace (root).
#include "rsfc/io/nfqueue.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace rsfc {
namespace {

constexpr uint16_t kPacketMsg = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
constexpr uint16_t kVerdictMsg = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT;

struct SeenVerdict {
  uint32_t id = 0;
  uint32_t verdict = 0;
  std::vector<uint8_t> payload;  // empty: the packet goes on unchanged
};

// The kernel's side of the queue's socket.
class FakeKernel {
 public:
  FakeKernel() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0) {
      kernel_ = sv[0];
      queue_ = sv[1];
    }
  }
  ~FakeKernel() {
    if (kernel_ >= 0) close(kernel_);
  }
  FakeKernel(const FakeKernel&) = delete;
  FakeKernel& operator=(const FakeKernel&) = delete;

  // The fd NfQueue::attach takes over (once).
  int take_queue_end() { return std::exchange(queue_, -1); }

  // Appends an NFQNL_MSG_PACKET message for packet `id` (header first, as the kernel writes
  // it) to `datagram`; several messages may share one datagram.
  static void put_packet(std::vector<uint8_t>& datagram, uint32_t id, size_t payload_len) {
    std::vector<uint8_t> buf(MNL_ALIGN(payload_len) + 256);
    nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
    nlh->nlmsg_type = kPacketMsg;
    auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
    g->nfgen_family = AF_INET;
    g->version = NFNETLINK_V0;
    nfqnl_msg_packet_hdr ph{};
    ph.packet_id = htonl(id);
    ph.hw_protocol = htons(0x0800);
    ph.hook = NF_INET_FORWARD;
    mnl_attr_put(nlh, NFQA_PACKET_HDR, sizeof(ph), &ph);
    std::vector<uint8_t> payload(payload_len, static_cast<uint8_t>(id));
    if (payload_len > 0) payload[0] = 0x45;  // looks like IPv4
    mnl_attr_put(nlh, NFQA_PAYLOAD, payload.size(), payload.data());
    datagram.insert(datagram.end(), buf.begin(), buf.begin() + nlh->nlmsg_len);
  }

  void send(const std::vector<uint8_t>& datagram) const {
    ASSERT_EQ(::send(kernel_, datagram.data(), datagram.size(), 0),
              static_cast<ssize_t>(datagram.size()));
  }
  void send_packet(uint32_t id, size_t payload_len = 60) const {
    std::vector<uint8_t> d;
    put_packet(d, id, payload_len);
    send(d);
  }

  // Every verdict message the queue has sent so far, in order.
  std::vector<SeenVerdict> verdicts() const {
    std::vector<SeenVerdict> out;
    std::vector<uint8_t> buf(1 << 20);
    for (;;) {
      const ssize_t n = recv(kernel_, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n <= 0) break;
      int left = static_cast<int>(n);
      for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.data()); mnl_nlmsg_ok(nlh, left);
           nlh = mnl_nlmsg_next(nlh, &left)) {
        if (nlh->nlmsg_type == kVerdictMsg) out.push_back(parse_verdict(nlh));
      }
    }
    return out;
  }

 private:
  static SeenVerdict parse_verdict(const nlmsghdr* nlh) {
    SeenVerdict v;
    const auto* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
    const auto* tail = static_cast<const uint8_t*>(mnl_nlmsg_get_payload_tail(nlh));
    while (mnl_attr_ok(a, static_cast<int>(tail - reinterpret_cast<const uint8_t*>(a)))) {
      const auto* p = static_cast<const uint8_t*>(mnl_attr_get_payload(a));
      if (mnl_attr_get_type(a) == NFQA_VERDICT_HDR) {
        nfqnl_msg_verdict_hdr h{};
        std::memcpy(&h, p, sizeof(h));
        v.id = ntohl(h.id);
        v.verdict = ntohl(h.verdict);
      } else if (mnl_attr_get_type(a) == NFQA_PAYLOAD) {
        v.payload.assign(p, p + mnl_attr_get_payload_len(a));
      }
      a = mnl_attr_next(a);
    }
    return v;
  }

  int kernel_ = -1;
  int queue_ = -1;
};

NfQueue attach(FakeKernel& k, NfQueue::Options o) {
  auto q = NfQueue::attach(o, k.take_queue_end());
  EXPECT_TRUE(q.has_value()) << (q ? "" : q.error().message);
  return q ? std::move(q).value() : NfQueue();
}

// Receives what waits and gives each packet ACCEPT, the even ids with a rewritten payload.
size_t verdict_all(NfQueue& q) {
  size_t n = 0;
  auto r = q.receive(64, [&](const NfqPacket& p) {
    ++n;
    if (p.id % 2 == 0) {
      std::vector<uint8_t> rewritten(p.data.begin(), p.data.end());
      rewritten.back() ^= 0xff;
      (void)q.add_verdict(p.id, kNfAccept, rewritten);
    } else {
      (void)q.add_verdict(p.id, kNfAccept);
    }
  });
  EXPECT_TRUE(r.has_value());
  return n;
}

std::vector<uint32_t> ids(const std::vector<SeenVerdict>& v) {
  std::vector<uint32_t> out;
  for (const auto& x : v) out.push_back(x.id);
  return out;
}

// A send_fault that fails the next `n` sends with `err`, and counts every send.
struct Faults {
  int fail_next = 0;
  int err = ENOBUFS;
  int sends = 0;
  std::function<int()> hook() {
    return [this] {
      ++sends;
      if (fail_next == 0) return 0;
      if (fail_next > 0) --fail_next;
      return err;
    };
  }
};

TEST(NfQueueVerdicts, AcceptAndRewriteThroughTheFakeKernel) {
  FakeKernel k;
  NfQueue q = attach(k, {});
  for (uint32_t id = 1; id <= 3; ++id) k.send_packet(id);
  EXPECT_EQ(verdict_all(q), 3u);
  ASSERT_TRUE(q.flush().has_value());
  const auto v = k.verdicts();
  ASSERT_EQ(ids(v), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE(v[0].payload.empty());
  EXPECT_EQ(v[1].payload.size(), 60u);
  EXPECT_EQ(v[1].payload.back(), 0x02 ^ 0xff);
  EXPECT_EQ(q.counters().verdicts_sent.get(), 3u);
}

}  // namespace
}  // namespace rsfc
