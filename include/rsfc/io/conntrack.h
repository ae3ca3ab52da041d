// Asks the kernel's connection tracking (ctnetlink: NETLINK_NETFILTER, NFNL_SUBSYS_CTNETLINK)
// for the window scales of TCP connections whose handshake rsfcd did not see, so that the
// engine can adopt them (rsfc/core/adoption.h, docs/DESIGN.md §5a).
//
// One non-blocking socket per worker, read from the worker's event loop. Lookups are queued
// while a batch of packets is handled and sent together after its verdicts (flush()), so no
// verdict ever waits for conntrack; answers arrive later and go to the engine. The number of
// lookups queued or unanswered is bounded (kMaxOutstanding; more are dropped and counted).
// A start-up dump (dump()) reads the whole table through the same socket.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "rsfc/core/adoption.h"
#include "rsfc/core/expected.h"
#include "rsfc/core/flow_table.h"
#include "rsfc/core/metrics.h"
#include "rsfc/io/netlink.h"

struct nlmsghdr;

namespace rsfc {

// What became of a lookup (rsfcd_conntrack_lookups_total{result}).
enum class LookupResult : uint8_t {
  kFound,     // conntrack has the connection with both directions' window scales
  kNotFound,  // no such connection (ENOENT)
  kNoScale,   // found, but a direction's scale is unknown to conntrack too
  kError,     // any other error answer, a malformed answer, a failed send, a lost answer
  kDropped,   // not sent: kMaxOutstanding lookups were queued or unanswered
  kCount
};
const char* to_string(LookupResult r);

struct ConntrackCounters {
  std::array<Counter, static_cast<size_t>(LookupResult::kCount)> lookups{};
  Counter dump_entries;  // TCP entries the start-up dump delivered
};

// Parses one ctnetlink conntrack message (IPCTNL_MSG_CT_NEW, as GET and dumps answer) of a
// TCP connection. False when it is not one or lacks a tuple. `established` is conntrack's
// TCP state being ESTABLISHED. Pure; exposed for tests.
bool parse_conntrack_tcp(const nlmsghdr* nlh, ConntrackTcp& out, bool* established = nullptr);
// Appends a GET request for the connection `key` belongs to (the tuple subscriber -> peer;
// conntrack finds a connection by either direction's tuple) to `buf`. Returns its length.
size_t build_conntrack_get(uint8_t* buf, size_t room, const FlowKey& key, uint32_t seq);

class ConntrackClient {
 public:
  static constexpr uint32_t kMaxOutstanding = 256;  // queued + sent, not yet answered
  static constexpr size_t kRequestBytes = 128;      // one GET: header + tuple (IPv6: 104)
  static constexpr int kDatagramsPerCall = 8;       // receive() reads at most this many

  // Opens and binds the socket (non-blocking). Sending needs CAP_NET_ADMIN.
  static Expected<ConntrackClient> open(ConntrackCounters* counters);

  ConntrackClient() = default;
  ConntrackClient(ConntrackClient&&) noexcept = default;
  ConntrackClient& operator=(ConntrackClient&&) noexcept = default;
  ConntrackClient(const ConntrackClient&) = delete;
  ConntrackClient& operator=(const ConntrackClient&) = delete;

  int fd() const { return sock_.fd(); }
  bool is_open() const { return sock_.is_open(); }

  // Queues a lookup (sent by flush()); false, counted as dropped, at the bound.
  bool lookup(const FlowKey& key);
  // Sends the queued lookups in one datagram. A failed send counts them as errors.
  Expected<void> flush();
  // Asks for every connection conntrack tracks, IPv4 then IPv6. Entries arrive through
  // receive(); dumping() is true until the last part has.
  Expected<void> dump();
  bool dumping() const { return dumping_; }

  // Reads the answers waiting (never blocks; at most kDatagramsPerCall datagrams) and calls
  // `on_entry(const ConntrackTcp&, bool from_dump, bool established)` for each connection found.
  // Returns false on a socket error other than "nothing to read".
  template <typename F>
  bool receive(F&& on_entry) {
    using Fn = std::remove_reference_t<F>;
    return receive_with(
        [](void* ctx, const ConntrackTcp& ct, bool from_dump, bool established) {
          (*static_cast<Fn*>(ctx))(ct, from_dump, established);
        },
        &on_entry);
  }
  using EntryFn = void (*)(void* ctx, const ConntrackTcp& ct, bool from_dump, bool established);
  bool receive_with(EntryFn fn, void* ctx);

  // Call once a second: lookups still unanswered after a whole period without any answer or
  // send (an answer the kernel could not queue: ENOBUFS) are given up and counted as errors,
  // so the bound never fills with ghosts.
  void expire();

 private:
  enum class Answer : uint8_t { kNone, kEntry, kDumpEntry };
  long read_datagram();
  Answer classify_answer(const nlmsghdr* nlh, ConntrackTcp& ct, bool& established);
  Expected<void> send_dump(uint8_t family);
  bool answered();
  void count(LookupResult r, uint64_t n = 1) {
    if (counters_) counters_->lookups[static_cast<size_t>(r)].add(n);
  }

  MnlSocket sock_;
  ConntrackCounters* counters_ = nullptr;
  std::vector<uint8_t> out_;   // queued requests, kMaxOutstanding x kRequestBytes
  std::vector<uint8_t> in_;    // one datagram
  size_t out_len_ = 0;         // bytes queued in out_
  uint32_t queued_ = 0;        // lookups in out_
  uint32_t in_flight_ = 0;     // sent, unanswered
  uint32_t next_seq_ = 1;      // lookups; dumps use kDumpSeq
  bool quiet_ = true;          // no answer and no send since the last expire()
  bool dumping_ = false;       // a dump is running
  bool dump_v6_next_ = false;  // the IPv6 dump follows the IPv4 one
};

}  // namespace rsfc
