// Counters the core keeps, one set per worker (single writer). The HTTP thread reads them
// concurrently: each counter is a relaxed atomic so reads are race-free without a lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rsfc/core/packet.h"

namespace rsfc {

// A counter with one writer: increment is a relaxed load + store (no locked instruction).
class Counter {
 public:
  void add(uint64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void set(uint64_t n) { v_.store(n, std::memory_order_relaxed); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

enum class Direction : uint8_t { kToSubscriber = 0, kFromSubscriber = 1 };
constexpr size_t kDirections = 2;
const char* to_string(Direction d);  // "to_subscriber" / "from_subscriber"

// The two knobs: uplink (the window in ACKs to subscribers), downlink (in ACKs from them).
enum class Knob : uint8_t { kUplink = 0, kDownlink = 1 };
constexpr size_t kKnobs = 2;
const char* to_string(Knob k);  // "uplink" / "downlink"

// What happened to a packet. Exactly one outcome per packet.
enum class Outcome : uint8_t {
  kPassed = 0,     // forwarded unchanged (tracked)
  kRewritten,      // forwarded with a lowered window
  kUnparsed,       // not a TCP segment we understand: unchanged, see parse_errors
  kNotSubscriber,  // neither (or both) ends in subscriber_networks: unchanged
  kUnregulated,    // window scale unknown (handshake not seen): unchanged
  kTruncatedCopy,  // the kernel gave us less than the whole packet: unchanged
  kCount
};
const char* to_string(Outcome o);

// A SYN or SYN-ACK the engine did not accept as a valid new handshake (ignored: passed
// untouched, nothing learned, the regulators not fed).
enum class HandshakeKind : uint8_t { kSyn = 0, kSynAck, kCount };
const char* to_string(HandshakeKind k);  // "syn" / "syn_ack"

// What a new flow of a subscriber at its flow cap (flows.max_per_subscriber) did.
enum class CapAction : uint8_t { kEvictedOwn = 0, kUntracked, kCount };
const char* to_string(CapAction a);  // "evicted_own" / "untracked"

// Log-spaced latency histogram (nanoseconds), Prometheus style cumulative on export.
class LatencyHistogram {
 public:
  static constexpr std::array<uint64_t, 12> kBoundsNs{
      250, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1000000, 10000000, 100000000};
  void observe(uint64_t ns);
  uint64_t bucket(size_t i) const { return buckets_[i].get(); }  // non-cumulative
  uint64_t count() const { return count_.get(); }
  uint64_t sum_ns() const { return sum_.get(); }

 private:
  std::array<Counter, kBoundsNs.size() + 1> buckets_{};
  Counter count_, sum_;
};

struct CoreCounters {
  std::array<std::array<Counter, static_cast<size_t>(Outcome::kCount)>, kDirections> packets{};
  Counter packets_unknown_direction;  // unparsed / not-subscriber: direction unknown
  std::array<Counter, static_cast<size_t>(ParseError::kCount)> parse_errors{};
  std::array<Counter, kDirections> windows_rewritten{};
  std::array<Counter, kDirections> right_edge_holds{};  // clamp limited by the right edge
  std::array<Counter, kDirections> floor_holds{};       // clamp limited by min_window_bytes
  // rsfc targets raised by the bytes the ACK's sender holds above its cumulative ACK (SACK
  // blocks: a loss being repaired; Engine::with_sacked)
  std::array<Counter, kDirections> sacked_allowances{};
  Counter checksum_full;  // full checksum computed (CSUMNOTREADY)
  Counter flows_created, flows_evicted, flows_expired, flows_closed;
  Counter flows_unregulated;  // distinct flows first seen without their handshake
  Counter flows_adopted;      // of those, flows given their window scales by conntrack
  // Distinct flows whose uplink knob rsfc regulates without TCP timestamps (it then runs on
  // the window-opening lag). Not counted: observe (estimates only), static (needs no
  // timestamps), the downlink's drwa. A flow counts once, from its first rsfc clamp.
  Counter flows_no_timestamps;
  Counter flows_active;  // gauge
  // New flows that found the table full: each took the place of the least valuable flow
  // (also in flows_evicted). A full table always has one, so none is ever refused.
  Counter flows_table_full;
  // SYNs and SYN-ACKs ignored on a flow they do not fit (spoofed, or too late to matter).
  std::array<Counter, static_cast<size_t>(HandshakeKind::kCount)> handshake_ignored{};
  // RSTs outside the receiver's window (RFC 5961 3), passed without closing their flow.
  Counter rst_ignored;
  // New flows of subscribers at their cap: own flows evicted for them (also in
  // flows_evicted), and packets left untracked (every packet of such a flow counts).
  std::array<Counter, static_cast<size_t>(CapAction::kCount)> flows_subscriber_cap{};
  // The regulator pools, indexed by Knob: slots in use (gauge), and flows that needed a
  // regulator when their knob's pool was full (each passes that knob untouched; once per flow).
  std::array<Counter, kKnobs> regulator_pool_used{};
  std::array<Counter, kKnobs> regulator_pool_full{};
  // RSFC/DRWA health, gauges of flows per controller state etc. are added by the engine.
  std::array<Counter, 4> rsfc_flows_in_state{};  // indexed by RsfcState
  Counter rsfc_windows_applied;
  Counter rsfc_tick_estimates;       // flows whose TS granularity has been estimated
  Counter rsfc_subscribers;          // gauge: subscribers whose rsfc uploads share state
  Counter rsfc_subscribers_created;  // entries created (a subscriber's first flow)
  Counter rsfc_idle_law_steps;       // steps of timestamp-less uploads on the uplink's idle time
  Counter rsfc_path_rebaselines;     // min(d) raised: a scheduled drain showed a longer path
  Counter drwa_windows_applied;
  // The downlink queue regulator (downlink.policy rsfc).
  std::array<Counter, 5> downlink_flows_in_state{};  // gauge, indexed by DownlinkState
  Counter downlink_windows_applied;
  Counter downlink_flows_no_timestamps;  // flows it leaves alone: no TCP timestamps
  Counter downlink_flows_round_trip;     // no TCP timestamps: on the gateway's round trip
  Counter downlink_steps_yielded;        // ... steps that gave way to the phone's short upload
  Counter downlink_steps_held;           // steps due without a signal: the window held
  Counter downlink_packets_paced;        // packets to phones given a later release (pacing)
};

// Counters the I/O shell keeps per queue.
struct QueueCounters {
  Counter packets_received;
  Counter verdicts_sent;
  Counter verdicts_with_payload;
  Counter batches;
  Counter recv_errors;  // recvmsg errors (ENOBUFS = overrun)
  Counter overruns;     // ENOBUFS seen: the kernel dropped messages to us
  Counter send_errors;
  Counter gso_packets;                // NFQA_SKB_GSO
  Counter kernel_queue_dropped;       // from /proc/net/netfilter/nfnetlink_queue
  Counter kernel_queue_user_dropped;  // idem
  Counter kernel_queue_total;         // idem: packets waiting now
  LatencyHistogram processing_time;   // per packet, parse..verdict built
  // Downlink pacing: packets whose verdict is held now (gauge), held so far, and packets the
  // pacer would have held when the worker's store was full (they left at once).
  Counter packets_held;
  Counter packets_held_total;
  Counter held_overflow;
};

// One queue's counters for rendering (read concurrently with the worker: relaxed loads).
struct QueueMetricsView {
  uint16_t queue = 0;
  const CoreCounters* core = nullptr;  // may be null (queue not running)
  const QueueCounters* io = nullptr;   // may be null
};

// Prometheus text exposition format (version 0.0.4) of all queues' counters, with HELP and
// TYPE lines, plus rsfcd_build_info{version}. Pure: no I/O, no clock.
std::string render_prometheus(const std::vector<QueueMetricsView>& queues,
                              std::string_view version);

}  // namespace rsfc
