// The pure core's entry point: packet bytes + time in, outcome (and possibly a lowered
// window, written in place) out. No I/O, no clock. One Engine per worker; not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "rsfc/core/adoption.h"
#include "rsfc/core/decision_record.h"
#include "rsfc/core/downlink_regulator.h"
#include "rsfc/core/flow_table.h"
#include "rsfc/core/metrics.h"
#include "rsfc/core/packet.h"
#include "rsfc/core/params.h"

namespace rsfc {

struct PacketMeta {
  ChecksumState checksum = ChecksumState::kComplete;
  // The kernel copied fewer bytes than the packet has (NFQA_CAP_LEN): never modify.
  bool truncated = false;
  // rsfc-replay's copy of a capture record: its bytes go nowhere, so a truncated one (a
  // header-only capture) is decided and rewritten as the whole packet would be, its checksum
  // updated incrementally (never recomputed over a payload it does not have).
  bool replay = false;
};

struct PacketResult {
  Outcome outcome = Outcome::kPassed;
  bool modified = false;  // bytes changed in place: return them with the verdict
  // Downlink pacing (EngineParams::pacing): when > the `now` given to process(), hold the
  // packet's verdict until this time (never more than pacing.max_hold later). 0 = at once.
  Nanos release_at = 0;

  // What the engine made of the packet, for tools that account for it (rsfc-replay); the
  // daemon needs only the three fields above.
  // Which way the packet travels (unless outcome is kUnparsed or kNotSubscriber).
  Direction direction = Direction::kToSubscriber;
  // The packet started the flow now in `flow`: its first packet, or a SYN that restarted it
  // on reused ports.
  bool new_flow = false;
  // The packet started a flow whose handshake was not seen (FlowState::kMidstream) and
  // adoption is on: the shell may ask conntrack for its window scales and call adopt().
  bool adopt_request = false;
  // The flow-table slot of the packet's flow (see flow()); kNoFlow when no flow tracks it
  // (unparsed, not a subscriber's, both knobs off, a RST of no known flow, a new flow of a
  // subscriber at its flow cap).
  uint32_t flow = kNoFlow;
  // An ACK whose window went through the knob (the window scale known; outcome kPassed,
  // kRewritten or kTruncatedCopy): the scale of its sender's windows, and the window in
  // bytes (field << scale) it came with and leaves with.
  bool knob_ack = false;
  uint8_t scale = 0;
  uint64_t window_in = 0, window_out = 0;
};

class SubscriberTable;
struct RegulatorPools;
struct UplinkSlot;
struct DownlinkSlot;
struct TcpSegment;

class Engine {
 public:
  // Regulators per knob at most, by default (flows.regulated_max): a million tracked flows
  // (244 B each) and full pools (5.0 KB per slot of both) reserve 537 MB (docs/RESULTS.md §9;
  // 60,000 before the idle law's 168 bytes a slot, lab/EXPERIMENTS.md Q57).
  static constexpr uint32_t kDefaultRegulatedMax = 58000;
  // `flows_max` is fixed for the engine's life (memory is reserved once). `hash_seed`
  // keys the flow hash: the daemon passes a random value. `regulated_max`: each knob's pool
  // of regulators (no more than flows_max), also reserved once; a flow that needs one when its
  // knob's pool is full passes that knob untouched (CoreCounters::regulator_pool_full).
  Engine(uint32_t flows_max, const EngineParams& params, uint64_t hash_seed = 0x5eed,
         uint32_t regulated_max = kDefaultRegulatedMax);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Replaces the parameters (SIGHUP). Flow state is kept.
  void set_params(const EngineParams& params);
  const EngineParams& params() const { return params_; }

  // Processes one packet starting at its IP header. May lower the TCP window in place
  // (then result.modified is true and the checksum is correct). Never fails: anything not
  // understood comes back with modified == false.
  PacketResult process(std::span<uint8_t> pkt, Nanos now, PacketMeta meta = {});

  // Installs the window scales conntrack recorded (adoption.h) on the flow they belong to:
  // a flow first seen mid-stream becomes established and regulated like one whose handshake
  // was seen (its right edges are learnt from the next ACKs); an absent flow is created so
  // (start-up adoption), unless that would evict another. A flow that saw a handshake of its
  // own is never overridden. Both directions' scales are needed, else nothing changes.
  AdoptResult adopt(const ConntrackTcp& ct, Nanos now);

  // Drops idle and closed flows. Call about once a second.
  void expire(Nanos now);

  // Optional per-flow decision log; not owned; nullptr disables.
  void set_decision_sink(DecisionSink* sink) { sink_ = sink; }

  const CoreCounters& counters() const { return counters_; }
  // The flow in a slot (PacketResult::flow, DecisionRecord::flow) as the engine tracks it;
  // valid until the next process() or expire().
  const Flow& flow(uint32_t idx) const { return flows_->at(idx); }
  size_t active_flows() const;
  // Memory one tracked flow costs at full capacity: its entry, hash buckets and subscriber
  // entry. A regulated flow costs bytes_per_regulated_flow() more, from the pools.
  static size_t bytes_per_flow();
  // One slot in each knob's pool and one subscriber's shared uplink state.
  static size_t bytes_per_regulated_flow();
  // A downlink pacer, per regulated flow, when the engine was built with pacing.enabled.
  static size_t bytes_per_paced_flow();
  // Pacing's state was reserved (pacing.enabled at construction). Without it a reload that
  // turns pacing on changes nothing: its state is reserved once, like the pools.
  bool pacing_reserved() const;
  // Pacing runs: on in the parameters and reserved at start (pacing_reserved()).
  bool pacing_on() const { return params_.pacing.enabled && pacing_reserved(); }
  uint32_t flows_max() const;
  uint32_t regulated_max() const;  // slots per knob's pool

 private:
  // The stages of process(), in order. Inline: engine.cpp folds them back into process()
  // (one call each per packet would cost ~10 % of the packet's time).
  inline bool classify(std::span<const uint8_t> pkt, bool cut, PacketView& v, PacketResult& r);
  inline uint32_t flow_of(const PacketView& v, PacketResult& r, Nanos now);
  inline bool track_lifecycle(uint32_t idx, const PacketView& v, Nanos now, PacketResult& r);
  inline void feed_regulators(uint32_t idx, const PacketView& v, Direction dir, Nanos now);
  inline void feed_downlink(uint32_t idx, const TcpSegment& seg, bool from_phone, Nanos now);
  inline void apply_knob(std::span<uint8_t> pkt, PacketView& v, uint32_t idx, Nanos now,
                         PacketMeta meta, PacketResult& r);
  inline void pace(uint32_t idx, const PacketView& v, Nanos now, PacketResult& r);
  // Whether the subscriber entry `owner` has a bulk upload running
  // (SubscriberUplink::uploads_bulk()).
  bool phone_uploads(uint32_t owner, Nanos now) const;
  void note_uplink_law(uint32_t owner, DownlinkQueueRegulator& q) const;
  // The phone's tick shared between its flows (SubscriberTable::phone_tick), around a segment
  // from the phone: before it, a regulator with no tick of its own takes the phone's; after
  // it, one that measured the tick notes it. Only subscribers with a regulated upload hold the
  // shared state, and an upload is what keeps a new flow's handshake from giving its tick.
  template <class Regulator>
  void take_phone_tick(uint32_t owner, Regulator& r);
  template <class Regulator>
  void note_phone_tick(uint32_t owner, const Regulator& r);
  UplinkSlot* uplink_slot(uint32_t idx, const TcpSegment& seg, bool from_phone);
  uint32_t add_flow(const FlowKey& key, uint32_t h, const PacketView& v, Direction dir, Nanos now);
  bool room_for(uint32_t sub);
  void drop_flow(uint32_t idx);
  void release_flow(uint32_t idx);
  uint32_t subscriber_hash(const FlowKey& key) const;
  bool on_syn(uint32_t idx, const PacketView& v, Direction dir, Nanos now, PacketResult& r);
  bool on_syn_ack(uint32_t idx, const PacketView& v, Direction dir, bool first, Nanos now);
  bool rst_acceptable(const Flow& f, const PacketView& v, Direction dir) const;
  // Parts of apply_knob.
  inline const DirectionParams& knob_params(Direction dir) const;
  inline uint64_t with_sacked(uint64_t target, Direction dir, const PacketView& v);
  inline uint32_t startup_floor() const;
  inline bool holds_from_handshake(Direction dir, bool timestamps) const;
  inline void hold_handshake_window(std::span<uint8_t> pkt, PacketView& v, uint32_t idx,
                                    PacketMeta meta, PacketResult& r);
  inline uint64_t knob_target(uint32_t idx, Direction dir, Nanos now, const PacketView& v,
                              DecisionRecord& rec, bool& log);
  inline void rewrite_window(std::span<uint8_t> pkt, PacketView& v, const Endpoint& receiver,
                             uint8_t scale, uint64_t target, ChecksumState checksum,
                             PacketResult& r);
  void emit_decision(DecisionRecord& rec, uint16_t raw, uint8_t scale);
  // The regulator's target (UINT64_MAX = no clamp). When a control step ran and a sink is
  // set, fills `rec` (all but window_bytes) and sets `log`.
  uint64_t regulator_target(uint32_t idx, Direction dir, Nanos now, const PacketView& v,
                            DecisionRecord& rec, bool& log);
  void count_uplink_health(UplinkSlot& s, bool clamps);
  WindowDecision downlink_target(const Flow& f, DownlinkSlot& s, Nanos now, bool release);
  static bool bulk_other_way(const Flow& f, Direction dir, const PacketView& v);
  void count_downlink_health(DownlinkSlot& s);
  void describe_flow(DecisionRecord& rec, uint32_t idx, Direction dir, Nanos now,
                     uint64_t target) const;
  void join_subscriber(uint32_t idx, UplinkSlot& s);
  void note_handshake_ack(Flow& f, const PacketView& v, Direction dir, Nanos now);

  void reset_flow_state(uint32_t idx);
  void regulators_adopted(uint32_t idx);  // adopt(): the regulators learn it
  void forget_flow(uint32_t idx);
  void leave_state_gauge(UplinkSlot& s);
  void leave_down_gauge(DownlinkSlot& s);

  EngineParams params_;
  DownlinkStepParams down_params_;  // from params_.rsfc (downlink_step_params_from)
  std::unique_ptr<FlowTable> flows_;
  std::unique_ptr<SubscriberTable> subscribers_;  // rsfc's per-subscriber state
  std::unique_ptr<RegulatorPools> regs_;          // the flows' regulators, reserved once
  CoreCounters counters_;
  DecisionSink* sink_ = nullptr;
};

}  // namespace rsfc
