// What the engine and the per-flow window regulators (UplinkRegulator, rsfc_controller.h;
// DownlinkRegulator, drwa.h) exchange: the decision a regulator hands back for each ACK, and
// the state the regulated uploads of one subscriber share (the engine keeps one per
// subscriber address, SubscriberTable). Pure and fixed-size, like the regulators.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "rsfc/core/estimators.h"
#include "rsfc/core/types.h"

namespace rsfc {

// A target window meaning "do not clamp".
constexpr uint32_t kNoClamp = std::numeric_limits<uint32_t>::max();

// A regulator's answer for one ACK. The engine applies min_window_bytes, the right-edge rule
// and the window scale itself.
struct WindowDecision {
  uint32_t window = kNoClamp;  // target bytes; kNoClamp = do not clamp
  bool stepped = false;        // a control step ran during this call: log a decision
  // A control step was due but a signal it needs was missing (the downlink queue regulator
  // past its startup: no rate, queue or round-trip reading): the window stays where the last
  // step left it. No decision is logged; the engine counts it.
  bool held = false;
};

// A knob holds a flow to its startup floor (before the knob's regulator exists: the engine;
// with a regulator in its startup: the startup clamp) only while the ACKs' sender has sent at
// most this much payload the other way, or the flow has carried more than this the knob's
// way. Past it the flow is a bulk transfer the other way, every segment of which carries the
// knob's window: each would be rewritten (and handed back whole with its verdict, never
// paced) to hold an edge for a transfer this way that has not started. One that starts later
// on the connection is held again from the edge already advertised, which is never pulled
// back. The engine counts both from the endpoints' ISNs (no memory per flow); a flow seen
// without its handshake has none, and its regulator's startup clamp holds as it comes.
constexpr uint32_t kStartupHoldOtherWay = 65536;
constexpr bool other_way_bulk(uint32_t sent_other_way, uint32_t carried_this_way) {
  return sent_other_way > kStartupHoldOtherWay && carried_this_way <= kStartupHoldOtherWay;
}

// Every packet a phone sends, for the upload law of a phone without TCP timestamps
// (UplinkRegulator::idle_law(), lab/EXPERIMENTS.md Q55-Q57): how long its uplink sat idle and
// how evenly its packets came. Without timestamps the only delay a gateway reads is a round
// trip through both of the phone's queues; the uplink's own state shows in its departures
// instead. A packet that comes more than kIdleGap of its own time at the uplink's capacity
// after the previous one left the link idle for the gap less that time; packets within
// kEvenGap of it came back to back, and the spread of those gaps (x = gap / its time) says
// whether the link serves evenly enough for idle time to mean anything. The capacity is the
// upload regulator's (set_capacity). Counts run from the phone's first packet (bytes and gaps
// modulo 2^32); each regulator reads them as differences between its steps.
class PhoneUplinkIdle {
 public:
  static constexpr double kIdleGap = 1.5;  // packet times: beyond it a gap is idle time
  static constexpr double kEvenGap = 3.0;  // packet times: under it a gap is back to back
  // x1, x2: units per 1.0. Fine enough that the spread's test reads as on exact sums (1/256
  // moved it on the simulator's 3G: Q57).
  static constexpr double kXUnit = 65536;
  struct Counts {
    uint64_t idle = 0;   // ns
    uint64_t x1 = 0;     // the back-to-back gaps' sum of x, in 1/kXUnit
    uint64_t x2 = 0;     // ... and of x^2
    uint32_t bytes = 0;  // IP bytes
    uint32_t gaps = 0;   // back-to-back gaps
  };

  void on_packet(Nanos now, uint32_t ip_bytes) {
    if (last_ > 0 && capacity_ > 0 && now >= last_) {
      const double t = static_cast<double>(ip_bytes) * 1e9 / static_cast<double>(capacity_);
      const double gap = static_cast<double>(now - last_);
      if (gap > kIdleGap * t) c_.idle += static_cast<uint64_t>(gap - t);
      if (gap < kEvenGap * t) {
        const double x = gap / t;
        c_.x1 += static_cast<uint64_t>(std::llround(x * kXUnit));
        c_.x2 += static_cast<uint64_t>(std::llround(x * x * kXUnit));
        ++c_.gaps;
      }
    }
    last_ = std::max(last_, now);
    c_.bytes += ip_bytes;
  }
  void set_capacity(double bytes_per_s) { capacity_ = static_cast<float>(bytes_per_s); }
  const Counts& counts() const { return c_; }
  // The law steered the phone's upload at a step; the downlink knob of its downloads follows
  // it for kLawHold (DownlinkQueueRegulator::set_uplink_law()).
  static constexpr Nanos kLawHold = 1 * kSecond;
  void law_stepped(Nanos now) { law_until_.set(now + kLawHold); }
  bool law_running(Nanos at) const { return law_until_.pending(at); }

 private:
  Nanos last_ = 0;
  Counts c_;
  float capacity_ = 0;  // bytes/s
  CoarseDeadline law_until_;
};

// What the regulated upload flows of one subscriber share. They fill one uplink buffer, so
// their delivered rates are shares of one link. A flow's own rate is a windowed maximum: it
// is taken at moments when its siblings sent less (their drains, their own limits) and so
// overstates the flow's share, and windows sized on it keep a queue between them (two to
// six uploads from one phone: 0.08-0.16 s mean in the simulation). Every member reports its
// new bytes here; at each control step a member caps its rate at its share of the bytes all
// members delivered since its previous step times the subscriber's rate (one windowed maximum
// over all of them); see UplinkRegulator::subscriber_share().
class SubscriberUplink {
 public:
  static constexpr Nanos kEpoch = 1 * kSecond;

  // A bulk upload for uploads_bulk(): this many bytes in the current epoch and the two
  // before (2 to 3 s). A request, a keepalive or a control connection sends less.
  static constexpr uint32_t kBulkBytes = 8192;

  void on_delivered(Nanos now, uint32_t bytes, Nanos interval) {
    if (!rate_.started()) rate_.start(seq_);
    rate_.on_data(now, seq_, bytes, interval);
    roll(epoch_of(now));
    seq_ += bytes;
  }
  // Whether a member delivered data since `since` (a regulated upload is running).
  bool delivered_since(Nanos since) const {
    return rate_.started() && rate_.last_new_at() >= since;
  }
  uint64_t total_bytes() const { return rate_.total_bytes(); }
  double rate(Nanos now, Nanos interval) const { return rate_.max(now, interval); }
  bool has_sample() const { return rate_.has_sample(); }
  PhoneUplinkIdle& idle() { return idle_; }
  const PhoneUplinkIdle& idle() const { return idle_; }

  // A member that fills its window reports it at its control steps; `epoch` is the member's
  // own bookkeeping (one count per member and epoch of kEpoch).
  void report_active(Nanos now, int64_t& epoch) {
    const int64_t e = now / kEpoch;
    roll(epoch_of(now));
    if (epoch != e) {
      epoch = e;
      if (active_[0] < std::numeric_limits<uint16_t>::max()) ++active_[0];
    }
  }
  // Whether a bulk upload is running: a member delivered within the last epoch, and either
  // the members delivered kBulkBytes or more in the current epoch and the two before, or one
  // reported in this epoch or the previous one that it uses its window (report_active). A
  // keepalive, a request or a control connection does neither. The second catches an upload
  // starved by a long round trip, which delivers little but fills its window (2G, behind its
  // phone's download queue: 1.4 KB a second for ten seconds in rsfc-simsuite 2g); the first,
  // an upload before its regulator has the signals to judge its window (its startup).
  bool uploads_bulk(Nanos now) const {
    if (!delivered_since(now - kEpoch)) return false;
    const uint32_t behind = epoch_of(now) - epoch_;  // epochs since the latest roll()
    const uint32_t from = behind < kMarks ? start_[behind] : seq_;
    return reported(behind) > 0 || seq_ - from >= kBulkBytes;
  }
  // Members that reported in this epoch or the previous one; at least 1.
  uint32_t active(Nanos now) const {
    return std::max<uint32_t>(reported(epoch_of(now) - epoch_), 1);
  }
  // Whether the members delivered less in the last whole epoch (1 s) than kShortFraction of
  // their best whole epoch of the 5-10 s before: the uplink is not full. On the gateway's
  // round trip a phone's two knobs hold one sum of its two queues, and this is the uplink's
  // own reading (data arriving from the phone, on the gateway's clock): the download's knob
  // gives way while it says so (Engine::downlink_target, lab/EXPERIMENTS.md Q47). False
  // before a best is known.
  static constexpr double kShortFraction = 0.85;
  static constexpr uint32_t kEpochsPerBest = 5;  // best_[0] covers this many epochs
  bool short_of_best(Nanos now) const {
    const uint32_t e = epoch_of(now);
    const uint32_t behind = e - epoch_;
    // The last whole epoch, e - 1: the one before epoch_, epoch_ itself, or one without a
    // delivery.
    const uint32_t ended = seq_ - start_[kMarks - 1];  // epoch_'s bytes
    const uint32_t last = behind == 0   ? start_[kMarks - 1] - start_[kMarks - 2]
                          : behind == 1 ? ended
                                        : 0;
    // The best of the last whole epoch's block and the block before: best_[0] is epoch_'s
    // block, best_[1] the one before it (epoch_'s own bytes are in neither until it ends).
    const auto d = static_cast<int32_t>((e - 1) / kEpochsPerBest - epoch_ / kEpochsPerBest);
    uint64_t best = 0;  // bytes
    if (d == 0 || d == 1) {
      best = uint64_t{best_[0]} * kBestUnit;
      if (behind >= 1) best = std::max<uint64_t>(best, ended);
    }
    if (d == 0 || d == -1) best = std::max<uint64_t>(best, uint64_t{best_[1]} * kBestUnit);
    return best > 0 && static_cast<double>(last) < kShortFraction * static_cast<double>(best);
  }

 private:
  static constexpr uint32_t kMarks = 3;
  // The epoch's number modulo 2^32 (136 years of epochs; comparisons look a few apart).
  static uint32_t epoch_of(Nanos now) { return static_cast<uint32_t>(now / kEpoch); }
  // Members that reported in the current epoch or the previous one, `behind` epochs after
  // the latest roll().
  uint32_t reported(uint32_t behind) const {
    if (behind == 0) return std::max(active_[0], active_[1]);
    return behind == 1 ? active_[0] : 0;
  }
  // Epoch e begins (at a delivery or a report): the counts move back by the epochs that
  // passed; those in between saw nothing.
  void roll(uint32_t e) {
    const uint32_t d = e - epoch_;
    if (d == 0) return;
    // The epoch that ended goes into the best of its block (short_of_best()).
    const uint32_t units = (seq_ - start_[kMarks - 1]) / kBestUnit;
    best_[0] = std::max(best_[0], static_cast<uint16_t>(std::min<uint32_t>(units, 0xffff)));
    const uint32_t from = epoch_ / kEpochsPerBest, to = e / kEpochsPerBest;
    if (to != from) {
      best_[1] = to - from == 1 ? best_[0] : 0;
      best_[0] = 0;
    }
    active_[1] = d == 1 ? active_[0] : 0;
    active_[0] = 0;
    for (uint32_t i = 0; i < kMarks; ++i) start_[i] = i + d < kMarks ? start_[i + d] : seq_;
    epoch_ = e;
  }

  static constexpr uint32_t kBestUnit = 256;  // best_: bytes per unit (16 MB a second at most)

  // [[no_unique_address]]: the members below start in DeliveredRate's tail padding, so that
  // best_ costs no byte (a million flows' state stays within issue 17's 512 MiB).
  [[no_unique_address]] DeliveredRate rate_;  // fed with a running byte count as its sequence
  uint32_t seq_ = 0;
  // uploads_bulk(): seq_ when the epoch two before the current one, the previous one and the
  // current one began (oldest first).
  uint32_t start_[kMarks] = {0, 0, 0};
  uint32_t epoch_ = ~uint32_t{0};  // the latest epoch a delivery or a report came in
  uint16_t active_[2] = {0, 0};    // members seen in the current / previous epoch (saturating)
  // short_of_best(): the most bytes a whole epoch delivered, in kBestUnit, in the block of
  // kEpochsPerBest epochs that epoch_ is in and in the block before it.
  uint16_t best_[2] = {0, 0};
  PhoneUplinkIdle idle_;  // every packet of the phone (Engine::feed_regulators)
};
static_assert(sizeof(SubscriberUplink) == sizeof(DeliveredRate) + 24 + sizeof(PhoneUplinkIdle));

}  // namespace rsfc
