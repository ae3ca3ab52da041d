// Per-flow estimators the regulators are built from. Pure logic: every input carries the
// gateway's arrival time `now` (rsfc::Nanos); no clock, no I/O, no heap. Every object here is
// fixed-size so that it can live inside a per-flow record.
//
// Vocabulary (see docs/DESIGN.md §1): "subscriber" = the phone; "uplink" = phone -> gateway (after
// the phone's bloated uplink buffer); "downlink" = gateway -> phone (before the bloated
// downlink buffer). The gateway sees uplink packets AFTER the uplink buffer and downlink
// packets BEFORE the downlink buffer.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "rsfc/core/packet.h"
#include "rsfc/core/types.h"

namespace rsfc {

// One TCP segment as the regulators see it: the fields of a PacketView they use.
struct TcpSegment {
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint32_t payload_len = 0;
  uint8_t flags = 0;  // tcpflag::*
  bool has_ts = false;
  uint32_t tsval = 0;
  uint32_t tsecr = 0;
  uint16_t mss_option = 0;  // MSS option of a SYN / SYN-ACK, 0 = absent

  static TcpSegment from_view(const PacketView& v);
  bool syn() const { return (flags & tcpflag::kSyn) != 0; }
  bool ack_flag() const { return (flags & tcpflag::kAck) != 0; }
  bool fin() const { return (flags & tcpflag::kFin) != 0; }
  bool rst() const { return (flags & tcpflag::kRst) != 0; }
  // Sequence space the segment occupies (SYN and FIN count one each).
  uint32_t end() const { return seq + payload_len + (syn() ? 1u : 0u) + (fin() ? 1u : 0u); }
};

// ---------------------------------------------------------------------------------------
// Sliding-window extremum over [now - horizon, now], fixed size.
//
// The window is cut into kBuckets time buckets of horizon / kBuckets each; each bucket keeps
// its best sample. Update is O(1), query O(kBuckets). A sample leaves the window between
// `horizon` and `horizon * (1 + 1/kBuckets)` after it was taken, so:
//  - a new best (delay decrease) is in force at once;
//  - an old best (e.g. a minimum delay before a route change) ages out within a horizon;
//  - after an idle period longer than the horizon the window is empty (get() = nullopt).
// With kAux an `aux` value is carried along with each best value (the delay estimator keeps
// the tick count there to re-base stored values when the tick estimate changes).
template <size_t kBuckets, bool kMin, bool kAux = false>
class WindowedExtremum {
 public:
  struct Sample {
    int64_t value = 0;
    int64_t aux = 0;  // 0 unless kAux
  };

  void update(Nanos now, int64_t value, Nanos horizon, int64_t aux = 0) {
    const Nanos len = bucket_len(horizon);
    if (count_ > 0 && now < buckets_[newest_].start + len) {
      Bucket& b = buckets_[newest_];
      if (better_or_equal(value, b.value)) set(b, value, aux);
      return;
    }
    newest_ = static_cast<uint8_t>((newest_ + 1) % kBuckets);
    if (count_ < kBuckets) ++count_;
    buckets_[newest_].start = now;
    set(buckets_[newest_], value, aux);
  }

  // Best sample still in the window, or nullopt when it is empty.
  std::optional<Sample> get(Nanos now, Nanos horizon) const {
    const Nanos len = bucket_len(horizon);
    const Bucket* best = nullptr;
    for (size_t i = 0; i < count_; ++i) {
      const Bucket& b = buckets_[(newest_ + kBuckets - i) % kBuckets];
      if (b.start + len <= now - horizon) break;  // this one and all older ones expired
      if (!best || better(b.value, best->value)) best = &b;
    }
    if (!best) return std::nullopt;
    Sample s;
    s.value = best->value;
    if constexpr (kAux) s.aux = best->aux;
    return s;
  }

  // Forgets everything, then holds one sample.
  void reset_to(Nanos now, int64_t value, int64_t aux = 0) {
    clear();
    count_ = 1;
    newest_ = 0;
    buckets_[0].start = now;
    set(buckets_[0], value, aux);
  }
  void clear() {
    count_ = 0;
    newest_ = 0;
  }
  bool empty() const { return count_ == 0; }

  // value = f(value, aux) for every stored sample (used when the tick estimate changes).
  template <class F>
  void rebase(F f) {
    static_assert(kAux, "rebase needs the aux values");
    for (size_t i = 0; i < count_; ++i) {
      Bucket& b = buckets_[(newest_ + kBuckets - i) % kBuckets];
      b.value = f(b.value, b.aux);
    }
  }

 private:
  struct NoAux {};
  struct Bucket {
    Nanos start = 0;
    int64_t value = 0;
    [[no_unique_address]] std::conditional_t<kAux, int64_t, NoAux> aux{};
  };
  static void set(Bucket& b, int64_t value, int64_t aux) {
    b.value = value;
    if constexpr (kAux) {
      b.aux = aux;
    } else {
      (void)aux;
    }
  }
  static Nanos bucket_len(Nanos horizon) {
    const Nanos l = horizon / static_cast<Nanos>(kBuckets);
    return l > 0 ? l : 1;
  }
  static bool better(int64_t a, int64_t b) { return kMin ? a < b : a > b; }
  static bool better_or_equal(int64_t a, int64_t b) { return kMin ? a <= b : a >= b; }

  std::array<Bucket, kBuckets> buckets_{};
  uint8_t newest_ = 0;
  uint8_t count_ = 0;
};

template <size_t N>
using WindowedMin = WindowedExtremum<N, true>;
template <size_t N>
using WindowedMinAux = WindowedExtremum<N, true, true>;
template <size_t N>
using WindowedMax = WindowedExtremum<N, false>;

// ---------------------------------------------------------------------------------------
// 32-bit TCP timestamp -> 64-bit tick count, continuous across the 2^32 wrap. A TSval that
// goes backwards (reordering) maps below the last one; only forward steps move the base.
class TsUnwrapper {
 public:
  int64_t unwrap(uint32_t raw) {
    if (!init_) {
      init_ = true;
      last_raw_ = raw;
      last_ = raw;
      return last_;
    }
    const int32_t diff = static_cast<int32_t>(raw - last_raw_);
    const int64_t v = last_ + diff;
    if (diff > 0) {
      last_ = v;
      last_raw_ = raw;
    }
    return v;
  }
  bool initialised() const { return init_; }

 private:
  int64_t last_ = 0;
  uint32_t last_raw_ = 0;
  bool init_ = false;
};

// ---------------------------------------------------------------------------------------
// The subscriber's timestamp tick length g (ns per TSval tick), one estimator per flow
// (TS offsets differ per connection: never compare TSvals across flows).
//
// Two slopes of gateway time against the phone's tick count bracket g:
//  - upper bound U, from the phone's segments: arrival a = send + one-way delay + q_up with
//    q_up >= 0, TSval = floor((send + off) / g). From an anchor (the flow's first segment,
//    normally its SYN, which waits behind none of the flow's own data) the smallest slope
//    (a - a0) / (T - T0) in each block of kBlock is U: too high by q_up(now)/span at most,
//    and only while the uplink queue grows (an unregulated sender filling its buffer).
//  - lower bound L, from echoes: the gateway forwards a segment carrying the server's TSval X
//    at f; the phone's first segment echoing X carries its own TSval T, sent on receipt:
//    T * g = f + downlink delay + reaction + const. The largest slope (f - f0) / (T - T0)
//    per block is L: too low by (downlink queue + reaction growth)/span at most. This side
//    does not see the uplink queue at all, the other side does not see the downlink.
// The estimate, after an arrival span of kMinSpan:
//  - snapped to 1, 4 or 10 ms (HZ 1000/250/100, and the 1 ms clocks of current Linux,
//    Android, iOS, Windows) when it is the only clock phones use (those three and HZ=300's
//    3.333 ms) within kSnapTolerance of the bracket [L, U], however wide: both are true
//    bounds (one side alone: within kSnapTolerance of it). A bracket wider than kMaxBracket
//    that holds several: the candidate close to L once L is stable (an upload's growing
//    queue inflates U), else wait. A snap is final;
//  - otherwise an odd value (3.333 ms of HZ=300, 1 us of Linux's usec TS option, anything):
//    a side whose value agrees within kStableTolerance at spans S and >= 2S (a biased side
//    drifts as its bias shrinks like 1/span); the mean of both when both are stable and
//    agree, L alone when they are far apart (a queue growing at a steady rate looks stable);
//    it keeps being refined as the span grows.
//  - A provisional value may come from the handshake (SYN -> third ACK, both from the phone,
//    normally through an empty uplink buffer) or from the first two echoes (blind to the
//    uplink queue, e.g. a sibling flow's initial window queued ahead of this flow's ACK):
//    snapped to a candidate only when the quantisation error (one tick over the span) cannot
//    make it another candidate. It lets the controller work in the first second; the
//    long-span estimate replaces it. (An HZ=300 phone can pass for 4 ms here: g read too
//    large makes d fall, t_buff read low, the harmless direction, until the estimate.)
//  - reanchor() (after an idle gap longer than the delay horizon) restarts both spans but
//    keeps the current value: a phone that suspended during the gap stopped its TS clock
//    (CLOCK_MONOTONIC), which would bias a slope taken across the gap.
class TickEstimator {
 public:
  static constexpr std::array<Nanos, 3> kCandidates{1 * kMilli, 4 * kMilli, 10 * kMilli};
  static constexpr double kHz300 = 1e9 / 300;        // an odd clock phones use (ns)
  static constexpr double kSnapTolerance = 0.02;     // relative
  static constexpr double kMaxBracket = 0.10;        // U / L - 1 above this: wide bracket
  static constexpr double kLowerSlack = 0.05;        // wide bracket: candidate within L + this
  static constexpr double kStableTolerance = 0.005;  // relative, odd values
  static constexpr double kHintSlack = 0.05;         // relative, on top of one tick
  static constexpr Nanos kMinSpan = 1 * kSecond;     // span before a side has a value
  static constexpr Nanos kBlock = 250 * kMilli;      // one value per block
  static constexpr Nanos kHintMinSpan = 10 * kMilli;
  static constexpr Nanos kEchoHintSpan = 40 * kMilli;  // echo hint: first pair this far apart
  // A side anchored this long without a value stops holding the other side's decision back.
  static constexpr Nanos kSideWait = 3 * kSecond;

  enum class Quality : uint8_t { kUnknown, kHint, kEstimated };

  // A segment from the phone carrying `ticks` (unwrapped TSval) arrived at the gateway.
  void on_sample(Nanos arrival, int64_t ticks);
  // That segment echoed a TSval the gateway had first forwarded towards the phone at
  // `forwarded`.
  void on_echo(Nanos forwarded, int64_t ticks);
  // Two subscriber segments of the handshake (SYN, then the ACK of the SYN-ACK).
  void on_handshake(Nanos a_syn, int64_t t_syn, Nanos a_ack, int64_t t_ack);
  // The tick another flow of the same phone measured (snapped: a clock of kCandidates). The
  // tick is the host's, not the connection's (only the offsets differ), so a flow with no
  // value of its own yet takes it as a hint, which its own estimate replaces as usual. (The
  // handshake cannot vet it: behind an upload the SYN may wait longer than the ACK, and
  // its span then reads the tick short. Two hosts behind one address with different clocks,
  // a tethered laptop, get the other's tick for the second or so before the estimate.)
  void on_sibling(Nanos g);
  void reanchor();

  Quality quality() const { return quality_; }
  bool known() const { return quality_ != Quality::kUnknown; }
  bool snapped() const { return snapped_; }
  // The value a phone's other flows may start from (on_sibling): the tick once snapped to a
  // clock phones use (a hint or the estimate); 0 = none.
  Nanos shareable() const { return known() && snapped_ ? static_cast<Nanos>(g_) : 0; }
  double ns_per_tick() const { return g_; }  // 0 when unknown
  // The bounds as they stood when the estimate became final (a snap): no slope is taken
  // after it.
  std::optional<double> upper() const { return upper_.value(); }
  std::optional<double> lower() const { return lower_.value(); }
  // Changes whenever ns_per_tick() changes, so users can re-base stored values.
  uint32_t version() const { return version_; }

 private:
  // Slope of gateway time against ticks from an anchor, one extreme per block. The anchor
  // itself may be off: a phone segment that waited out an outage of the link (the flow's SYN
  // on a traced link) arrives late, which lowers every slope taken from it, and U is no
  // upper bound any more until the span dwarfs that wait (tens of seconds). So up to
  // kAnchors anchors a kMinSpan apart, each with its own extreme; the value is the most
  // extreme of those that have one (for U the largest of the minima: the anchor that waited
  // least), which is a true bound as soon as one anchor did not wait.
  class Slope {
   public:
    static constexpr int kAnchors = 4;
    explicit Slope(bool take_min) : take_min_(take_min) {}
    // True when a block ended (a new value).
    bool add(Nanos t, int64_t ticks);
    void reanchor() {
      anchors_ = 0;
      open_ = false;
    }
    std::optional<double> value() const {
      if (!has_value_) return std::nullopt;
      return value_;
    }
    bool anchored() const { return anchors_ > 0; }
    Nanos anchored_at() const { return anchor_[0].t; }  // valid when anchored()
    bool stable() const { return stable_; }

   private:
    struct Anchor {
      Nanos t = 0;
      int64_t ticks = 0;
      double best = 0;  // this block's extreme from this anchor
      bool open = false;
    };
    // a better than b for this side's combination across anchors (U: the larger minimum).
    bool across(double a, double b) const { return take_min_ ? a > b : a < b; }
    std::array<Anchor, kAnchors> anchor_{};
    int anchors_ = 0;
    Nanos block_start_ = 0;
    double value_ = 0;
    double checkpoint_value_ = 0;  // value at span checkpoint_span_
    Nanos checkpoint_span_ = 0;
    bool take_min_;
    bool open_ = false;  // a block is open
    bool has_value_ = false;
    bool stable_ = false;  // agreed with itself across a doubling of the span
  };

  bool final() const { return quality_ == Quality::kEstimated && snapped_; }  // a snap is final
  void publish(double g, bool snapped, Quality q);
  void decide(Nanos t);  // t: the time of the sample that ended a block
  static uint8_t hint_match(Nanos span, int64_t dt);  // 1 + index in kCandidates; 0 = none
  void publish_hint(uint8_t match) {
    publish(static_cast<double>(kCandidates[match - 1u]), true, Quality::kHint);
  }

  Slope upper_{true};
  Slope lower_{false};
  Nanos echo_first_t_ = 0;  // first echo sample (provisional hint)
  int64_t echo_first_ticks_ = 0;
  uint8_t echo_last_match_ = 0;  // the last span's hint_match()
  bool echo_tried_ = false;      // an echo span was tried
  bool handshake_ = false;       // on_handshake() was given a pair
  double g_ = 0;
  uint32_t version_ = 0;
  Quality quality_ = Quality::kUnknown;
  bool snapped_ = false;
};

// ---------------------------------------------------------------------------------------
// Uplink buffering delay from the subscriber's TCP timestamps (docs/DESIGN.md §3).
//
//   d = a - TSval * g            (one-way delay + an unknown constant; computed relative to a
//                                 reference sample so that magnitudes stay small)
//   t_buff = d - min(d)          min over a sliding window of `horizon` (WindowedMin)
//   filtered = min of t_buff over the last `filter` ns (a standing queue, not one late packet)
//
// Any segment from the subscriber counts (data or pure ACK: both waited in the same buffer).
// Quantisation error: up to one tick g. Clock drift (ppm) and route changes age out with the
// window; a delay decrease is a new minimum at once. When g changes the stored d values are
// re-based. After an idle gap longer than the horizon the windows restart from fresh samples:
// the old minimum is not trusted (a suspended phone's TS clock stopped during the gap), and
// a minimum taken through a buffer still holding other traffic is corrected as soon as a
// lower delay is seen.
class UplinkDelayEstimator {
 public:
  static constexpr Nanos kConfirmFloor = 2 * kMilli;  // see min_confirmed_at()

  // One segment from the subscriber with its TSval. Returns this segment's raw t_buff once
  // g is known. `echo_forwarded`: when the segment echoed a TSval whose first forwarding
  // towards the phone the caller timed, that time (feeds the tick estimate's lower bound).
  std::optional<Nanos> on_segment(Nanos now, uint32_t tsval, Nanos horizon, Nanos filter,
                                  std::optional<Nanos> echo_forwarded = std::nullopt);
  // Handshake pair for the provisional tick (see TickEstimator::on_handshake).
  void on_handshake(Nanos a_syn, uint32_t ts_syn, Nanos a_ack, uint32_t ts_ack);

  // Filtered t_buff: min of the raw t_buff samples of the last `filter` (nullopt if none).
  std::optional<Nanos> filtered(Nanos now, Nanos filter) const;
  std::optional<Nanos> last_raw() const { return last_raw_; }
  // The current min(d), on the estimator's own reference (only differences mean anything:
  // t_buff + min_delay() is the one-way delay's level, which an aging minimum leaves alone);
  // nullopt before the first sample.
  std::optional<Nanos> min_delay(Nanos now, Nanos horizon) const;
  // Last time a sample was within max(kConfirmFloor, g) of the minimum (or set a new one):
  // evidence that the buffer was empty then and min(d) is current.
  Nanos min_confirmed_at() const { return confirmed_at_; }
  // A sample within this of the minimum is at it, ns; a fall by more is a new low.
  double confirm_tolerance() const { return std::max(static_cast<double>(kConfirmFloor), g_used_); }
  bool has_min_confirmation() const { return confirmed_; }
  // Counts the times min(d) rose (an old minimum aged out of the horizon, a re-base after a
  // tick change, an idle restart, raise_baseline): a confirmation against a risen minimum may
  // be a standing queue taken for the empty buffer.
  uint32_t min_rises() const { return min_rises_; }
  // Counts samples that lowered min(d) by more than the confirmation tolerance: the old
  // minimum had a queue in it (a flow that started behind a standing queue), or the path
  // got shorter. Everything computed against the old minimum was off by that much.
  uint32_t min_drops() const { return min_drops_; }
  // Declares the current standing level the new zero: min(d) += by. For the controller's
  // monitor state (a delay increase its clamp cannot remove: route change).
  void raise_baseline(Nanos now, Nanos by);

  const TickEstimator& tick() const { return tick_; }
  void on_sibling_tick(Nanos g) { tick_.on_sibling(g); }
  bool ready() const { return tick_.known() && has_ref_; }

 private:
  int64_t d_of(Nanos now, int64_t ticks) const;

  TsUnwrapper unwrap_;
  TickEstimator tick_;
  WindowedMinAux<8> dmin_;  // value d, aux = ticks - ref_t_
  WindowedMin<4> filter_;   // raw t_buff samples
  Nanos ref_a_ = 0;
  int64_t ref_t_ = 0;
  double g_used_ = 0;  // g the stored d values were computed with
  uint32_t tick_version_ = 0;
  Nanos last_sample_ = 0;
  Nanos confirmed_at_ = 0;
  int64_t last_ticks_ = 0;
  std::optional<int64_t> last_min_;  // lowest min(d) since the last counted rise
  uint32_t min_rises_ = 0;
  uint32_t min_drops_ = 0;
  std::optional<Nanos> last_raw_;
  bool has_ref_ = false;
  bool have_last_ = false;
  bool confirmed_ = false;
  bool hint_given_ = false;
};

// ---------------------------------------------------------------------------------------
// Delivered rate rho of one direction's data at the gateway: NEW bytes (the sequence number
// advancing past the highest end seen; retransmissions do not count) per interval. An
// interval closes at the first arrival at least `interval` after it opened (the caller passes
// max(RTT, floor)). Besides the last sample it keeps a windowed maximum, robust to link
// outages (an interval spanning an outage measures little).
class DeliveredRate {
 public:
  static constexpr Nanos kMaxWindow = 1 * kSecond;  // max() covers max(this, 4 intervals)

  void start(uint32_t next_seq);  // ISN + 1, from the SYN
  // Returns the number of new bytes this segment carried.
  uint32_t on_data(Nanos now, uint32_t seq, uint32_t len, Nanos interval);
  // Bytes/s of the last closed interval (0 = none yet).
  double last() const { return last_; }
  // Largest interval sample of the last max(kMaxWindow, 4 intervals); last() if none.
  double max(Nanos now, Nanos interval) const;
  bool has_sample() const { return samples_ > 0; }
  uint32_t samples() const { return samples_; }
  bool started() const { return started_; }
  uint32_t highest_end() const { return high_end_; }
  Nanos last_new_at() const { return last_new_at_; }  // the latest arrival with new bytes
  uint64_t total_bytes() const { return total_; }

 private:
  static Nanos max_window(Nanos interval) {
    return interval * 4 > kMaxWindow ? interval * 4 : kMaxWindow;
  }
  WindowedMax<4> max_;  // value: bytes/s (integer)
  uint64_t total_ = 0;
  uint64_t bytes_ = 0;
  Nanos open_at_ = 0;
  Nanos last_new_at_ = 0;
  double last_ = 0;
  uint32_t high_end_ = 0;
  uint32_t samples_ = 0;
  bool started_ = false;
  bool open_ = false;
};

// ---------------------------------------------------------------------------------------
// Half round trips from timestamp echoes, pping-style with bounded memory: the gateway notes
// the time it first forwarded each new TSval (at most one per `min_spacing`, in kSlots slots)
// and, when the other end echoes that TSval as TSecr, the elapsed time is one sample of
// gateway -> far end -> gateway. Only the first echo counts; slots whose TSval was passed by
// a later echo (never to be echoed again) or older than kMaxAge are freed.
//  - server half: uplink segments' TSvals, echoed by the server;
//  - phone half: downlink segments' TSvals, echoed by the phone (this includes the downlink
//    queue, the phone's reaction time and the uplink queue).
class EchoSampler {
 public:
  static constexpr size_t kSlots = 6;
  static constexpr Nanos kMaxAge = 8 * kSecond;

  void on_forward(Nanos now, uint32_t tsval, Nanos min_spacing);
  std::optional<Nanos> on_echo(Nanos now, uint32_t tsecr);

 private:
  struct Slot {
    Nanos time = 0;
    uint32_t tsval = 0;
    bool pending = false;
  };
  std::array<Slot, kSlots> slots_{};
  Nanos last_record_ = 0;
  uint32_t last_tsval_ = 0;
  bool have_last_ = false;
  bool recorded_ = false;
};

// ---------------------------------------------------------------------------------------
// Phone-side round trip WITHOUT timestamps: the window-opening lag.
//
// The gateway forwards an ACK at t1 that moves the advertised right edge from R_prev to
// R1 > R_prev. The phone cannot send a byte beyond R_prev before some ACK with an edge beyond
// R_prev reaches it, and the first such ACK left the gateway at t1 or later. So when data
// ending beyond R_prev arrives at t2, t2 - t1 >= the round trip gateway -> phone -> gateway
// (downlink delay incl. its queue + the phone's reaction + uplink delay incl. the phone's
// uplink queue), with equality when the phone is window-limited (it sends as soon as the
// window opens - which is exactly when the clamp is in force). A cwnd- or app-limited phone
// inflates samples; consumers take windowed minima. Bounded like EchoSampler (kSlots slots,
// at most one per min_spacing); the latest satisfied slot gives the tightest bound and all
// satisfied slots are freed.
class WindowOpeningLag {
 public:
  static constexpr size_t kSlots = 6;
  static constexpr Nanos kMaxAge = 8 * kSecond;

  void on_edge_forwarded(Nanos now, uint32_t edge, Nanos min_spacing);
  std::optional<Nanos> on_data(Nanos now, uint32_t end);
  bool has_edge() const { return have_edge_; }
  uint32_t max_edge() const { return max_edge_; }

 private:
  struct Slot {
    Nanos time = 0;
    uint32_t prev_edge = 0;
    bool pending = false;
  };
  std::array<Slot, kSlots> slots_{};
  Nanos last_record_ = 0;
  uint32_t max_edge_ = 0;
  bool have_edge_ = false;
  bool recorded_ = false;
};

// ---------------------------------------------------------------------------------------
// Both halves of the round trip from the handshake, timestamps or not.
//  phone opens:  SYN (from phone, t0) -> SYN-ACK (to phone, t1) -> ACK (from phone, t2):
//                server half = t1 - t0, phone half = t2 - t1
//  server opens: SYN (to phone, t0) -> SYN-ACK (from phone, t1) -> ACK (to phone, t2):
//                phone half = t1 - t0, server half = t2 - t1
// A half is not sampled when its first packet was retransmitted (Karn: ambiguous).
// Also records the phone's TSvals of its SYN and of its handshake ACK (tick hint).
class HandshakeTimer {
 public:
  void on_segment(Nanos now, bool from_subscriber, const TcpSegment& s);
  std::optional<Nanos> phone_half() const { return phone_half_; }
  std::optional<Nanos> server_half() const { return server_half_; }
  bool complete() const { return done_; }
  bool synack_seen() const { return synack_count_ > 0; }
  bool subscriber_opened() const { return sub_opened_; }
  bool syn_timestamps() const { return syn_ts_ && synack_ts_; }  // both SYNs carried TS
  // Subscriber SYN and handshake ACK with TSvals (phone-opened flows only).
  struct TsPair {
    Nanos a_syn = 0, a_ack = 0;
    uint32_t ts_syn = 0, ts_ack = 0;
  };
  std::optional<TsPair> ts_pair() const;

 private:
  Nanos syn_at_ = 0, synack_at_ = 0;
  std::optional<Nanos> phone_half_, server_half_;
  uint32_t synack_seq_ = 0;
  TsPair ts_{};
  uint8_t syn_count_ = 0, synack_count_ = 0;
  bool sub_opened_ = false;
  bool done_ = false;
  bool syn_ts_ = false, synack_ts_ = false, ack_ts_ = false;
};

// One direction's round trip WITHOUT timestamps, by sequence/ACK matching: when no probe is
// outstanding, the gateway notes the end and time of a data segment it forwards; the first
// ACK at or beyond that end closes the probe (one sample per round trip, like a classic TCP
// RTT timer). Karn: a retransmission of the probed range while outstanding cancels the probe.
// Includes the receiver's delayed-ACK time: consumers take minima.
class AckProbe {
 public:
  static constexpr Nanos kMaxAge = 8 * kSecond;

  void on_data(Nanos now, uint32_t seq, uint32_t len);
  std::optional<Nanos> on_ack(Nanos now, uint32_t ack);

 private:
  Nanos time_ = 0;
  uint32_t end_ = 0;
  uint32_t high_ = 0;
  bool outstanding_ = false;
  bool have_high_ = false;
};

// Exponentially weighted moving average; the first sample initialises it.
class Ewma {
 public:
  void add(double x, double gain) {
    v_ = has_ ? v_ + gain * (x - v_) : x;
    has_ = true;
  }
  bool has() const { return has_; }
  double get() const { return v_; }
  void reset() { has_ = false; }

 private:
  double v_ = 0;
  bool has_ = false;
};

}  // namespace rsfc
