#include "rsfc/core/metrics.h"

#include <charconv>
#include <cstdio>

#include "rsfc/core/downlink_regulator.h"
#include "rsfc/core/rsfc_controller.h"

namespace rsfc {

const char* to_string(Direction d) {
  switch (d) {
    case Direction::kToSubscriber:
      return "to_subscriber";
    case Direction::kFromSubscriber:
      return "from_subscriber";
  }
  return "unknown";
}

const char* to_string(Knob k) {
  return k == Knob::kUplink ? "uplink" : "downlink";
}

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kPassed:
      return "passed";
    case Outcome::kRewritten:
      return "rewritten";
    case Outcome::kUnparsed:
      return "unparsed";
    case Outcome::kNotSubscriber:
      return "not_subscriber";
    case Outcome::kUnregulated:
      return "unregulated";
    case Outcome::kTruncatedCopy:
      return "truncated_copy";
    case Outcome::kCount:
      break;
  }
  return "unknown";
}

const char* to_string(HandshakeKind k) {
  switch (k) {
    case HandshakeKind::kSyn:
      return "syn";
    case HandshakeKind::kSynAck:
      return "syn_ack";
    case HandshakeKind::kCount:
      break;
  }
  return "unknown";
}

const char* to_string(CapAction a) {
  switch (a) {
    case CapAction::kEvictedOwn:
      return "evicted_own";
    case CapAction::kUntracked:
      return "untracked";
    case CapAction::kCount:
      break;
  }
  return "unknown";
}

void LatencyHistogram::observe(uint64_t ns) {
  size_t i = 0;
  while (i < kBoundsNs.size() && ns > kBoundsNs[i]) ++i;
  buckets_[i].add();
  count_.add();
  sum_.add(ns);
}

namespace {

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void family(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  // name{labels} value. `labels` is already rendered ("queue=\"0\",direction=\"x\"").
  void sample(std::string_view name, std::string_view labels, uint64_t v) {
    head(name, labels);
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out_.append(buf, r.ptr);
    out_ += '\n';
  }
  void sample(std::string_view name, std::string_view labels, double v) {
    head(name, labels);
    number(v);
    out_ += '\n';
  }
  void number(double v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out_.append(buf, r.ptr);
  }

 private:
  void head(std::string_view name, std::string_view labels) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
  }
  std::string& out_;
};

std::string label(const char* k, std::string_view v) {
  std::string s(k);
  s += "=\"";
  for (char c : v) {  // label value escaping: backslash, quote, newline
    if (c == '\\' || c == '"') {
      s += '\\';
      s += c;
    } else if (c == '\n') {
      s += "\\n";
    } else {
      s += c;
    }
  }
  s += '"';
  return s;
}

std::string qlabel(uint16_t q) {
  return label("queue", std::to_string(q));
}

// A family with one sample per queue, read from one counter of the core or of the shell.
template <typename Counters>
struct QueueFamily {
  const char* name;
  const char* type;
  const char* help;
  Counter Counters::*counter;
};

// Core counters per queue.
constexpr QueueFamily<CoreCounters> kFlowFamilies[] = {
    {"rsfcd_checksum_full_total", "counter",
     "Full TCP checksums computed (checksum not ready in the kernel).",
     &CoreCounters::checksum_full},
    {"rsfcd_flows_active", "gauge", "Flows tracked now.", &CoreCounters::flows_active},
    {"rsfcd_flows_created_total", "counter", "Flows created.", &CoreCounters::flows_created},
    {"rsfcd_flows_evicted_total", "counter",
     "Flows evicted to make room for new ones: the table was full "
     "(rsfcd_flows_table_full_total) or the subscriber at flows.max_per_subscriber "
     "(rsfcd_flows_subscriber_cap_total{action=\"evicted_own\"}).",
     &CoreCounters::flows_evicted},
    {"rsfcd_flows_expired_total", "counter", "Flows expired by a timeout.",
     &CoreCounters::flows_expired},
    {"rsfcd_flows_closed_total", "counter", "Flows closed (FIN/RST both ways).",
     &CoreCounters::flows_closed},
    {"rsfcd_flows_unregulated_total", "counter",
     "Flows first seen without their handshake (window scale unknown); those conntrack gave "
     "their scales are also counted in rsfcd_flows_adopted_total.",
     &CoreCounters::flows_unregulated},
    {"rsfcd_flows_adopted_total", "counter",
     "Flows first seen without their handshake whose window scales came from conntrack: "
     "regulated from then on.",
     &CoreCounters::flows_adopted},
    {"rsfcd_flows_no_timestamps_total", "counter",
     "Flows regulated by rsfc (uplink) without TCP timestamps; observe, static and drwa "
     "flows are not counted.",
     &CoreCounters::flows_no_timestamps},
    {"rsfcd_flows_table_full_total", "counter",
     "New flows that found the flow table full (flows.max): each took the place of the least "
     "valuable flow (closed, then embryonic or mid-stream, then established), also counted in "
     "rsfcd_flows_evicted_total.",
     &CoreCounters::flows_table_full},
    {"rsfcd_rst_ignored_total", "counter",
     "RSTs outside their receiver's window (RFC 5961 3; during the handshake, not "
     "acknowledging the SYN): passed untouched, their flow not closed.",
     &CoreCounters::rst_ignored},
};

// After the per-state gauge rsfcd_rsfc_flows.
constexpr QueueFamily<CoreCounters> kRegulatorFamilies[] = {
    {"rsfcd_rsfc_windows_applied_total", "counter", "Windows applied by the RSFC controller.",
     &CoreCounters::rsfc_windows_applied},
    {"rsfcd_rsfc_tick_estimates_total", "counter",
     "Flows whose timestamp granularity has been estimated.", &CoreCounters::rsfc_tick_estimates},
    {"rsfcd_rsfc_subscribers", "gauge",
     "Subscriber addresses whose rsfc-regulated flows share one uplink state now.",
     &CoreCounters::rsfc_subscribers},
    {"rsfcd_rsfc_subscribers_created_total", "counter",
     "Subscriber entries created for rsfc's shared state (a subscriber's first flow).",
     &CoreCounters::rsfc_subscribers_created},
    {"rsfcd_rsfc_idle_law_steps_total", "counter",
     "Control steps of uploads from phones without TCP timestamps whose window came from the "
     "uplink's idle time (rsfc.idle_law): the phone's packets came evenly enough to tell the "
     "link's idle time from its scheduler's. Steps without it keep the lag law's window.",
     &CoreCounters::rsfc_idle_law_steps},
    {"rsfcd_rsfc_path_rebaselines_total", "counter",
     "Times a flow's minimum uplink delay was raised because a scheduled drain showed "
     "a longer path (route change, handover), not a queue.",
     &CoreCounters::rsfc_path_rebaselines},
    {"rsfcd_drwa_windows_applied_total", "counter", "Windows applied by DRWA.",
     &CoreCounters::drwa_windows_applied},
};

// After the per-state gauge rsfcd_downlink_flows.
constexpr QueueFamily<CoreCounters> kDownlinkFamilies[] = {
    {"rsfcd_downlink_windows_applied_total", "counter",
     "Windows applied by the downlink queue regulator (downlink.policy rsfc).",
     &CoreCounters::downlink_windows_applied},
    {"rsfcd_downlink_flows_no_timestamps_total", "counter",
     "Flows the downlink queue regulator leaves unclamped because they carry no TCP "
     "timestamps (rsfc.tuning.downlink_round_trip false, or a flow whose handshake rsfcd did "
     "not see).",
     &CoreCounters::downlink_flows_no_timestamps},
    {"rsfcd_downlink_flows_round_trip_total", "counter",
     "Flows without TCP timestamps the downlink queue regulator runs on the gateway's round "
     "trip, which holds the phone's uplink queue too (rsfc.tuning.downlink_round_trip).",
     &CoreCounters::downlink_flows_round_trip},
    {"rsfcd_downlink_steps_yielded_total", "counter",
     "Control steps of downloads on the gateway's round trip taken with T's ceiling halved "
     "because the phone's regulated upload delivered under 0.85 of its best second of the "
     "last 5-10 s: the download gives the upload room in the sum of queues both knobs hold "
     "(docs/DESIGN.md §4a).",
     &CoreCounters::downlink_steps_yielded},
    {"rsfcd_downlink_steps_held_total", "counter",
     "Control steps of the downlink queue regulator that were due but found a signal missing "
     "(no rate sample within its window, no queue or round-trip reading) and held the window "
     "where the last step left it; no decision is logged for them. A slow link whose delayed "
     "ACKs come further apart than the control interval holds for seconds (docs/DESIGN.md §8).",
     &CoreCounters::downlink_steps_held},
    {"rsfcd_downlink_packets_paced_total", "counter",
     "Packets to subscribers whose verdict waited for the downlink pacer (pacing.enabled): "
     "the download's data, released no faster than pacing.gain x the phone's receive rate.",
     &CoreCounters::downlink_packets_paced},
};

// The I/O shell's counters per queue.
constexpr QueueFamily<QueueCounters> kQueueFamilies[] = {
    {"rsfcd_queue_packets_received_total", "counter", "Packets received from the NFQUEUE socket.",
     &QueueCounters::packets_received},
    {"rsfcd_queue_verdicts_total", "counter", "Verdicts sent to the kernel.",
     &QueueCounters::verdicts_sent},
    {"rsfcd_queue_verdicts_with_payload_total", "counter",
     "Verdicts that carried a modified packet.", &QueueCounters::verdicts_with_payload},
    {"rsfcd_queue_batches_total", "counter", "Receive batches (wakeups that returned packets).",
     &QueueCounters::batches},
    {"rsfcd_queue_recv_errors_total", "counter",
     "Receive errors (socket errors, malformed messages).", &QueueCounters::recv_errors},
    {"rsfcd_queue_overruns_total", "counter",
     "Packets the kernel could not deliver to rsfcd (socket buffer full); with "
     "fail-open the kernel accepted them unprocessed.",
     &QueueCounters::overruns},
    {"rsfcd_queue_send_errors_total", "counter", "Verdict send failures and kernel error replies.",
     &QueueCounters::send_errors},
    {"rsfcd_queue_gso_packets_total", "counter", "GSO packets received.",
     &QueueCounters::gso_packets},
    {"rsfcd_kernel_queue_dropped_total", "counter",
     "Kernel: packets dropped because the queue was full (nfnetlink_queue).",
     &QueueCounters::kernel_queue_dropped},
    {"rsfcd_kernel_queue_user_dropped_total", "counter",
     "Kernel: packets dropped because delivery to rsfcd failed (nfnetlink_queue).",
     &QueueCounters::kernel_queue_user_dropped},
    {"rsfcd_kernel_queue_waiting", "gauge",
     "Kernel: packets waiting for a verdict now (nfnetlink_queue queue_total).",
     &QueueCounters::kernel_queue_total},
    {"rsfcd_pacing_packets_held", "gauge",
     "Downlink pacing: packets whose verdict the worker holds now (they wait in the kernel's "
     "queue).",
     &QueueCounters::packets_held},
    {"rsfcd_pacing_packets_held_total", "counter",
     "Downlink pacing: packets whose verdict waited for their release time.",
     &QueueCounters::packets_held_total},
    {"rsfcd_pacing_hold_overflow_total", "counter",
     "Downlink pacing: packets the pacer would have held while the worker held its maximum "
     "(queue.maxlen, at most 65536): they left at once, unpaced.",
     &QueueCounters::held_overflow},
};

// One sample per queue whose `source` counters exist (the core or the shell of a queue that
// is not running is left out).
template <typename Counters, size_t N>
void queue_families(Writer& w, const std::vector<QueueMetricsView>& qs,
                    const Counters* QueueMetricsView::*source,
                    const QueueFamily<Counters> (&families)[N]) {
  for (const QueueFamily<Counters>& f : families) {
    w.family(f.name, f.type, f.help);
    for (const auto& q : qs) {
      if (q.*source != nullptr) w.sample(f.name, qlabel(q.queue), ((q.*source)->*f.counter).get());
    }
  }
}

void per_direction(Writer& w, const std::vector<QueueMetricsView>& qs, const char* name,
                   const char* help, std::array<Counter, kDirections> CoreCounters::*member) {
  w.family(name, "counter", help);
  for (const auto& q : qs) {
    if (q.core == nullptr) continue;
    for (size_t d = 0; d < kDirections; ++d) {
      w.sample(name,
               qlabel(q.queue) + "," + label("direction", to_string(static_cast<Direction>(d))),
               ((*q.core).*member)[d].get());
    }
  }
}

// Packets by direction and outcome. Packets whose direction is unknown (not parsed, or not
// between a subscriber and a peer) are counted by the core without an outcome breakdown:
// their outcome is derived from the parse error counters.
void packet_families(Writer& w, const std::vector<QueueMetricsView>& qs) {
  w.family("rsfcd_packets_total", "counter",
           "Packets processed, by direction and outcome (exactly one outcome per packet).");
  for (const auto& q : qs) {
    if (q.core == nullptr) continue;
    const CoreCounters& c = *q.core;
    for (size_t d = 0; d < kDirections; ++d) {
      for (size_t o = 0; o < static_cast<size_t>(Outcome::kCount); ++o) {
        w.sample("rsfcd_packets_total",
                 qlabel(q.queue) + "," + label("direction", to_string(static_cast<Direction>(d))) +
                     "," + label("outcome", to_string(static_cast<Outcome>(o))),
                 c.packets[d][o].get());
      }
    }
    uint64_t unparsed = 0;
    for (size_t e = 1; e < c.parse_errors.size(); ++e) unparsed += c.parse_errors[e].get();
    const uint64_t unknown = c.packets_unknown_direction.get();
    w.sample("rsfcd_packets_total", qlabel(q.queue) + ",direction=\"unknown\",outcome=\"unparsed\"",
             unparsed);
    w.sample("rsfcd_packets_total",
             qlabel(q.queue) + ",direction=\"unknown\",outcome=\"not_subscriber\"",
             unknown > unparsed ? unknown - unparsed : uint64_t{0});
  }
  w.family("rsfcd_parse_errors_total", "counter",
           "Packets passed unchanged because they were not a TCP segment rsfcd may touch.");
  for (const auto& q : qs) {
    if (q.core == nullptr) continue;
    for (size_t e = 1; e < q.core->parse_errors.size(); ++e) {
      w.sample("rsfcd_parse_errors_total",
               qlabel(q.queue) + "," + label("reason", to_string(static_cast<ParseError>(e))),
               q.core->parse_errors[e].get());
    }
  }
}

// Windows lowered, and what held a clamp.
void clamp_families(Writer& w, const std::vector<QueueMetricsView>& qs) {
  per_direction(w, qs, "rsfcd_windows_rewritten_total", "ACKs whose window was lowered.",
                &CoreCounters::windows_rewritten);
  per_direction(w, qs, "rsfcd_right_edge_holds_total",
                "Clamps limited by the right edge already advertised.",
                &CoreCounters::right_edge_holds);
  per_direction(w, qs, "rsfcd_floor_holds_total", "Clamps limited by min_window_bytes.",
                &CoreCounters::floor_holds);
  per_direction(w, qs, "rsfcd_sacked_allowances_total",
                "rsfc targets raised by the bytes the ACK's sender had SACKed (a loss being "
                "repaired).",
                &CoreCounters::sacked_allowances);
}

void rsfc_state_family(Writer& w, const std::vector<QueueMetricsView>& qs) {
  static_assert(kRsfcStates == std::tuple_size_v<decltype(CoreCounters::rsfc_flows_in_state)>);
  w.family("rsfcd_rsfc_flows", "gauge", "Flows per RSFC controller state.");
  for (const auto& q : qs) {
    if (q.core == nullptr) continue;
    for (size_t s = 0; s < q.core->rsfc_flows_in_state.size(); ++s) {
      w.sample("rsfcd_rsfc_flows",
               qlabel(q.queue) + "," + label("state", to_string(static_cast<RsfcState>(s))),
               q.core->rsfc_flows_in_state[s].get());
    }
  }
}

void downlink_state_family(Writer& w, const std::vector<QueueMetricsView>& qs) {
  static_assert(kDownlinkStates ==
                std::tuple_size_v<decltype(CoreCounters::downlink_flows_in_state)>);
  w.family("rsfcd_downlink_flows", "gauge", "Flows per downlink queue regulator state.");
  for (const auto& q : qs) {
    if (q.core == nullptr) continue;
    for (size_t s = 0; s < q.core->downlink_flows_in_state.size(); ++s) {
      w.sample("rsfcd_downlink_flows",
               qlabel(q.queue) + "," + label("state", to_string(static_cast<DownlinkState>(s))),
               q.core->downlink_flows_in_state[s].get());
    }
  }
}

// One sample per queue and value of an enum-indexed array of core counters.
template <typename E, size_t N>
void labelled_family(Writer& w, const std::vector<QueueMetricsView>& qs, const char* name,
                     const char* help, const char* label_name,
                     std::array<Counter, N> CoreCounters::*member, const char* type = "counter") {
  w.family(name, type, help);
  for (const auto& q : qs) {
    if (q.core == nullptr) continue;
    for (size_t i = 0; i < N; ++i) {
      w.sample(name, qlabel(q.queue) + "," + label(label_name, to_string(static_cast<E>(i))),
               ((*q.core).*member)[i].get());
    }
  }
}

// SYNs and SYN-ACKs the engine did not take as a valid new handshake; the per-subscriber
// flow cap.
void guard_families(Writer& w, const std::vector<QueueMetricsView>& qs) {
  labelled_family<HandshakeKind>(
      w, qs, "rsfcd_handshake_ignored_total",
      "SYNs and SYN-ACKs ignored (passed untouched, flow state unchanged) because they were "
      "not a valid new handshake for their flow: a SYN-ACK not answering the SYN seen the "
      "other way or after the handshake, a SYN on an established flow inside its sender's "
      "sequence space or with another ISN during the handshake. Retransmissions with the "
      "values already seen are not counted.",
      "kind", &CoreCounters::handshake_ignored);
  labelled_family<Knob>(
      w, qs, "rsfcd_regulator_pool_full_total",
      "Flows that needed a regulator (their first payload the knob's way under a policy that "
      "runs one) when the knob's pool of flows.regulated_max was full: they pass that knob "
      "untouched for their life.",
      "knob", &CoreCounters::regulator_pool_full);
  labelled_family<CapAction>(
      w, qs, "rsfcd_flows_subscriber_cap_total",
      "New flows of a subscriber at flows.max_per_subscriber: evicted_own counts the "
      "subscriber's own closed or embryonic flows given up for them, untracked the packets "
      "passed untracked because it had only established flows.",
      "action", &CoreCounters::flows_subscriber_cap);
}

void regulator_pool_family(Writer& w, const std::vector<QueueMetricsView>& qs) {
  labelled_family<Knob>(w, qs, "rsfcd_regulator_pool_used",
                        "Regulators in use now, of the knob's pool of flows.regulated_max.", "knob",
                        &CoreCounters::regulator_pool_used, "gauge");
}

void processing_time_family(Writer& w, const std::vector<QueueMetricsView>& qs) {
  const char* h = "rsfcd_packet_processing_seconds";
  w.family(h, "histogram", "Time per packet from parse to verdict built.");
  for (const auto& q : qs) {
    if (q.io == nullptr) continue;
    const LatencyHistogram& lh = q.io->processing_time;
    const std::string ql = qlabel(q.queue);
    uint64_t cum = 0;
    for (size_t i = 0; i <= LatencyHistogram::kBoundsNs.size(); ++i) {
      cum += lh.bucket(i);
      std::string le;
      if (i < LatencyHistogram::kBoundsNs.size()) {
        char buf[32];
        auto r = std::to_chars(buf, buf + sizeof(buf),
                               static_cast<double>(LatencyHistogram::kBoundsNs[i]) / 1e9);
        le.assign(buf, r.ptr);
      } else {
        le = "+Inf";
      }
      w.sample("rsfcd_packet_processing_seconds_bucket", ql + "," + label("le", le), cum);
    }
    w.sample("rsfcd_packet_processing_seconds_sum", ql, static_cast<double>(lh.sum_ns()) / 1e9);
    // _count equals the +Inf bucket (both from the same bucket reads): consistent output
    // even while the worker keeps counting.
    w.sample("rsfcd_packet_processing_seconds_count", ql, cum);
  }
}

}  // namespace

std::string render_prometheus(const std::vector<QueueMetricsView>& qs, std::string_view version) {
  std::string out;
  out.reserve(16384);
  Writer w(out);
  w.family("rsfcd_build_info", "gauge", "Build information (value is always 1).");
  w.sample("rsfcd_build_info", label("version", version), uint64_t{1});
  packet_families(w, qs);
  clamp_families(w, qs);
  queue_families(w, qs, &QueueMetricsView::core, kFlowFamilies);
  guard_families(w, qs);
  regulator_pool_family(w, qs);
  rsfc_state_family(w, qs);
  queue_families(w, qs, &QueueMetricsView::core, kRegulatorFamilies);
  downlink_state_family(w, qs);
  queue_families(w, qs, &QueueMetricsView::core, kDownlinkFamilies);
  queue_families(w, qs, &QueueMetricsView::io, kQueueFamilies);
  processing_time_family(w, qs);
  return out;
}

}  // namespace rsfc
