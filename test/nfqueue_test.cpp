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

#include "rsfc/io/io_metrics.h"

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

// A transient failure (one ENOBUFS) is retried at once: the rewritten packet still goes back
// rewritten, in the same flush.
TEST(NfQueueVerdicts, TransientSendFailureIsRetried) {
  FakeKernel k;
  Faults f{.fail_next = 1};
  NfQueue q = attach(k, {.send_fault = f.hook()});
  for (uint32_t id = 1; id <= 3; ++id) k.send_packet(id);
  verdict_all(q);
  EXPECT_TRUE(q.flush().has_value());
  const auto v = k.verdicts();
  ASSERT_EQ(ids(v), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(v[1].payload.size(), 60u) << "retried as built";
  EXPECT_EQ(f.sends, 2);
  EXPECT_EQ(q.pending_verdicts(), 0u);
  EXPECT_EQ(q.faults().send_failures.get(), 1u);
  EXPECT_EQ(q.faults().payload_fallbacks.get(), 0u);
  EXPECT_EQ(q.counters().verdicts_with_payload.get(), 1u);
}

// The batch as built cannot be sent (every try fails): the same verdicts go out without
// their payloads (the rewritten packet leaves unchanged) instead of waiting in the kernel.
TEST(NfQueueVerdicts, UnsendableBatchFallsBackToPlainAccept) {
  FakeKernel k;
  Faults f{.fail_next = 3};
  NfQueue q = attach(k, {.send_fault = f.hook()});
  for (uint32_t id = 1; id <= 3; ++id) k.send_packet(id);
  verdict_all(q);
  EXPECT_TRUE(q.flush().has_value());
  const auto v = k.verdicts();
  ASSERT_EQ(ids(v), (std::vector<uint32_t>{1, 2, 3}));
  for (const auto& x : v) {
    EXPECT_EQ(x.verdict, kNfAccept) << x.id;
    EXPECT_TRUE(x.payload.empty()) << x.id;
  }
  EXPECT_EQ(f.sends, 4) << "3 tries as built, 1 plain";
  EXPECT_EQ(q.pending_verdicts(), 0u);
  EXPECT_EQ(q.counters().verdicts_sent.get(), 3u);
  EXPECT_EQ(q.counters().verdicts_with_payload.get(), 0u);
  EXPECT_EQ(q.faults().send_failures.get(), 3u);
  EXPECT_EQ(q.faults().payload_fallbacks.get(), 1u) << "packet 2 went back unchanged";
  EXPECT_EQ(q.faults().verdicts_lost.get(), 0u);
}

// Sends that keep failing are retried a bounded number of times: the verdicts stay pending
// for the next flushes (the daemon flushes at every batch and every second), then are given
// up, so that one broken batch never blocks the ones after it.
TEST(NfQueueVerdicts, PersistentSendFailureIsBounded) {
  FakeKernel k;
  Faults f{.fail_next = -1};
  NfQueue q = attach(k, {.send_fault = f.hook()});
  for (uint32_t id = 1; id <= 3; ++id) k.send_packet(id);
  verdict_all(q);
  EXPECT_FALSE(q.flush().has_value());
  EXPECT_EQ(q.pending_verdicts(), 3u) << "kept for the next flush";
  EXPECT_FALSE(q.flush().has_value());
  EXPECT_EQ(q.pending_verdicts(), 3u);
  EXPECT_FALSE(q.flush().has_value());
  EXPECT_EQ(q.pending_verdicts(), 0u) << "given up after 3 flushes";
  EXPECT_EQ(f.sends, 3 + 3 + 3 + 3) << "as built and plain in the first flush, plain after";
  EXPECT_TRUE(k.verdicts().empty());
  EXPECT_EQ(q.faults().send_failures.get(), 12u);
  EXPECT_EQ(q.faults().payload_fallbacks.get(), 1u);
  EXPECT_EQ(q.faults().verdicts_lost.get(), 3u);

  // The socket works again: new packets get their verdicts as usual.
  f.fail_next = 0;
  k.send_packet(4);
  verdict_all(q);
  EXPECT_TRUE(q.flush().has_value());
  EXPECT_EQ(ids(k.verdicts()), (std::vector<uint32_t>{4}));
}

// A datagram larger than the receive slot arrives cut (MSG_TRUNC). Its packets cannot be
// processed, but the headers that did arrive name them: each gets a plain ACCEPT.
TEST(NfQueueVerdicts, TruncatedDatagramAcceptsEveryPacketItNames) {
  FakeKernel k;
  // copy_range 64: receive slots of 64 + 8192 bytes.
  NfQueue q = attach(k, {.copy_range = 64});
  k.send_packet(10, 9000);  // one packet message, cut
  std::vector<uint8_t> two;
  FakeKernel::put_packet(two, 11, 100);   // whole
  FakeKernel::put_packet(two, 12, 9000);  // cut
  k.send(two);
  k.send_packet(13, 60);  // an ordinary one after them
  std::vector<uint32_t> seen;
  auto r = q.receive(64, [&](const NfqPacket& p) {
    seen.push_back(p.id);
    (void)q.add_verdict(p.id, kNfAccept);
  });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(seen, (std::vector<uint32_t>{13})) << "cut datagrams are never processed";
  ASSERT_TRUE(q.flush().has_value());
  const auto v = k.verdicts();
  EXPECT_EQ(ids(v), (std::vector<uint32_t>{10, 11, 12, 13}));
  for (const auto& x : v) {
    EXPECT_EQ(x.verdict, kNfAccept) << x.id;
    EXPECT_TRUE(x.payload.empty()) << x.id;
  }
  EXPECT_EQ(q.faults().truncated_datagrams.get(), 2u);
  EXPECT_EQ(q.faults().truncated_accepted.get(), 3u);
  EXPECT_EQ(q.counters().packets_received.get(), 4u);
}

// While sends fail, verdicts keep coming (one per packet, large rewritten payloads that
// fill the batch buffer again and again): each one is recorded, and in the end every
// packet is accounted for - sent, or given up and counted - never silently dropped.
TEST(NfQueueVerdicts, EveryVerdictIsAccountedForWhileSendsFail) {
  FakeKernel k;
  Faults f{.fail_next = -1};
  NfQueue q = attach(k, {.batch_size = 4, .send_fault = f.hook()});
  const std::vector<uint8_t> big(60000, 0x45);
  for (uint32_t id = 1; id <= 40; ++id) {
    const size_t before = q.pending_verdicts() + q.faults().verdicts_lost.get();
    (void)q.add_verdict(id, kNfAccept, big);
    EXPECT_EQ(q.pending_verdicts() + q.faults().verdicts_lost.get(), before + 1) << id;
  }
  f.fail_next = 0;
  ASSERT_TRUE(q.flush().has_value());
  EXPECT_EQ(k.verdicts().size() + q.faults().verdicts_lost.get(), 40u);
  EXPECT_GT(q.faults().verdicts_lost.get(), 0u) << "the buffer did overflow in this test";
}

TEST(NfQueueVerdicts, FaultCountersAreOnTheMetricsPage) {
  VerdictFaultCounters q0, q3;
  q0.send_failures.add(4);
  q3.verdicts_lost.add(2);
  q3.truncated_accepted.add(1);
  const std::string page = render_io_metrics({{0, &q0}, {3, &q3}, {5, nullptr}}, nullptr);
  EXPECT_NE(page.find("# TYPE rsfcd_verdict_send_failures_total counter\n"), std::string::npos);
  EXPECT_NE(page.find("\nrsfcd_verdict_send_failures_total{queue=\"0\"} 4\n"), std::string::npos);
  EXPECT_NE(page.find("\nrsfcd_verdicts_lost_total{queue=\"3\"} 2\n"), std::string::npos);
  EXPECT_NE(page.find("\nrsfcd_queue_truncated_packets_accepted_total{queue=\"3\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(page.find("queue=\"5\""), std::string::npos);
  EXPECT_EQ(page.back(), '\n');
}

// ---- The same against the kernel, in a private network namespace (root) --------------------

// A UDP socket on 127.0.0.1 (port 0: unbound sender).
struct LoopbackUdp {
  int fd = -1;
  explicit LoopbackUdp(uint16_t port) : fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (port != 0 && bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      close(fd);
      fd = -1;
    }
  }
  ~LoopbackUdp() {
    if (fd >= 0) close(fd);
  }
  void send_to(uint16_t port, const std::string& text) const {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  std::vector<std::string> receive_all(int wait_ms) const {
    std::vector<std::string> out;
    pollfd p{fd, POLLIN, 0};
    char buf[2048];
    while (poll(&p, 1, wait_ms) > 0) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n < 0) break;
      out.emplace_back(buf, static_cast<size_t>(n));
    }
    return out;
  }
};

// The kernel refuses nothing here; the first three verdict sends fail as if sendmsg had
// returned ENOBUFS. The three rewritten packets must still leave, unchanged.
TEST(NfQueueKernelFaults, UnsendableRewritesLeaveUnchanged) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  std::string skip;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      skip = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    if (std::system("ip link set lo up") != 0 ||
        std::system("iptables-legacy -w -A OUTPUT -o lo -p udp --dport 9 "
                    "-j NFQUEUE --queue-num 8 2>/dev/null") != 0) {
      skip = "ip / iptables-legacy NFQUEUE not available";
      return;
    }
    Faults f;
    auto q = NfQueue::open({.queue_num = 8, .batch_size = 16, .send_fault = f.hook()});
    ASSERT_TRUE(q.has_value()) << q.error().message;
    LoopbackUdp rx(9), tx(0);
    ASSERT_GE(rx.fd, 0);
    for (int i = 1; i <= 3; ++i) tx.send_to(9, "packet-" + std::to_string(i));
    size_t got = 0;
    for (int i = 0; i < 100 && got < 3; ++i) {
      pollfd p{q->fd(), POLLIN, 0};
      poll(&p, 1, 20);
      auto r = q->receive(16, [&](const NfqPacket& pk) {
        ++got;
        if (pk.data.size() != 20 + 8 + 8) return;  // IPv4 + UDP + "packet-N"; else no verdict
        std::vector<uint8_t> mod(pk.data.begin(), pk.data.end());
        mod[35] = 'X';
        mod[26] = mod[27] = 0;  // UDP checksum 0: none
        (void)q->add_verdict(pk.id, kNfAccept, mod);
      });
      ASSERT_TRUE(r.has_value());
    }
    ASSERT_EQ(got, 3u);
    f.fail_next = 3;
    EXPECT_TRUE(q->flush().has_value());
    EXPECT_EQ(rx.receive_all(200), (std::vector<std::string>{"packet-1", "packet-2", "packet-3"}));
    EXPECT_EQ(q->faults().payload_fallbacks.get(), 3u);
    EXPECT_EQ(q->faults().verdicts_lost.get(), 0u);
    EXPECT_EQ(q->counters().send_errors.get(), 3u);
    EXPECT_EQ(q->last_kernel_error(), 0);
  });
  t.join();
  if (!skip.empty()) GTEST_SKIP() << skip;
}

}  // namespace
}  // namespace rsfc
