// One NFQUEUE queue over a libmnl netlink socket (libnetfilter_queue's nlmsg API, no
// per-packet allocation). Single-threaded: one NfQueue per worker thread.
//
// Typical loop (the fd is level-triggered readable while packets wait):
//   auto q = NfQueue::open({.queue_num = 0});            // bind + params + flags, ACKed
//   q->receive(64, [&](const NfqPacket& p) {            // never blocks
//     q->add_verdict(p.id, kNfAccept);                  // or with a modified payload
//   });
//   q->flush();                                         // all verdicts in one sendmsg
//
// A verdict may also be given later (a delay element holds packets in the kernel queue
// by id), in any order; each id needs exactly one verdict.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "rsfc/core/expected.h"
#include "rsfc/core/metrics.h"

namespace rsfc {

constexpr uint32_t kNfDrop = 0;    // NF_DROP
constexpr uint32_t kNfAccept = 1;  // NF_ACCEPT

// One queued packet, as the kernel handed it out.
struct NfqPacket {
  uint32_t id = 0;
  // Starts at the IP header. Writable: modify in place, then pass it to add_verdict.
  // Valid until the next receive()/drain_and_close() call on the same NfQueue.
  std::span<uint8_t> data;
  uint32_t orig_len = 0;            // NFQA_CAP_LEN if present, else data.size()
  bool checksum_not_ready = false;  // NFQA_SKB_INFO & NFQA_SKB_CSUMNOTREADY
  bool gso = false;                 // NFQA_SKB_INFO & NFQA_SKB_GSO
  uint16_t hw_protocol = 0;         // host order (0x0800 IPv4, 0x86dd IPv6)

  // The kernel copied fewer bytes than the packet has: it must never be sent back.
  bool truncated() const { return orig_len > data.size(); }
};

// Faults on the verdict path, per queue (one writer: the queue's thread; the metrics page
// reads them concurrently). Rendered by render_io_metrics (io_metrics.h).
struct VerdictFaultCounters {
  Counter send_failures;        // verdict sends (sendmsg) that failed, each try counted
  Counter payload_fallbacks;    // rewritten packets released unchanged: not sendable
  Counter verdicts_lost;        // given up after every try (the kernel keeps those packets)
  Counter truncated_datagrams;  // datagrams larger than a receive slot (MSG_TRUNC)
  Counter truncated_accepted;   // packets named in them: accepted unchanged, unprocessed
};

class NfQueue {
 public:
  struct Options {
    uint16_t queue_num = 0;
    uint32_t maxlen = 8192;                  // packets the kernel keeps waiting for us
    uint32_t rcvbuf_bytes = 8u << 20;        // SO_RCVBUFFORCE (falls back to SO_RCVBUF)
    uint32_t copy_range = 0xffff;            // bytes copied per packet; 0 = NFQNL_COPY_META
    bool fail_open = true;                   // NFQA_CFG_F_FAIL_OPEN: full queue => accept
    bool gso = false;                        // NFQA_CFG_F_GSO: see nfqueue.cpp (rsfcd: false)
    uint32_t batch_size = 64;                // receive buffers preallocated (max per receive)
    QueueCounters* counters = nullptr;       // not owned; must outlive the queue; may be null
    VerdictFaultCounters* faults = nullptr;  // idem
    // A verdict batch that cannot be sent is tried send_attempts times as built, then as
    // plain verdicts (payloads dropped: rewritten packets go on unchanged), send_attempts
    // times again; still failing, it is kept for the next flush, at most flush_rounds
    // flushes, then its verdicts are given up (counted in verdicts_lost).
    uint32_t send_attempts = 3;
    uint32_t flush_rounds = 3;
    // Test seam: called before every message sent to the kernel; a non-zero errno fails
    // that send as sendmsg would (ENOBUFS, EAGAIN ...). Empty in the daemon.
    std::function<int()> send_fault = {};
  };

  struct RecvResult {
    size_t packets = 0;        // callbacks made
    bool would_block = false;  // the socket was drained (EAGAIN)
  };

  // Opens the netlink socket and sends bind + copy params + maxlen + flags in ONE message
  // with NLM_F_ACK, then reads the ACK. A queue bound by another process, an unsupported
  // flag etc. is an Error whose message names the queue.
  static Expected<NfQueue> open(const Options& opts);
  // Test seam: a queue over `fd` (one end of a socketpair standing in for the kernel): it
  // receives packet messages from it and sends verdict and config messages to it. Nothing
  // is bound. The queue owns fd (closed with the queue, also when attach fails).
  static Expected<NfQueue> attach(const Options& opts, int fd);

  NfQueue();  // a closed queue (is_open() == false)
  NfQueue(NfQueue&&) noexcept;
  NfQueue& operator=(NfQueue&&) noexcept;
  NfQueue(const NfQueue&) = delete;
  NfQueue& operator=(const NfQueue&) = delete;
  ~NfQueue();  // unbinds and closes; packets still queued are dropped by the kernel

  int fd() const;
  uint16_t queue_num() const;
  uint32_t portid() const;  // our netlink port id (the "portid" column of /proc stats)
  bool is_open() const;
  const QueueCounters& counters() const;
  const VerdictFaultCounters& faults() const;
  // errno of the last error reply the kernel sent to a verdict/config message (0 = none).
  int last_kernel_error() const;
  // Receive buffer the kernel granted (bytes, as getsockopt reports it).
  int rcvbuf_bytes() const;

  // Receives up to `max_packets` (capped at batch_size) without blocking and calls
  // `on_packet(const NfqPacket&)` for each. Error replies from the kernel (e.g. to a
  // verdict for an unknown id) are counted in send_errors; ENOBUFS counts an overrun
  // (not an error). A datagram cut by MSG_TRUNC is not handed out: every packet it names
  // gets ACCEPT (counted in faults()). Only a real socket failure is an Error.
  template <class F>
  Expected<RecvResult> receive(size_t max_packets, F&& on_packet) {
    using Fn = std::remove_reference_t<F>;
    return receive_impl(
        max_packets, [](void* ctx, const NfqPacket& p) { (*static_cast<Fn*>(ctx))(p); },
        const_cast<void*>(static_cast<const void*>(std::addressof(on_packet))));
  }

  // Appends a verdict to the pending batch; on an open queue it is always recorded. A
  // non-empty payload replaces the packet (send one only for a modified, non-truncated
  // packet). If the batch buffer is full it is flushed first; an Error reports that flush
  // failing (see Options::send_attempts for what then happens to the earlier verdicts).
  Expected<void> add_verdict(uint32_t id, uint32_t verdict, std::span<const uint8_t> payload = {});
  // Sends all pending verdicts in one sendmsg, retried and degraded as Options says. An
  // Error means they could not be sent: kept for the next flush, or given up (counted).
  Expected<void> flush();
  size_t pending_verdicts() const;

  // Changes the kernel-side queue length. 0 + fail_open = the kernel accepts new packets
  // itself instead of queueing them (used for a graceful shutdown).
  Expected<void> set_maxlen(uint32_t maxlen);

  // Graceful shutdown: maxlen 0, then receive + verdict (through on_packet, which must give
  // each packet its verdict with add_verdict) until the socket stays empty for `quiet_ms`
  // and the kernel reports no packet waiting, or `timeout_ms` passes; then unbind + close.
  // Returns the number of packets drained.
  template <class F>
  Expected<size_t> drain_and_close(F&& on_packet, int quiet_ms = 50, int timeout_ms = 2000) {
    using Fn = std::remove_reference_t<F>;
    return drain_impl([](void* ctx, const NfqPacket& p) { (*static_cast<Fn*>(ctx))(p); },
                      const_cast<void*>(static_cast<const void*>(std::addressof(on_packet))),
                      quiet_ms, timeout_ms);
  }

  // Unbinds and closes now (packets still queued in the kernel are dropped).
  void close();

 private:
  struct Impl;
  using PacketFn = void (*)(void*, const NfqPacket&);
  explicit NfQueue(std::unique_ptr<Impl> impl);
  Expected<RecvResult> receive_impl(size_t max_packets, PacketFn fn, void* ctx);
  Expected<size_t> drain_impl(PacketFn fn, void* ctx, int quiet_ms, int timeout_ms);

  std::unique_ptr<Impl> impl_;
};

// One line of /proc/net/netfilter/nfnetlink_queue.
struct KernelQueueStats {
  uint16_t queue_num = 0;
  uint32_t portid = 0;
  uint64_t queue_total = 0;  // packets waiting for a verdict now
  uint32_t copy_mode = 0;
  uint32_t copy_range = 0;
  uint64_t queue_dropped = 0;       // dropped: queue full (without fail-open)
  uint64_t queue_user_dropped = 0;  // dropped: netlink send to us failed (without fail-open)
  uint64_t id_sequence = 0;
};

// Parses the file's text (one line per bound queue).
std::vector<KernelQueueStats> parse_kernel_queue_stats(std::string_view text);
// Reads the nfnetlink_queue table of the calling thread's network namespace
// (/proc/thread-self/net/...: /proc/net follows the process's first thread, not the caller).
Expected<std::vector<KernelQueueStats>> read_kernel_queue_stats(
    const char* path = "/proc/thread-self/net/netfilter/nfnetlink_queue");

}  // namespace rsfc
