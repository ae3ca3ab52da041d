#include "rsfc/core/engine.h"

#include <algorithm>
#include <limits>
#include <variant>

#include "rsfc/core/downlink_regulator.h"
#include "rsfc/core/drwa.h"
#include "rsfc/core/estimators.h"
#include "rsfc/core/flow_table.h"
#include "rsfc/core/rsfc_controller.h"
#include "rsfc/core/slot_pool.h"
#include "rsfc/core/subscriber_table.h"
#include "rsfc/core/window.h"

namespace rsfc {

// Regulators are per flow, but only flows a knob steers need one: they live in one pool per
// knob (RegulatorPools, flows.regulated_max slots each), and a flow refers to its slots by
// index (Flow::up_slot, down_slot). A tracked flow costs its entry alone (bytes_per_flow()).

// The uplink knob's regulator (policies rsfc and observe), from the flow's first payload from
// the phone (uplink_slot()), and what the engine has counted of it.
struct UplinkSlot {
  UplinkRegulator up;
  RsfcState counted_state = RsfcState::kStartup;
  bool in_state_gauge = false;                   // counted in rsfc_flows_in_state[counted_state]
  bool counted_no_ts = false;                    // counted in flows_no_timestamps (rsfc)
  bool counted_tick = false;                     // counted in rsfc_tick_estimates
  uint32_t counted_path_rebaselines = 0;         // of up.path_rebaselines(), in the counter
  uint32_t subscriber = SubscriberTable::kNone;  // entry up is attached to
};

// The downlink knob's regulator: DRWA (policies drwa and observe) or the downlink queue
// regulator (rsfc), from the flow's first payload to the phone under one of them
// (feed_downlink()). One slot: a reload that changes the kind starts a fresh regulator of the
// new kind in it.
struct DownlinkSlot {
  std::variant<std::monostate, DownlinkRegulator, DownlinkQueueRegulator> down;
  DownlinkState counted_down_state = DownlinkState::kStartup;
  bool in_down_gauge = false;       // counted in downlink_flows_in_state[counted_down_state]
  bool counted_down_no_ts = false;  // counted in downlink_flows_no_timestamps
  bool counted_down_rt = false;     // counted in downlink_flows_round_trip
};

struct RegulatorPools {
  RegulatorPools(uint32_t n, bool pacing) : up(n), down(n), pacers(pacing ? n : 0) {}
  SlotPool<UplinkSlot> up;
  SlotPool<DownlinkSlot> down;
  // Downlink pacing's state, one per downlink slot (same index), reserved only when the
  // engine starts with pacing.enabled: a pacer per regulated flow would cost every gateway
  // 144 bytes per flows.regulated_max.
  std::vector<DownlinkPacer> pacers;
};
static_assert(SlotPool<UplinkSlot>::kNone == kNoSlot);

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

// Whether the packet's bytes may be rewritten: not a copy the kernel truncated (the verdict
// would return it cut short), but a replayed header-only record (its bytes go nowhere).
bool may_modify(PacketMeta meta) {
  return !meta.truncated || meta.replay;
}

// The checksum rule for a rewrite: a replayed header-only record has no payload to recompute
// a not-ready checksum over, so it is updated incrementally (the replay checks no checksum).
ChecksumState checksum_state(PacketMeta meta) {
  return meta.truncated ? ChecksumState::kComplete : meta.checksum;
}

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

// Policies whose target is written into the ACK (observe and off never touch it).
bool enforces(Policy p) {
  return p == Policy::kStatic || p == Policy::kRsfc || p == Policy::kDrwa;
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

// A SYN-ACK after its SYN: the window scales are in force (only if both SYNs carried the
// option), and each side's first right edge is known.
void learn_syn_ack(Flow& f, const PacketView& v, Direction dir) {
  Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  Endpoint& receiver = dir == Direction::kToSubscriber ? f.sub : f.peer;
  if (!receiver.syn_seen || f.state == FlowState::kMidstream) return;
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
  sender.ack_sent = v.ack;
  receiver.ack_sent = v.seq + 1;  // what it acknowledges once it takes the SYN-ACK
}

// What the uplink controller and DRWA tell the decision log.
void describe_uplink(DecisionRecord& rec, const UplinkRegulator& u) {
  rec.knob = "uplink";
  rec.state = u.state_name();
  rec.tick_ms = u.tick_ms();
  rec.t_buff_ms = u.t_buff() ? static_cast<double>(*u.t_buff()) / 1e6 : kUnknown;
  rec.rate_bps = u.rate() * 8;  // bytes/s -> bits/s
  rec.rtt_min_ms = u.rtt_min() ? static_cast<double>(*u.rtt_min()) / 1e6 : kUnknown;
  rec.rtt_ms = u.rtt_used() ? static_cast<double>(*u.rtt_used()) / 1e6 : kUnknown;
  rec.has_threshold = true;
  rec.threshold_ms = u.threshold() > 0 ? static_cast<double>(u.threshold()) / 1e6 : kUnknown;
  const std::optional<double> idle = u.idle_fraction();
  rec.has_idle = idle.has_value();
  rec.idle_pct = idle ? *idle * 100 : kUnknown;
  rec.timestamps = u.timestamps();
}

void describe_downlink(DecisionRecord& rec, const DownlinkRegulator& dr) {
  rec.knob = "downlink";
  rec.state = "drwa";
  rec.rate_bps = dr.rate() * 8;
  rec.rtt_min_ms = dr.rtt_min() ? static_cast<double>(*dr.rtt_min()) / 1e6 : kUnknown;
  rec.rtt_ms = dr.rtt_est() ? static_cast<double>(*dr.rtt_est()) / 1e6 : kUnknown;
  rec.timestamps = dr.timestamps();
}

double ms_or_unknown(std::optional<Nanos> d) {
  return d ? static_cast<double>(*d) / 1e6 : kUnknown;
}

// The downlink queue regulator: t_buff_ms carries q_up (the ACKs' wait in the uplink
// buffer), q_down_ms the downlink queue it regulates.
void describe_downlink(DecisionRecord& rec, const DownlinkQueueRegulator& q) {
  rec.knob = "downlink";
  rec.state = q.state_name();
  rec.tick_ms = q.tick_ms();
  rec.t_buff_ms = ms_or_unknown(q.q_up());
  rec.rate_bps = q.rate() * 8;  // bytes/s -> bits/s
  rec.rtt_min_ms = ms_or_unknown(q.rtt_min());
  rec.rtt_ms = ms_or_unknown(q.rtt_used());
  rec.has_threshold = true;
  rec.threshold_ms = q.threshold() > 0 ? static_cast<double>(q.threshold()) / 1e6 : kUnknown;
  rec.timestamps = q.timestamps();
  rec.has_q_down = true;
  rec.q_down_ms = ms_or_unknown(q.q_down());
}

// What the downlink knob's regulator tells the decision log.
void describe_regulator(DecisionRecord& rec, const DownlinkSlot& s) {
  if (const auto* q = std::get_if<DownlinkQueueRegulator>(&s.down)) {
    describe_downlink(rec, *q);
  } else if (const auto* d = std::get_if<DownlinkRegulator>(&s.down)) {
    describe_downlink(rec, *d);
  }
}

// Keeps when a handshake segment passed (ns after the flow's start) and its TSval, for
// replay_handshake(); a time that does not fit in 32 bits drops the record.
void note_segment(Flow& f, uint32_t& at, uint32_t& tsval, const PacketView& v, Nanos now) {
  const Nanos dt = now - f.created;
  if (dt < 0 || dt > Nanos{UINT32_MAX}) f.hs.kept = false;
  at = static_cast<uint32_t>(dt);
  tsval = v.opts.has_timestamps ? v.opts.tsval : 0;
}

// Plays the flow's handshake (its HandshakeRecord and endpoints) to a regulator started after
// it, as the segments came: the opener's SYN (twice when it was retransmitted, so that the
// regulator leaves its half out as it would have: Karn), the SYN-ACK (likewise), the opener's
// ACK of it. Nothing when the opener's SYN was not seen, or the record was dropped: the
// regulator then starts as on a flow first seen mid-stream.
template <typename Regulator, typename Params>
void replay_handshake(const Flow& f, Regulator& reg, const Params& p) {
  const HandshakeRecord& h = f.hs;
  if (!h.kept || h.syns == 0) return;
  const Endpoint& opener = f.sub_initiated ? f.sub : f.peer;
  const Endpoint& answerer = f.sub_initiated ? f.peer : f.sub;
  auto feed = [&](uint32_t at, bool from_opener, const TcpSegment& s) {
    if (from_opener == f.sub_initiated) {
      reg.on_uplink_segment(f.created + at, s, p);
    } else {
      reg.on_downlink_segment(f.created + at, s, p);
    }
  };
  const TcpSegment syn{.seq = opener.isn,
                       .flags = tcpflag::kSyn,
                       .has_ts = opener.timestamps,
                       .tsval = h.syn_tsval,
                       .mss_option = opener.mss};
  for (int i = 0; i < h.syns; ++i) feed(h.syn_at, true, syn);
  const TcpSegment synack{.seq = answerer.isn,
                          .ack = opener.isn + 1,
                          .flags = tcpflag::kSyn | tcpflag::kAck,
                          .has_ts = answerer.timestamps,
                          .tsval = h.synack_tsval,
                          .tsecr = h.syn_tsval,
                          .mss_option = answerer.mss};
  for (int i = 0; i < h.synacks; ++i) feed(h.synack_at, false, synack);
  if (!h.ack_seen) return;
  const TcpSegment ack{.seq = opener.isn + 1,
                       .ack = answerer.isn + 1,
                       .flags = tcpflag::kAck,
                       .has_ts = h.ack_ts,
                       .tsval = h.ack_tsval,
                       .tsecr = h.synack_tsval};
  feed(h.ack_at, true, ack);
}

}  // namespace

Engine::Engine(uint32_t flows_max, const EngineParams& params, uint64_t hash_seed,
               uint32_t regulated_max)
    : params_(params),
      down_params_(downlink_step_params_from(params.rsfc)),
      flows_(std::make_unique<FlowTable>(flows_max, hash_seed)),
      // One entry per tracked flow at most, plus the one of a flow being added to a full table;
      // a shared uplink state per uplink regulator at most.
      subscribers_(std::make_unique<SubscriberTable>(
          flows_max + 1, std::max(1u, std::min(regulated_max, flows_max)))),
      regs_(std::make_unique<RegulatorPools>(std::min(regulated_max, flows_max),
                                             params.pacing.enabled)) {}

bool Engine::pacing_reserved() const {
  return !regs_->pacers.empty();
}

size_t Engine::bytes_per_paced_flow() {
  return sizeof(DownlinkPacer);
}

Engine::~Engine() = default;

void Engine::set_params(const EngineParams& params) {
  // On the uplink the regulator is the rsfc controller (config refuses drwa there).
  if (feeds_regulator(params_.uplink.policy) && !feeds_regulator(params.uplink.policy)) {
    // The controller stops running for every flow: none of them is in one of its states any
    // longer (a flow re-enters the gauge at its next step if a later reload brings rsfc or
    // observe back). One walk per such reload, never per packet.
    regs_->up.for_each_taken([this](UplinkSlot& s) { leave_state_gauge(s); });
  }
  if (params_.downlink.policy == Policy::kRsfc && params.downlink.policy != Policy::kRsfc) {
    // Likewise for the downlink queue regulator. Its flows keep their regulators until a
    // segment under another kind (drwa, observe) replaces them; under off or static they
    // rest, and rsfc again continues them.
    regs_->down.for_each_taken([this](DownlinkSlot& s) { leave_down_gauge(s); });
  }
  params_ = params;
  down_params_ = downlink_step_params_from(params_.rsfc);
}

size_t Engine::active_flows() const {
  return flows_->size();
}
size_t Engine::bytes_per_flow() {
  return FlowTable::bytes_per_flow() + SubscriberTable::bytes_per_entry();
}
size_t Engine::bytes_per_regulated_flow() {
  return SlotPool<UplinkSlot>::bytes_per_slot() + SlotPool<DownlinkSlot>::bytes_per_slot() +
         SubscriberTable::bytes_per_uplink();
}
uint32_t Engine::flows_max() const {
  return flows_->capacity();
}
uint32_t Engine::regulated_max() const {
  return regs_->up.capacity();
}

// The flow's regulators go (it starts over, or leaves); call before its entry is reset.
void Engine::reset_flow_state(uint32_t idx) {
  forget_flow(idx);
}

// An adopted flow (adoption.cpp) started behind a queue its regulators cannot see: the one it
// has now learns it, and one taken later (uplink_slot) learns it when it is taken.
void Engine::regulators_adopted(uint32_t idx) {
  Flow& f = flows_->at(idx);
  f.adopted = true;
  if (f.up_slot != kNoSlot) regs_->up.at(f.up_slot).up.on_adopted();
}

// A flow is being removed or reset: out of the per-state gauges, its hold on its subscriber's
// shared state released, its regulators' slots back in their pools.
void Engine::forget_flow(uint32_t idx) {
  Flow& f = flows_->at(idx);
  if (f.up_slot != kNoSlot) {
    UplinkSlot& s = regs_->up.at(f.up_slot);
    if (s.subscriber != SubscriberTable::kNone) {
      s.up.attach(nullptr);
      subscribers_->release(s.subscriber);
      s.subscriber = SubscriberTable::kNone;
      counters_.rsfc_subscribers.set(subscribers_->attached());
    }
    leave_state_gauge(s);
    regs_->up.release(f.up_slot);
    f.up_slot = kNoSlot;
    counters_.regulator_pool_used[static_cast<size_t>(Knob::kUplink)].set(regs_->up.used());
  }
  if (f.down_slot != kNoSlot) {
    leave_down_gauge(regs_->down.at(f.down_slot));
    regs_->down.release(f.down_slot);
    f.down_slot = kNoSlot;
    counters_.regulator_pool_used[static_cast<size_t>(Knob::kDownlink)].set(regs_->down.used());
  }
}

// Takes a flow out of the per-state gauge (it is being removed, or changes state).
void Engine::leave_state_gauge(UplinkSlot& r) {
  if (r.in_state_gauge) {
    Counter& c = counters_.rsfc_flows_in_state[static_cast<size_t>(r.counted_state)];
    c.set(c.get() - 1);
    r.in_state_gauge = false;
  }
}

// The same for the downlink queue regulator's per-state gauge.
void Engine::leave_down_gauge(DownlinkSlot& r) {
  if (r.in_down_gauge) {
    Counter& c = counters_.downlink_flows_in_state[static_cast<size_t>(r.counted_down_state)];
    c.set(c.get() - 1);
    r.in_down_gauge = false;
  }
}

// A packet goes through four stages: classify (parse, direction, flow), track the TCP
// lifecycle, feed the regulators, apply the knob. Exactly one outcome is counted per packet.
// The stages are always inlined here (engine.h): separate for reading, one function to run.
// PacketResult is returned in memory: its fields are stored as the stages learn them (in
// two registers they would be packed byte by byte, ~25 instructions per packet).
static_assert(sizeof(PacketResult) > 16);
PacketResult Engine::process(std::span<uint8_t> pkt, Nanos now, PacketMeta meta) {
  PacketView v;
  PacketResult r;
  if (!classify(pkt, meta.truncated, v, r)) return r;  // direction unknown: counted as such
  const bool tracked = params_.uplink.policy != Policy::kOff ||
                       params_.downlink.policy != Policy::kOff;  // else nothing to regulate
  const uint32_t idx = tracked ? flow_of(v, r, now) : kNoFlow;
  // kNoFlow: not tracked, or a stray RST (nothing to learn from it). A SYN or SYN-ACK the
  // flow does not take stops at the lifecycle: passed untouched, nothing fed.
  if (idx != kNoFlow && track_lifecycle(idx, v, now, r)) {
    feed_regulators(idx, v, r.direction, now);
    apply_knob(pkt, v, idx, now, meta, r);
    if (r.direction == Direction::kToSubscriber && pacing_on()) pace(idx, v, now, r);
  }
  count(counters_, r.direction, r.outcome);
  return r;
}

// --- Classify ----------------------------------------------------------------------------

// Parses the packet and tells its direction. False when that is all (`r` says why): not a
// TCP segment rsfcd may touch, or not between a subscriber and a peer.
[[gnu::always_inline]] inline bool Engine::classify(std::span<const uint8_t> pkt, bool cut,
                                                    PacketView& v, PacketResult& r) {
  // A cut packet (the kernel's or a capture's copy of its first bytes) is read from its
  // headers: its lengths from the IP header; apply_knob never writes to it.
  const ParseError err = parse_packet(pkt, v, cut);
  if (err != ParseError::kNone) {
    counters_.parse_errors[static_cast<size_t>(err)].add();
    counters_.packets_unknown_direction.add();
    r.outcome = Outcome::kUnparsed;
    return false;
  }
  const bool src_sub = in_any(params_.subscriber_networks, v.src);
  const bool dst_sub = in_any(params_.subscriber_networks, v.dst);
  if (src_sub == dst_sub) {
    counters_.packets_unknown_direction.add();
    r.outcome = Outcome::kNotSubscriber;
    return false;
  }
  r.direction = dst_sub ? Direction::kToSubscriber : Direction::kFromSubscriber;
  return true;
}

// The packet's flow, added on its first packet; kNoFlow for a RST of no known flow, or a
// new flow of a subscriber at its cap (add_flow).
[[gnu::always_inline]] inline uint32_t Engine::flow_of(const PacketView& v, PacketResult& r,
                                                       Nanos now) {
  const bool to_sub = r.direction == Direction::kToSubscriber;
  FlowKey key;
  key.family = v.ip_version;
  key.sub_addr = (to_sub ? v.dst : v.src).bytes;
  key.peer_addr = (to_sub ? v.src : v.dst).bytes;
  key.sub_port = to_sub ? v.dport : v.sport;
  key.peer_port = to_sub ? v.sport : v.dport;
  const uint32_t h = flows_->hash(key);
  r.flow = flows_->find(key, h);
  if (r.flow != kNoFlow) {
    flows_->touch(r.flow, now);
  } else if (!v.rst()) {
    r.flow = add_flow(key, h, v, r.direction, now);
    r.new_flow = r.flow != kNoFlow;
    r.adopt_request = r.new_flow && params_.adopt_from_conntrack &&
                      flows_->at(r.flow).state == FlowState::kMidstream;
  }
  return r.flow;
}

// A new flow, or kNoFlow when its subscriber is at its cap with established flows only
// (room_for). When the table is full the flow takes the place of the least valuable one
// (FlowTable::victim: its subscriber's own if it has one of the lowest class). Without a
// SYN its handshake is not seen: the window scales stay unknown and it is never regulated.
uint32_t Engine::add_flow(const FlowKey& key, uint32_t h, const PacketView& v, Direction dir,
                          Nanos now) {
  IpAddr a;
  a.family = key.family;
  a.bytes = key.sub_addr;
  const uint32_t sub = subscribers_->add_flow(a, subscriber_hash(key));  // never full
  if (!room_for(sub)) {
    subscribers_->remove_flow(sub);
    counters_.flows_subscriber_cap[static_cast<size_t>(CapAction::kUntracked)].add();
    return kNoFlow;
  }
  if (flows_->size() == flows_->capacity()) {
    drop_flow(flows_->victim(sub));
    counters_.flows_evicted.add();
    counters_.flows_table_full.add();
  }
  uint32_t evicted;  // none: room was made above
  const uint32_t idx = flows_->insert(key, h, FlowClass::kTentative, now, &evicted, sub);
  reset_flow_state(idx);
  counters_.flows_created.add();
  counters_.flows_active.set(flows_->size());
  Flow& f = flows_->at(idx);
  if (!v.syn()) {
    f.state = FlowState::kMidstream;
    counters_.flows_unregulated.add();
  } else {
    const bool to_sub = dir == Direction::kToSubscriber;
    f.state = FlowState::kSynSeen;
    f.sub_initiated = v.ack_flag() ? to_sub : !to_sub;  // a SYN-ACK goes to the initiator
  }
  return idx;
}

// The per-subscriber flow cap (flows.max_per_subscriber), counting the flow being added: a
// subscriber over it gives up its own least recently seen closed, else embryonic flow;
// with only established flows it gets no room (false). Never another subscriber's flow.
bool Engine::room_for(uint32_t sub) {
  const uint32_t cap = params_.max_flows_per_subscriber;
  if (cap == 0 || subscribers_->flows(sub) <= cap) return true;
  const uint32_t own = flows_->oldest_owned(sub);
  if (own == kNoFlow) return false;
  drop_flow(own);
  counters_.flows_evicted.add();
  counters_.flows_subscriber_cap[static_cast<size_t>(CapAction::kEvictedOwn)].add();
  return true;
}

// Removes a flow from the table, with everything the engine keeps for it.
void Engine::drop_flow(uint32_t idx) {
  release_flow(idx);
  flows_->remove(idx);
}

// A flow leaves: its regulator state and its hold on its subscriber's entry.
void Engine::release_flow(uint32_t idx) {
  forget_flow(idx);
  subscribers_->remove_flow(flows_->at(idx).owner);
}

// The subscriber address alone (family and address) through the flow table's keyed hash.
uint32_t Engine::subscriber_hash(const FlowKey& key) const {
  FlowKey k;
  k.family = key.family;
  k.sub_addr = key.sub_addr;
  return flows_->hash(k);
}

// --- Track the TCP lifecycle -------------------------------------------------------------

// Handshake (ISNs, options, window scales, first right edges), FIN and RST; the flow's
// class follows (timeouts: expire()). False when the packet is a SYN or SYN-ACK the flow
// does not take (on_syn, on_syn_ack): it is passed untouched and nothing learns from it.
[[gnu::always_inline]] inline bool Engine::track_lifecycle(uint32_t idx, const PacketView& v,
                                                           Nanos now, PacketResult& r) {
  const Direction dir = r.direction;
  Flow& f = flows_->at(idx);
  Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  if (v.syn() && !v.ack_flag()) {
    if (!on_syn(idx, v, dir, now, r)) return false;
  } else if (v.syn()) {
    if (!on_syn_ack(idx, v, dir, r.new_flow, now)) return false;
  } else if (v.rst()) {
    if (!rst_acceptable(f, v, dir)) {
      counters_.rst_ignored.add();
      return false;
    }
    f.state = FlowState::kClosed;
    flows_->set_class(idx, FlowClass::kClosed);
  } else {
    if (v.fin()) sender.fin_seen = true;
    note_handshake_ack(f, v, dir, now);
    if (v.ack_flag() && f.scale_known && seq_gt(v.ack, sender.ack_sent)) sender.ack_sent = v.ack;
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
  if (dir == Direction::kToSubscriber)
    f.bytes_to_sub += v.payload_len;
  else
    f.bytes_from_sub += v.payload_len;
  return true;
}

// A SYN (without ACK). It (re-)learns its sender only as a valid new handshake:
// - the flow's first packet, or a SYN on a flow first seen mid-stream (nothing known yet);
// - during the handshake, the first SYN of the other side (simultaneous open) or a
//   retransmission with the same ISN (its options may differ: stacks drop them on retries);
// - as a reuse of the ports, when the flow starts over in its slot (r.new_flow): on a closed
//   flow (FIN both ways or RST) any other ISN; on an established flow only an ISN beyond the
//   sender's old sequence space, after the right edge last advertised to it (Linux takes a
//   SYN in TIME-WAIT on the same condition, tcp_timewait_state_process). A SYN inside that
//   space is what RFC 5961 4.2 answers with a challenge ACK: a genuine endpoint that reused
//   the ports then sends a RST, which closes the flow here, and its next SYN restarts it.
//   A blind sender can still restart a flow with a far ISN, but that only leaves the flow
//   unregulated: its scales come back only with a SYN-ACK answering that ISN (on_syn_ack).
// Everything else is ignored; counted, unless it repeats the ISN already learned.
bool Engine::on_syn(uint32_t idx, const PacketView& v, Direction dir, Nanos now, PacketResult& r) {
  Flow& f = flows_->at(idx);
  Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  const bool repeat = sender.syn_seen && sender.isn == v.seq;
  const bool open = f.state == FlowState::kSynSeen || f.state == FlowState::kSynAckSeen;
  // An adopted flow (adopt()) knows no edge until an ACK has gone its sender's way: any new
  // ISN counts as beyond it.
  const bool beyond = !sender.edge_valid || seq_gt(v.seq, sender.right_edge);
  const bool restart =
      !repeat && (f.state == FlowState::kClosed || (f.state == FlowState::kEstablished && beyond));
  const bool takes = r.new_flow || restart || f.state == FlowState::kMidstream ||
                     (open && (!sender.syn_seen || repeat));
  if (!takes) {
    if (!repeat) counters_.handshake_ignored[static_cast<size_t>(HandshakeKind::kSyn)].add();
    return false;
  }
  if (restart) {
    reset_flow_state(idx);  // first: the entry's restart forgets its regulator slots
    flows_->restart(idx, now);
    r.new_flow = true;
  }
  learn_syn(sender, v);
  if (f.state == FlowState::kMidstream || restart) {
    f.state = FlowState::kSynSeen;
    f.sub_initiated = dir == Direction::kFromSubscriber;
  }
  if ((dir == Direction::kFromSubscriber) == f.sub_initiated) {  // the opener's (not a
    note_segment(f, f.hs.syn_at, f.hs.syn_tsval, v, now);        // simultaneous open's)
    if (f.hs.syns < 2) ++f.hs.syns;
  }
  flows_->set_class(idx, FlowClass::kTentative);
  return true;
}

// The opener's ACK of the SYN-ACK, for replay_handshake(). One that carries payload is not
// kept: it is the first payload its way, which starts that knob's regulator (and is fed to it).
void Engine::note_handshake_ack(Flow& f, const PacketView& v, Direction dir, Nanos now) {
  const Endpoint& answerer = f.sub_initiated ? f.peer : f.sub;
  if (f.hs.ack_seen || f.hs.synacks == 0 || !v.ack_flag() || v.payload_len > 0 ||
      (dir == Direction::kFromSubscriber) != f.sub_initiated || v.ack != answerer.isn + 1) {
    return;
  }
  note_segment(f, f.hs.ack_at, f.hs.ack_tsval, v, now);
  f.hs.ack_seen = true;
  f.hs.ack_ts = v.opts.has_timestamps;
}

// A SYN-ACK re-learns its sender, and sets the window scales, only as the answer to the SYN
// seen the other way (ack == that SYN's ISN + 1) while the flow is in its handshake (SYN or
// SYN-ACK seen, not yet ACKed). The flow's first packet is learned from as before (its
// handshake was not seen: nothing is in force). Anything else is ignored and counted, but a
// retransmission with the ISN and ACK already seen (the final ACK was lost) only ignored.
bool Engine::on_syn_ack(uint32_t idx, const PacketView& v, Direction dir, bool first, Nanos now) {
  Flow& f = flows_->at(idx);
  Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  const Endpoint& receiver = dir == Direction::kToSubscriber ? f.sub : f.peer;
  const bool answers = receiver.syn_seen && v.ack == receiver.isn + 1;
  const bool open = f.state == FlowState::kSynSeen || f.state == FlowState::kSynAckSeen;
  if (first || (open && answers)) {
    learn_syn(sender, v);
    learn_syn_ack(f, v, dir);
    // The first answer is timed (a retransmission only counted, as the regulators do).
    if (f.hs.synacks == 0) note_segment(f, f.hs.synack_at, f.hs.synack_tsval, v, now);
    if (f.hs.synacks < 2) ++f.hs.synacks;
    return true;
  }
  const bool repeat = sender.syn_seen && sender.isn == v.seq && (answers || !receiver.syn_seen);
  if (!repeat) counters_.handshake_ignored[static_cast<size_t>(HandshakeKind::kSynAck)].add();
  return false;
}

// Whether a RST may close its flow (RFC 5961 3, RFC 793 for SYN-SENT), so that a blind
// spoofed RST cannot end the regulation of a live flow:
// - once the window scales are known, its sequence number must lie in what its receiver
//   accepts: from the highest ACK the receiver sent (its RCV.NXT is at least that) to the
//   right edge advertised to the RST's sender. The receiver drops a RST outside that range
//   itself, so ignoring it here loses nothing. Inclusive at the edge: a zero window leaves
//   only seq == ack, which RFC 793 accepts;
// - while only SYNs were seen, a RST answering a SYN must acknowledge it (ack == ISN + 1),
//   and the SYN's sender's own RST carries ISN + 1;
// - without a known window (a flow seen mid-stream, older than the daemon) nothing is
//   regulated and nothing bounds the RST: it is accepted, as a stray RST is passed anyway;
//   a closed flow has nothing left to close.
bool Engine::rst_acceptable(const Flow& f, const PacketView& v, Direction dir) const {
  const Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  const Endpoint& receiver = dir == Direction::kToSubscriber ? f.sub : f.peer;
  if (f.state == FlowState::kClosed || f.state == FlowState::kMidstream) return true;
  if (sender.edge_valid) {  // set with both ends' ack_sent (learn_syn_ack)
    return !seq_lt(v.seq, receiver.ack_sent) && !seq_gt(v.seq, sender.right_edge);
  }
  if (f.state != FlowState::kSynSeen) return true;  // no window known yet
  const Endpoint& initiator = f.sub_initiated ? f.sub : f.peer;
  if (!initiator.syn_seen) return true;  // first seen at its SYN-ACK: never regulated
  const bool answers = v.ack_flag() && receiver.syn_seen && v.ack == receiver.isn + 1;
  const bool own = sender.syn_seen && v.seq == sender.isn + 1;
  return answers || own;
}

// --- Feed the regulators -----------------------------------------------------------------

// The regulators see every segment (SYNs included: handshake timing, ISN, MSS, TS);
// static and off policies skip them entirely.
[[gnu::always_inline]] inline void Engine::feed_regulators(uint32_t idx, const PacketView& v,
                                                           Direction dir, Nanos now) {
  const bool up_fed = feeds_regulator(params_.uplink.policy);
  const bool down_fed = feeds_regulator(params_.downlink.policy);
  if (!up_fed && !down_fed) return;
  const TcpSegment seg = TcpSegment::from_view(v);
  const bool from_phone = dir == Direction::kFromSubscriber;
  UplinkSlot* up = up_fed ? uplink_slot(idx, seg, from_phone) : nullptr;
  if (up != nullptr) {
    if (params_.uplink.policy == Policy::kRsfc && params_.rsfc.per_subscriber &&
        up->subscriber == SubscriberTable::kNone) {
      join_subscriber(idx, *up);
    }
  }
  // A phone without timestamps: every packet it sends times its uplink's idle time
  // (PhoneUplinkIdle, for UplinkRegulator::idle_law()), once a regulated flow of its joined
  // its subscriber's state. The law runs with the download's pacing only: without it, it
  // gives the upload room the download's own queue takes (lab/EXPERIMENTS.md Q56: 3G -6.6,
  // LTE -17 points in the simulator); without counts it never steps.
  if (from_phone && !seg.has_ts && params_.rsfc.idle_law && pacing_on()) {
    const uint32_t owner = flows_->at(idx).owner;
    if (owner != kNoOwner && subscribers_->refs(owner) > 0) {
      subscribers_->at(owner).idle().on_packet(now, v.ip_total_len);
    }
  }
  if (up != nullptr) {
    if (from_phone) {
      const uint32_t owner = flows_->at(idx).owner;
      take_phone_tick(owner, up->up);
      up->up.on_uplink_segment(now, seg, params_.rsfc);
      note_phone_tick(owner, up->up);
    } else {
      up->up.on_downlink_segment(now, seg, params_.rsfc);
    }
  }
  if (down_fed) feed_downlink(idx, seg, from_phone, now);
}

// The flow's uplink regulator; nullptr until its first payload from the phone (the knob steers
// only uploads), and for good when the pool was full then. A new one hears the handshake first.
UplinkSlot* Engine::uplink_slot(uint32_t idx, const TcpSegment& seg, bool from_phone) {
  Flow& f = flows_->at(idx);
  if (f.up_slot != kNoSlot) return &regs_->up.at(f.up_slot);
  if (!from_phone || seg.payload_len == 0 || seg.syn() || f.up_refused) return nullptr;
  const size_t k = static_cast<size_t>(Knob::kUplink);
  f.up_slot = regs_->up.acquire();
  if (f.up_slot == kNoSlot) {
    f.up_refused = true;
    counters_.regulator_pool_full[k].add();
    return nullptr;
  }
  counters_.regulator_pool_used[k].set(regs_->up.used());
  UplinkSlot& s = regs_->up.at(f.up_slot);
  if (params_.uplink.policy == Policy::kRsfc && params_.rsfc.per_subscriber) {
    join_subscriber(idx, s);  // before the handshake, as when it was fed live
  }
  replay_handshake(f, s.up, params_.rsfc);
  if (f.adopted) s.up.on_adopted();
  return &s;
}

// The downlink knob's regulator of the policy's kind (rsfc: the queue regulator; drwa and
// observe: DRWA): from the flow's first payload to the phone (the knob steers only downloads;
// none for good when the pool was full then), hearing the handshake first; started fresh
// when a reload changed the kind.
[[gnu::always_inline]] inline void Engine::feed_downlink(uint32_t idx, const TcpSegment& seg,
                                                         bool from_phone, Nanos now) {
  Flow& f = flows_->at(idx);
  const bool fresh = f.down_slot == kNoSlot;
  if (fresh) {
    if (from_phone || seg.payload_len == 0 || seg.syn() || f.down_refused) return;
    const size_t k = static_cast<size_t>(Knob::kDownlink);
    f.down_slot = regs_->down.acquire();
    if (f.down_slot == kNoSlot) {
      f.down_refused = true;
      counters_.regulator_pool_full[k].add();
      return;
    }
    counters_.regulator_pool_used[k].set(regs_->down.used());
    if (pacing_reserved()) regs_->pacers[f.down_slot] = DownlinkPacer{};
  }
  DownlinkSlot& ds = regs_->down.at(f.down_slot);
  auto& slot = ds.down;
  if (params_.downlink.policy == Policy::kRsfc) {
    auto* q = std::get_if<DownlinkQueueRegulator>(&slot);
    if (q == nullptr) q = &slot.emplace<DownlinkQueueRegulator>();
    if (fresh) replay_handshake(f, *q, down_params_.base());
    if (from_phone) {
      take_phone_tick(f.owner, *q);
      q->on_uplink_segment(now, seg, down_params_.base());
      note_phone_tick(f.owner, *q);
      if (pacing_on() && !seg.has_ts && params_.rsfc.idle_law) {
        regs_->pacers[f.down_slot].on_phone_ack_untimed(now, seg, params_.pacing);
      } else if (pacing_on()) {
        regs_->pacers[f.down_slot].on_phone_ack(now, seg, q->ns_per_tick(), params_.pacing);
      }
    } else if (!pacing_on()) {
      q->on_downlink_segment(now, seg, down_params_.base());
    }  // else pace() feeds it, with the time the segment leaves
    return;
  }
  auto* d = std::get_if<DownlinkRegulator>(&slot);
  if (d == nullptr) {
    leave_down_gauge(ds);  // the queue regulator it replaces
    d = &slot.emplace<DownlinkRegulator>();
  }
  if (fresh) replay_handshake(f, *d, params_.drwa);
  if (from_phone) {
    d->on_uplink_segment(now, seg, params_.drwa);
  } else {
    d->on_downlink_segment(now, seg, params_.drwa);
  }
}

// --- Pace the downlink -------------------------------------------------------------------

// A segment to the phone of a flow the downlink queue regulator steers: its release time from
// the flow's pacer (pacer.h). Data is paced once the regulator is past its startup (in slow
// start the pacer would cap the sender's doubling at gain per sample) and knows the phone's
// clock; a FIN or RST keeps its place behind held data; a pure ACK (the flow's upload, if any)
// leaves at once. A segment whose bytes were rewritten leaves at once (the shell would have to
// keep its bytes).
[[gnu::always_inline]] inline void Engine::pace(uint32_t idx, const PacketView& v, Nanos now,
                                                PacketResult& r) {
  const Flow& f = flows_->at(idx);
  if (f.down_slot == kNoSlot || params_.downlink.policy != Policy::kRsfc) return;
  DownlinkSlot& ds = regs_->down.at(f.down_slot);
  auto* q = std::get_if<DownlinkQueueRegulator>(&ds.down);
  if (q == nullptr) return;
  Nanos at = now;
  if (!r.modified) {
    const bool data = v.payload_len > 0;
    const bool keep_order = data || v.fin() || v.rst();
    note_uplink_law(f.owner, *q);
    const bool paced = data && q->paceable() &&
                       (!params_.pacing.next_to_upload_only || phone_uploads(f.owner, now));
    at = regs_->pacers[f.down_slot].release_at(now, v.payload_len, paced, keep_order,
                                               params_.pacing);
    if (at > now) {
      r.release_at = at;
      counters_.downlink_packets_paced.add();
    }
  }
  // The regulator times the segment from when it leaves (feed_downlink() left it to here).
  q->on_downlink_segment(now, at, TcpSegment::from_view(v), down_params_.base());
}

template <class Regulator>
void Engine::take_phone_tick(uint32_t owner, Regulator& r) {
  if (r.tick_ms() > 0 || owner == kNoOwner || subscribers_->refs(owner) == 0) return;
  if (const Nanos g = subscribers_->phone_tick(owner); g > 0) r.sibling_tick(g);
}

template <class Regulator>
void Engine::note_phone_tick(uint32_t owner, const Regulator& r) {
  const Nanos g = r.measured_tick();
  if (g > 0 && owner != kNoOwner && subscribers_->refs(owner) > 0) {
    subscribers_->note_phone_tick(owner, g);
  }
}

// On the gateway's round trip, the download's regulator learns whether its phone's upload
// stepped on the uplink's idle time since its own last step (set_uplink_law()).
void Engine::note_uplink_law(uint32_t owner, DownlinkQueueRegulator& q) const {
  if (!q.round_trip()) return;
  const bool known = owner != kNoOwner && subscribers_->refs(owner) > 0;
  q.set_uplink_law(known && subscribers_->at(owner).idle().law_running(q.last_step_at()));
}

bool Engine::phone_uploads(uint32_t owner, Nanos now) const {
  if (owner == kNoOwner || subscribers_->refs(owner) == 0) return false;
  return subscribers_->at(owner).uploads_bulk(now);
}

// --- Apply the knob ----------------------------------------------------------------------

// The policy's target for an ACK's window, written under the rewrite rules (window.h); the
// right edge the ACK leaves with is remembered. A SYN's or SYN-ACK's window is only held to
// the startup floor (hold_handshake_window); RST windows are never touched, nor is a segment
// without an ACK; nor any window while the scale is unknown.
[[gnu::always_inline]] inline void Engine::apply_knob(std::span<uint8_t> pkt, PacketView& v,
                                                      uint32_t idx, Nanos now, PacketMeta meta,
                                                      PacketResult& r) {
  if (v.syn()) {
    if (!v.rst()) hold_handshake_window(pkt, v, idx, meta, r);
    return;
  }
  if (v.rst() || !v.ack_flag()) return;
  Flow& f = flows_->at(idx);
  if (!f.scale_known) {
    r.outcome = Outcome::kUnregulated;
    return;
  }
  const Direction dir = r.direction;
  const uint8_t scale = dir == Direction::kToSubscriber ? f.peer_scale : f.sub_scale;
  Endpoint& receiver = dir == Direction::kToSubscriber ? f.sub : f.peer;
  r.knob_ack = true;
  r.scale = scale;
  r.window_in = r.window_out = window_bytes(v.window, scale);
  DecisionRecord rec;
  bool log = false;  // a control step ran: the record goes out with the window this ACK gets
  const uint64_t target = with_sacked(knob_target(idx, dir, now, v, rec, log), dir, v);
  if (enforces(knob_params(dir).policy) && target != UINT64_MAX) {
    if (!may_modify(meta)) {  // the kernel gave us part of the packet: never modify
      if (log) emit_decision(rec, v.window, scale);
      r.outcome = Outcome::kTruncatedCopy;
      return;
    }
    rewrite_window(pkt, v, receiver, scale, target, checksum_state(meta), r);
    r.window_out = window_bytes(v.window, scale);
  }
  if (log) emit_decision(rec, v.window, scale);
  const uint32_t edge = right_edge(v.ack, v.window, scale);
  if (!receiver.edge_valid || seq_gt(edge, receiver.right_edge)) {
    receiver.right_edge = edge;
    receiver.edge_valid = true;
  }
  if (dir == Direction::kToSubscriber && feeds_regulator(params_.uplink.policy) &&
      f.up_slot != kNoSlot) {
    regs_->up.at(f.up_slot).up.on_window_forwarded(now, edge, params_.rsfc);
  }
  if (dir == Direction::kFromSubscriber && f.down_slot != kNoSlot) {
    if (auto* q = std::get_if<DownlinkQueueRegulator>(&regs_->down.at(f.down_slot).down)) {
      q->on_window_forwarded(edge);
    }
  }
}

// An rsfc knob's window bounds what its sender has in the network. Bytes the receiver
// already holds above the cumulative ACK (its SACK blocks) have left the network, and while a
// loss is repaired the cumulative ACK stands still as they pile up: a right edge of ack +
// target would stop the sender's recovery once they reach the target, and the ACK that fills
// the hole would then open a whole window at once, a burst at line rate into the
// bottleneck's buffer (a second loss where the buffer is shallow: lab/EXPERIMENTS.md Q34).
// So the target counts them out, as a sender's pipe does (RFC 6675). Only an rsfc knob: a
// static clamp stands for a receive buffer (Android's tcp_rmem_max), which they fill, and
// DRWA is the published law. A bogus SACK option counts nothing (sacked_above); one claiming
// more than the receiver offers only lets its own window through (clamp_window never raises
// a window).
inline uint64_t Engine::with_sacked(uint64_t target, Direction dir, const PacketView& v) {
  if (target == UINT64_MAX || v.opts.sack_blocks == 0 || knob_params(dir).policy != Policy::kRsfc)
    return target;
  const uint64_t sacked = sacked_above(v.opts, v.ack);
  if (sacked > 0) counters_.sacked_allowances[static_cast<size_t>(dir)].add();
  return target + sacked;
}

inline const DirectionParams& Engine::knob_params(Direction dir) const {
  return dir == Direction::kToSubscriber ? params_.uplink : params_.downlink;
}

// The startup floor: what an rsfc knob lets a sender have before its regulator has estimates
// (rsfc.initial_window_bytes; 0 = 64 KB, the most a handshake can offer).
inline uint32_t Engine::startup_floor() const {
  return startup_floor_bytes(params_.rsfc.initial_window_bytes);
}

// Whether the knob in `dir` holds a flow to the startup floor before its regulator starts: an
// rsfc knob, and for the downlink knob a flow with timestamps or, without them, one its
// regulator will run on the gateway's round trip (rsfc.tuning.downlink_round_trip; otherwise it
// leaves the flow alone, NO_TIMESTAMPS).
inline bool Engine::holds_from_handshake(Direction dir, bool timestamps) const {
  if (knob_params(dir).policy != Policy::kRsfc) return false;
  return dir == Direction::kToSubscriber || timestamps || params_.rsfc.downlink_round_trip;
}

// A SYN's or SYN-ACK's window (never scaled) is the first right edge its receiver may send
// to, and a right edge is never pulled back: a knob whose regulators start at the startup
// floor has to start the flow there, or the first edge (64 KB from a Linux server, five
// seconds of a 2G link) stands until the sender has used it. An rsfc knob holds the
// handshake's window to the floor (the downlink knob's without timestamps only under
// rsfc.tuning.downlink_round_trip: a SYN-ACK carries them only if its SYN did). The lifecycle
// learnt the first edges from the window as it came (learn_syn, learn_syn_ack): they are set to the
// one sent.
inline void Engine::hold_handshake_window(std::span<uint8_t> pkt, PacketView& v, uint32_t idx,
                                          PacketMeta meta, PacketResult& r) {
  const Direction dir = r.direction;
  const uint32_t floor = startup_floor();
  if (!may_modify(meta) || v.window <= floor || !holds_from_handshake(dir, v.opts.has_timestamps)) {
    return;
  }
  rewrite_window(pkt, v, Endpoint{}, 0, floor, checksum_state(meta), r);
  if (!r.modified) return;
  Flow& f = flows_->at(idx);
  Endpoint& sender = dir == Direction::kToSubscriber ? f.peer : f.sub;
  Endpoint& receiver = dir == Direction::kToSubscriber ? f.sub : f.peer;
  sender.syn_window = v.window;  // a SYN's: the SYN-ACK's sender's first edge (learn_syn_ack)
  if (v.ack_flag() && receiver.edge_valid) receiver.right_edge = v.ack + v.window;
}

// The window the knob's policy wants for an ACK travelling `dir` (UINT64_MAX = no clamp).
inline uint64_t Engine::knob_target(uint32_t idx, Direction dir, Nanos now, const PacketView& v,
                                    DecisionRecord& rec, bool& log) {
  const DirectionParams& knob = knob_params(dir);
  switch (knob.policy) {
    case Policy::kOff:
      return UINT64_MAX;
    case Policy::kObserve:  // runs the estimators for the decision log, never enforces
    case Policy::kRsfc:
    case Policy::kDrwa:
      return regulator_target(idx, dir, now, v, rec, log);
    case Policy::kStatic:
      return knob.static_window_bytes;
  }
  return UINT64_MAX;
}

// Lowers the ACK's window toward `target` (clamp_window: only lower, not below the floor,
// never pulling back the right edge already advertised, rounded up to the scale) and fixes
// the checksum; counts what held the clamp.
inline void Engine::rewrite_window(std::span<uint8_t> pkt, PacketView& v, const Endpoint& receiver,
                                   uint8_t scale, uint64_t target, ChecksumState checksum,
                                   PacketResult& r) {
  const ClampResult c = clamp_window({.raw_window = v.window,
                                      .scale = scale,
                                      .ack = v.ack,
                                      .edge_valid = receiver.edge_valid,
                                      .edge = receiver.right_edge,
                                      .target_bytes = target,
                                      .min_window_bytes = params_.min_window_bytes});
  const size_t d = static_cast<size_t>(r.direction);
  if (c.limit == ClampLimit::kRightEdge) counters_.right_edge_holds[d].add();
  if (c.limit == ClampLimit::kFloor) counters_.floor_holds[d].add();
  if (!c.changed()) return;
  set_tcp_window(pkt, v, c.raw_window, checksum);  // v.window is now what goes out
  if (checksum == ChecksumState::kNotReady) counters_.checksum_full.add();
  counters_.windows_rewritten[d].add();
  const Policy policy = knob_params(r.direction).policy;
  if (policy == Policy::kRsfc && r.direction == Direction::kToSubscriber)
    counters_.rsfc_windows_applied.add();
  if (policy == Policy::kRsfc && r.direction == Direction::kFromSubscriber)
    counters_.downlink_windows_applied.add();
  if (policy == Policy::kDrwa) counters_.drwa_windows_applied.add();
  r.outcome = Outcome::kRewritten;
  r.modified = true;
}

// The decision log records the window the ACK leaves with.
void Engine::emit_decision(DecisionRecord& rec, uint16_t raw, uint8_t scale) {
  rec.window_bytes = window_bytes(raw, scale);
  sink_->on_decision(rec);
}

// Attaches the flow's uplink regulator to its subscriber's shared state (SubscriberUplink):
// the regulated uploads of one address fill one uplink buffer.
void Engine::join_subscriber(uint32_t idx, UplinkSlot& r) {
  const Flow& f = flows_->at(idx);
  IpAddr a;
  a.family = f.key.family;
  a.bytes = f.key.sub_addr;
  r.subscriber = subscribers_->acquire(a, subscriber_hash(f.key));
  // Cannot happen: one entry per flow, one shared state per uplink regulator.
  if (r.subscriber == SubscriberTable::kNone) return;
  if (subscribers_->refs(r.subscriber) == 1) counters_.rsfc_subscribers_created.add();
  r.up.attach(&subscribers_->at(r.subscriber));
  counters_.rsfc_subscribers.set(subscribers_->attached());
}

// The regulator's target for the flow's knob in `dir` (UINT64_MAX = no clamp). When a
// control step ran and a sink is set, fills `rec` (all but window_bytes) and sets `log`.
uint64_t Engine::regulator_target(uint32_t idx, Direction dir, Nanos now, const PacketView& v,
                                  DecisionRecord& rec, bool& log) {
  // No regulator yet (it starts with the flow's first payload this way): an rsfc knob holds
  // the flow to the startup floor from its handshake on, as the regulator will, since the
  // edge an ACK advertises now can never be pulled back. Not a flow that will never have one
  // (the pool was full), nor one whose edges were advertised before rsfcd saw it (adopted
  // after a restart, first seen mid-stream): those pass as they come. Nor a bulk transfer
  // the other way (bulk_other_way()); a regulator in its startup lets go of one too.
  const Flow& f = flows_->at(idx);
  const uint32_t slot = dir == Direction::kToSubscriber ? f.up_slot : f.down_slot;
  const bool bulk = bulk_other_way(f, dir, v);
  if (slot == kNoSlot) {
    const bool refused = dir == Direction::kToSubscriber ? f.up_refused : f.down_refused;
    const bool held = !refused && !f.adopted && f.state != FlowState::kMidstream &&
                      (dir == Direction::kToSubscriber ? f.peer : f.sub).syn_seen && !bulk &&
                      holds_from_handshake(dir, f.sub.timestamps && f.peer.timestamps);
    return held ? startup_floor() : UINT64_MAX;
  }
  WindowDecision d;
  if (dir == Direction::kToSubscriber) {
    UplinkSlot& s = regs_->up.at(slot);
    d = s.up.target_window(now, params_.rsfc, bulk);
    if (d.stepped && s.up.idle_law_steered()) counters_.rsfc_idle_law_steps.add();
    count_uplink_health(s, d.window != kNoClamp);
  } else {
    d = downlink_target(f, regs_->down.at(slot), now, bulk);
  }
  const uint64_t target = d.window == kNoClamp ? UINT64_MAX : d.window;
  if (d.stepped && sink_) {
    if (dir == Direction::kToSubscriber) {
      describe_uplink(rec, regs_->up.at(slot).up);
    } else {
      describe_regulator(rec, regs_->down.at(slot));
    }
    describe_flow(rec, idx, dir, now, target);
    log = true;  // apply_knob adds the window advertised and emits it
  }
  return target;
}

// Whether the flow is a bulk transfer the other way from the knob in `dir` (other_way_bulk(),
// regulator.h), from the ACK and the endpoints' ISNs: the payload its sender has sent, and
// what it acknowledges of the knob's way. Without both ISNs (a flow seen without its
// handshake), no. After 4 GB a count wraps: the hold resumes for 64 KB, within the edge
// already advertised (rewrite_window never pulls it back).
bool Engine::bulk_other_way(const Flow& f, Direction dir, const PacketView& v) {
  const bool up = dir == Direction::kToSubscriber;
  const Endpoint& sender = up ? f.peer : f.sub;
  const Endpoint& carrier = up ? f.sub : f.peer;
  if (!sender.syn_seen || !carrier.syn_seen) return false;
  return other_way_bulk(v.seq + v.payload_len - (sender.isn + 1), v.ack - (carrier.isn + 1));
}

// The downlink knob's regulator's target (no clamp before its first segment); `release` as
// for DownlinkQueueRegulator::target_window(). A download whose phone uploads nothing steps
// with rsfc.tuning.threshold_ceiling_download_alone_ms's ceiling, where that is higher; one on
// the gateway's round trip whose phone's upload is short of its link, with a lower one.
WindowDecision Engine::downlink_target(const Flow& f, DownlinkSlot& r, Nanos now, bool release) {
  if (auto* q = std::get_if<DownlinkQueueRegulator>(&r.down)) {
    // The subscriber's upload state is looked up at a step alone, and only when it can change
    // the parameters (DownlinkStepParams::choose).
    note_uplink_law(f.owner, *q);
    const auto choice = down_params_.choose(
        *q, now, [&] { return phone_uploads(f.owner, now); },
        [&] { return subscribers_->at(f.owner).short_of_best(now); });
    const WindowDecision d = q->target_window(now, down_params_[choice], release);
    if (d.held) counters_.downlink_steps_held.add();
    if (choice == DownlinkStepParams::Choice::kYield) counters_.downlink_steps_yielded.add();
    count_downlink_health(r);
    return d;
  }
  if (auto* dr = std::get_if<DownlinkRegulator>(&r.down))
    return dr->target_window(now, params_.drwa);
  return {};
}

// The downlink queue regulator's per-state gauge, and its flows without timestamps (left
// alone: NO_TIMESTAMPS) counted once each.
void Engine::count_downlink_health(DownlinkSlot& r) {
  const auto& q = std::get<DownlinkQueueRegulator>(r.down);
  if (!r.in_down_gauge || r.counted_down_state != q.state()) {
    leave_down_gauge(r);
    r.counted_down_state = q.state();
    Counter& c = counters_.downlink_flows_in_state[static_cast<size_t>(q.state())];
    c.set(c.get() + 1);
    r.in_down_gauge = true;
  }
  if (!r.counted_down_no_ts && q.fallback()) {
    r.counted_down_no_ts = true;
    counters_.downlink_flows_no_timestamps.add();
  }
  if (!r.counted_down_rt && q.round_trip()) {
    r.counted_down_rt = true;
    counters_.downlink_flows_round_trip.add();
  }
}

// The uplink controller's per-state gauge and once-per-flow health counters.
void Engine::count_uplink_health(UplinkSlot& r, bool clamps) {
  const UplinkRegulator& u = r.up;
  if (!r.in_state_gauge || r.counted_state != u.state()) {
    leave_state_gauge(r);
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
  if (!r.counted_no_ts && params_.uplink.policy == Policy::kRsfc && !u.timestamps() && clamps) {
    r.counted_no_ts = true;
    counters_.flows_no_timestamps.add();
  }
}

// The record's flow, time and target.
void Engine::describe_flow(DecisionRecord& rec, uint32_t idx, Direction dir, Nanos now,
                           uint64_t target) const {
  const Flow& f = flows_->at(idx);
  rec.time = now;
  rec.flow = idx;
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
  rec.enforced = knob_params(dir).policy != Policy::kObserve;
}

void Engine::expire(Nanos now) {
  auto drop = [this](uint32_t idx) {  // called before the table removes the flow
    release_flow(idx);
    counters_.flows_expired.add();
  };
  flows_->expire_class(FlowClass::kClosed, now - params_.closed_timeout, drop);
  flows_->expire_class(FlowClass::kTentative, now - params_.embryonic_timeout, drop);
  flows_->expire_class(FlowClass::kEstablished, now - params_.idle_timeout, drop);
  counters_.flows_active.set(flows_->size());
}

}  // namespace rsfc
