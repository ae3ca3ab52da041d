#include "rsfc/core/engine.h"

#include <algorithm>
#include <limits>

#include "rsfc/core/drwa.h"
#include "rsfc/core/estimators.h"
#include "rsfc/core/flow_table.h"
#include "rsfc/core/rsfc_controller.h"
#include "rsfc/core/subscriber_table.h"
#include "rsfc/core/window.h"

namespace rsfc {

// Regulator state per flow, parallel to the flow table.
struct FlowRegulators {
  UplinkRegulator up;
  DownlinkRegulator down;
  RsfcState counted_state = RsfcState::kStartup;
  bool in_state_gauge = false;                   // counted in rsfc_flows_in_state[counted_state]
  bool counted_no_ts = false;                    // counted in flows_no_timestamps (rsfc)
  bool counted_tick = false;                     // counted in rsfc_tick_estimates
  uint32_t counted_path_rebaselines = 0;         // of up.path_rebaselines(), in the counter
  uint32_t subscriber = SubscriberTable::kNone;  // entry up is attached to
};

const char* to_string(Policy p) {
  switch (p) {
    case Policy::kOff:
      return "off";
    case Policy::kObserve:
      return "observe";
    case Policy::kStatic:
      return "static";
    case Policy::kRsfc:
      return "rsfc";
    case Policy::kDrwa:
      return "drwa";
  }
  return "?";
}

namespace {

bool in_any(const std::vector<Prefix>& nets, const IpAddr& a) {
  for (const Prefix& p : nets) {
    if (p.contains(a)) return true;
  }
  return false;
}

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// Policies that run a regulator: the enforcing ones, and observe (estimates only).
bool feeds_regulator(Policy p) {
  return p == Policy::kRsfc || p == Policy::kDrwa || p == Policy::kObserve;
}

void count(CoreCounters& c, Direction d, Outcome o) {
  c.packets[static_cast<size_t>(d)][static_cast<size_t>(o)].add();
}

// Records what a SYN or SYN-ACK says about its sender.
void learn_syn(Endpoint& e, const PacketView& v) {
  e.syn_seen = true;
  e.isn = v.seq;
  e.mss = v.opts.has_mss ? v.opts.mss : 0;
  e.wscale_option = v.opts.has_wscale;
  e.wscale_raw = v.opts.wscale;
  e.timestamps = v.opts.has_timestamps;
  e.sack_permitted = v.opts.sack_permitted;
  e.syn_window = v.window;
}

}  // namespace

Engine::Engine(uint32_t flows_max, const EngineParams& params, uint64_t hash_seed)
    : params_(params),
      flows_(std::make_unique<FlowTable>(flows_max, hash_seed)),
      subscribers_(std::make_unique<SubscriberTable>(flows_max)) {
  regs_.reserve(flows_max);
}

Engine::~Engine() = default;

void Engine::set_params(const EngineParams& params) {
  // On the uplink the regulator is the rsfc controller (config refuses drwa there).
  if (feeds_regulator(params_.uplink.policy) && !feeds_regulator(params.uplink.policy)) {
    // The controller stops running for every flow: none of them is in one of its states any
    // longer (a flow re-enters the gauge at its next step if a later reload brings rsfc or
    // observe back). One walk per such reload, never per packet.
    for (uint32_t idx = 0; idx < regs_.size(); ++idx) leave_state_gauge(idx);
  }
  params_ = params;
}

size_t Engine::active_flows() const {
  return flows_->size();
}
size_t Engine::bytes_per_flow() {
  return sizeof(Flow) + sizeof(FlowRegulators) + FlowTable::kBucketsPerFlow * sizeof(uint32_t) +
         SubscriberTable::bytes_per_entry();
}
uint32_t Engine::flows_max() const {
  return flows_->capacity();
}

void Engine::reset_flow_state(uint32_t idx) {
  if (idx >= regs_.size()) regs_.resize(idx + 1);  // grows only up to capacity (reserved)
  forget_flow(idx);
  regs_[idx] = FlowRegulators{};
}

// A flow is being removed or reset: out of the per-state gauge, and its hold on its
// subscriber's shared state released.
void Engine::forget_flow(uint32_t idx) {
  if (idx >= regs_.size()) return;
  FlowRegulators& r = regs_[idx];
  if (r.subscriber != SubscriberTable::kNone) {
    r.up.attach(nullptr);
    subscribers_->release(r.subscriber);
    r.subscriber = SubscriberTable::kNone;
    counters_.rsfc_subscribers.set(subscribers_->size());
  }
  leave_state_gauge(idx);
}

// Takes a flow out of the per-state gauge (it is being removed, or changes state).
void Engine::leave_state_gauge(uint32_t idx) {
  FlowRegulators& r = regs_[idx];
  if (r.in_state_gauge) {
    Counter& c = counters_.rsfc_flows_in_state[static_cast<size_t>(r.counted_state)];
    c.set(c.get() - 1);
    r.in_state_gauge = false;
  }
}

PacketResult Engine::process(std::span<uint8_t> pkt, Nanos now, PacketMeta meta) {
  PacketView v;
  const ParseError err = parse_packet(pkt, v);
  if (err != ParseError::kNone) {
    counters_.parse_errors[static_cast<size_t>(err)].add();
    counters_.packets_unknown_direction.add();
    return {.outcome = Outcome::kUnparsed, .modified = false};
  }

  const bool src_sub = in_any(params_.subscriber_networks, v.src);
  const bool dst_sub = in_any(params_.subscriber_networks, v.dst);
  if (src_sub == dst_sub) {
    counters_.packets_unknown_direction.add();
    return {.outcome = Outcome::kNotSubscriber, .modified = false};
  }
  const Direction dir = dst_sub ? Direction::kToSubscriber : Direction::kFromSubscriber;
  const DirectionParams& knob = dir == Direction::kToSubscriber ? params_.uplink : params_.downlink;
  const DirectionParams& other =
      dir == Direction::kToSubscriber ? params_.downlink : params_.uplink;

  if (knob.policy == Policy::kOff && other.policy == Policy::kOff) {
    count(counters_, dir, Outcome::kPassed);  // nothing to regulate: not even tracked
    return {};
  }

  FlowKey key;
  key.family = v.ip_version;
  const IpAddr& sub = dst_sub ? v.dst : v.src;
  const IpAddr& peer = dst_sub ? v.src : v.dst;
  key.sub_addr = sub.bytes;
  key.peer_addr = peer.bytes;
  key.sub_port = dst_sub ? v.dport : v.sport;
  key.peer_port = dst_sub ? v.sport : v.dport;

  const uint32_t h = flows_->hash(key);
  uint32_t idx = flows_->find(key, h);
  const bool syn_only = v.syn() && !v.ack_flag();
  if (idx == kNoFlow) {
    if (v.rst()) {
      count(counters_, dir, Outcome::kPassed);  // nothing to learn from a stray RST
      return {};
    }
    uint32_t evicted;
    idx = flows_->insert(key, h, FlowClass::kTentative, now, &evicted);
    if (evicted != kNoFlow) {
      counters_.flows_evicted.add();
      forget_flow(evicted);
    }
    reset_flow_state(idx);
    counters_.flows_created.add();
    counters_.flows_active.set(flows_->size());
    Flow& nf = flows_->at(idx);
    if (!v.syn()) {
      nf.state = FlowState::kMidstream;
      counters_.flows_unregulated.add();
    } else {
      nf.state = FlowState::kSynSeen;
      nf.sub_initiated = syn_only ? !dst_sub : dst_sub;
    }
  } else {
    flows_->touch(idx, now);
  }
  Flow& f = flows_->at(idx);
  Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  Endpoint& receiver = dir == Direction::kToSubscriber ? f.sub : f.peer;
  if (dir == Direction::kToSubscriber)
    f.bytes_to_sub += v.payload_len;
  else
    f.bytes_from_sub += v.payload_len;

  // --- Handshake and lifecycle -----------------------------------------------------
  if (v.syn()) {
    if (syn_only) {
      // A new SYN on a known tuple with another ISN: the port was reused; start over.
      if (sender.syn_seen && sender.isn != v.seq &&
          (f.state == FlowState::kEstablished || f.state == FlowState::kClosed)) {
        Flow fresh;
        fresh.key = f.key;
        fresh.created = fresh.last_seen = now;
        fresh.hash = f.hash;
        fresh.lru_prev = f.lru_prev;
        fresh.lru_next = f.lru_next;
        fresh.cls = f.cls;
        fresh.in_use = true;
        f = fresh;
        reset_flow_state(idx);
      }
      learn_syn(sender, v);
      if (f.state == FlowState::kMidstream) f.state = FlowState::kSynSeen;
      f.sub_initiated = dir == Direction::kFromSubscriber;
      flows_->set_class(idx, FlowClass::kTentative);
    } else {
      // SYN-ACK: scales are in force only if both SYNs carried the option.
      learn_syn(sender, v);
      if (receiver.syn_seen && f.state != FlowState::kMidstream) {
        const bool both = receiver.wscale_option && sender.wscale_option;
        const uint8_t s_scale = both ? effective_scale(sender.wscale_raw) : 0;
        const uint8_t r_scale = both ? effective_scale(receiver.wscale_raw) : 0;
        if (dir == Direction::kToSubscriber) {
          f.peer_scale = s_scale;
          f.sub_scale = r_scale;
        } else {
          f.sub_scale = s_scale;
          f.peer_scale = r_scale;
        }
        f.scale_known = true;
        if (f.state == FlowState::kSynSeen) f.state = FlowState::kSynAckSeen;
        // Windows in SYN segments are never scaled. The SYN-ACK offers the SYN's sender
        // [ack, ack + win); the SYN offered the SYN-ACK's sender [isn + 1, isn + 1 + win).
        receiver.right_edge = v.ack + v.window;
        receiver.edge_valid = true;
        sender.right_edge = v.seq + 1 + receiver.syn_window;
        sender.edge_valid = true;
      }
    }
  } else if (v.rst()) {
    f.state = FlowState::kClosed;
    flows_->set_class(idx, FlowClass::kClosed);
  } else {
    if (v.fin()) sender.fin_seen = true;
    if (f.state == FlowState::kSynAckSeen && v.ack_flag()) {
      f.state = FlowState::kEstablished;
      flows_->set_class(idx, FlowClass::kEstablished);
    }
    if (f.sub.fin_seen && f.peer.fin_seen && f.state != FlowState::kClosed) {
      f.state = FlowState::kClosed;
      counters_.flows_closed.add();
      flows_->set_class(idx, FlowClass::kClosed);
    }
  }

  // --- Regulators see every segment (SYNs included: handshake timing, ISN, MSS, TS) --
  FlowRegulators& regs = regs_[idx];
  const bool up_fed = feeds_regulator(params_.uplink.policy);
  const bool down_fed = feeds_regulator(params_.downlink.policy);
  if (up_fed || down_fed) {  // static/off policies skip the regulators entirely
    if (params_.uplink.policy == Policy::kRsfc && params_.rsfc.per_subscriber &&
        regs.subscriber == SubscriberTable::kNone) {
      join_subscriber(idx);
    }
    const TcpSegment seg = TcpSegment::from_view(v);
    if (dir == Direction::kFromSubscriber) {
      if (up_fed) regs.up.on_uplink_segment(now, seg, params_.rsfc);
      if (down_fed) regs.down.on_uplink_segment(now, seg, params_.drwa);
    } else {
      if (up_fed) regs.up.on_downlink_segment(now, seg, params_.rsfc);
      if (down_fed) regs.down.on_downlink_segment(now, seg, params_.drwa);
    }
  }

  // SYN, SYN-ACK and RST windows are never touched; nor is a segment without an ACK.
  if (v.syn() || v.rst() || !v.ack_flag()) {
    count(counters_, dir, Outcome::kPassed);
    return {};
  }
  if (!f.scale_known) {
    count(counters_, dir, Outcome::kUnregulated);
    return {.outcome = Outcome::kUnregulated, .modified = false};
  }

  // --- The knob ---------------------------------------------------------------------
  const uint8_t scale = dir == Direction::kToSubscriber ? f.peer_scale : f.sub_scale;
  uint64_t target = UINT64_MAX;
  DecisionRecord rec;
  bool log = false;
  // The decision log records the window this ACK leaves with.
  const auto log_decision = [&](uint16_t raw) {
    if (!log) return;
    rec.window_bytes = window_bytes(raw, scale);
    sink_->on_decision(rec);
  };
  switch (knob.policy) {
    case Policy::kOff:
      break;
    case Policy::kObserve:  // runs the estimators for the decision log, never enforces
    case Policy::kRsfc:
    case Policy::kDrwa:
      target = regulator_target(idx, dir, now, rec, log);
      break;
    case Policy::kStatic:
      target = knob.static_window_bytes;
      break;
  }

  uint16_t final_raw = v.window;
  PacketResult result{.outcome = Outcome::kPassed, .modified = false};
  const bool enforce = knob.policy != Policy::kOff && knob.policy != Policy::kObserve;
  if (enforce && target != UINT64_MAX) {
    if (meta.truncated) {
      log_decision(v.window);
      count(counters_, dir, Outcome::kTruncatedCopy);
      return {.outcome = Outcome::kTruncatedCopy, .modified = false};
    }
    const ClampResult c = clamp_window({.raw_window = v.window,
                                        .scale = scale,
                                        .ack = v.ack,
                                        .edge_valid = receiver.edge_valid,
                                        .edge = receiver.right_edge,
                                        .target_bytes = target,
                                        .min_window_bytes = params_.min_window_bytes});
    const size_t d = static_cast<size_t>(dir);
    if (c.limit == ClampLimit::kRightEdge) counters_.right_edge_holds[d].add();
    if (c.limit == ClampLimit::kFloor) counters_.floor_holds[d].add();
    if (c.changed()) {
      set_tcp_window(pkt, v, c.raw_window, meta.checksum);
      if (meta.checksum == ChecksumState::kNotReady) counters_.checksum_full.add();
      counters_.windows_rewritten[d].add();
      if (knob.policy == Policy::kRsfc) counters_.rsfc_windows_applied.add();
      if (knob.policy == Policy::kDrwa) counters_.drwa_windows_applied.add();
      final_raw = c.raw_window;
      result = {.outcome = Outcome::kRewritten, .modified = true};
    }
  }
  log_decision(final_raw);
  const uint32_t edge = right_edge(v.ack, final_raw, scale);
  if (!receiver.edge_valid || seq_gt(edge, receiver.right_edge)) {
    receiver.right_edge = edge;
    receiver.edge_valid = true;
  }
  if (dir == Direction::kToSubscriber && up_fed) {
    regs.up.on_window_forwarded(now, edge, params_.rsfc);
  }
  count(counters_, dir, result.outcome);
  return result;
}

// Attaches the flow's uplink regulator to its subscriber's shared state (SubscriberUplink):
// the regulated uploads of one address fill one uplink buffer.
void Engine::join_subscriber(uint32_t idx) {
  FlowRegulators& r = regs_[idx];
  const Flow& f = flows_->at(idx);
  FlowKey k;  // the subscriber address alone, through the flow table's keyed hash
  k.family = f.key.family;
  k.sub_addr = f.key.sub_addr;
  IpAddr a;
  a.family = f.key.family;
  a.bytes = f.key.sub_addr;
  r.subscriber = subscribers_->acquire(a, flows_->hash(k));
  if (r.subscriber == SubscriberTable::kNone) return;  // cannot happen: one entry per flow
  if (subscribers_->refs(r.subscriber) == 1) counters_.rsfc_subscribers_created.add();
  r.up.attach(&subscribers_->at(r.subscriber));
  counters_.rsfc_subscribers.set(subscribers_->size());
}

uint64_t Engine::regulator_target(uint32_t idx, Direction dir, Nanos now, DecisionRecord& rec,
                                  bool& log) {
  FlowRegulators& r = regs_[idx];
  const Flow& f = flows_->at(idx);
  WindowDecision d;
  if (dir == Direction::kToSubscriber) {
    d = r.up.target_window(now, params_.rsfc);
    const UplinkRegulator& u = r.up;
    // Per-state gauge and once-per-flow health counters.
    if (!r.in_state_gauge || r.counted_state != u.state()) {
      leave_state_gauge(idx);
      r.counted_state = u.state();
      Counter& c = counters_.rsfc_flows_in_state[static_cast<size_t>(u.state())];
      c.set(c.get() + 1);
      r.in_state_gauge = true;
    }
    if (u.path_rebaselines() != r.counted_path_rebaselines) {
      counters_.rsfc_path_rebaselines.add(u.path_rebaselines() - r.counted_path_rebaselines);
      r.counted_path_rebaselines = u.path_rebaselines();
    }
    if (!r.counted_tick && u.tick_estimated()) {
      r.counted_tick = true;
      counters_.rsfc_tick_estimates.add();
    }
    // Regulated: rsfc enforces the clamp (observe only estimates; static needs no timestamps
    // and never runs this controller).
    if (!r.counted_no_ts && params_.uplink.policy == Policy::kRsfc && !u.timestamps() &&
        d.window != kNoClamp) {
      r.counted_no_ts = true;
      counters_.flows_no_timestamps.add();
    }
    if (d.stepped && sink_) {
      rec.knob = "uplink";
      rec.state = u.state_name();
      rec.tick_ms = u.tick_ms();
      rec.t_buff_ms = u.t_buff() ? static_cast<double>(*u.t_buff()) / 1e6 : kUnknown;
      rec.rate_bps = u.rate() * 8;  // bytes/s -> bits/s
      rec.rtt_min_ms = u.rtt_min() ? static_cast<double>(*u.rtt_min()) / 1e6 : kUnknown;
      rec.rtt_ms = u.rtt_used() ? static_cast<double>(*u.rtt_used()) / 1e6 : kUnknown;
      rec.timestamps = u.timestamps();
    }
  } else {
    d = r.down.target_window(now, params_.drwa);
    const DownlinkRegulator& dr = r.down;
    if (d.stepped && sink_) {
      rec.knob = "downlink";
      rec.state = "drwa";
      rec.rate_bps = dr.rate() * 8;
      rec.rtt_min_ms = dr.rtt_min() ? static_cast<double>(*dr.rtt_min()) / 1e6 : kUnknown;
      rec.rtt_ms = dr.rtt_est() ? static_cast<double>(*dr.rtt_est()) / 1e6 : kUnknown;
      rec.timestamps = dr.timestamps();
    }
  }
  const uint64_t target = d.window == kNoClamp ? UINT64_MAX : d.window;
  if (d.stepped && sink_) {
    rec.time = now;
    IpAddr sub, peer;
    sub.family = peer.family = f.key.family;
    sub.bytes = f.key.sub_addr;
    peer.bytes = f.key.peer_addr;
    rec.subscriber = sub;
    rec.peer = peer;
    rec.subscriber_port = f.key.sub_port;
    rec.peer_port = f.key.peer_port;
    rec.target_bytes =
        target == UINT64_MAX ? 0 : std::max<uint64_t>(target, params_.min_window_bytes);
    rec.enforced = (dir == Direction::kToSubscriber ? params_.uplink : params_.downlink).policy !=
                   Policy::kObserve;
    log = true;  // process() adds the window advertised and emits it
  }
  return target;
}

void Engine::expire(Nanos now) {
  auto drop = [this](uint32_t idx) {
    forget_flow(idx);
    counters_.flows_expired.add();
  };
  flows_->expire_class(FlowClass::kClosed, now - params_.closed_timeout, drop);
  flows_->expire_class(FlowClass::kTentative, now - params_.embryonic_timeout, drop);
  flows_->expire_class(FlowClass::kEstablished, now - params_.idle_timeout, drop);
  counters_.flows_active.set(flows_->size());
}

}  // namespace rsfc
