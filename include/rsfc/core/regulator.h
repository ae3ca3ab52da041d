// What the engine and the per-flow window regulators (UplinkRegulator, rsfc_controller.h;
// DownlinkRegulator, drwa.h) exchange: the decision a regulator hands back for each ACK, and
// the state the regulated uploads of one subscriber share (the engine keeps one per
// subscriber address, SubscriberTable). Pure and fixed-size, like the regulators.
#pragma once

#include <algorithm>
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

  void on_delivered(Nanos now, uint32_t bytes, Nanos interval) {
    if (!rate_.started()) rate_.start(seq_);
    rate_.on_data(now, seq_, bytes, interval);
    seq_ += bytes;
  }
  // Whether a member delivered data since `since` (a regulated upload is running).
  bool delivered_since(Nanos since) const {
    return rate_.started() && rate_.last_new_at() >= since;
  }
  uint64_t total_bytes() const { return rate_.total_bytes(); }
  double rate(Nanos now, Nanos interval) const { return rate_.max(now, interval); }
  bool has_sample() const { return rate_.has_sample(); }

  // A member that fills its window reports it at its control steps; `epoch` is the member's
  // own bookkeeping (one count per member and epoch of kEpoch).
  void report_active(Nanos now, int64_t& epoch) {
    const int64_t e = now / kEpoch;
    if (e != epoch_) {
      active_[1] = e == epoch_ + 1 ? active_[0] : 0;
      active_[0] = 0;
      epoch_ = e;
    }
    if (epoch != e) {
      epoch = e;
      ++active_[0];
    }
  }
  // Members that reported in this epoch or the previous one; at least 1.
  uint32_t active(Nanos now) const {
    const int64_t e = now / kEpoch;
    const uint32_t cur = e == epoch_ ? active_[0] : 0;
    const uint32_t prev = e == epoch_ ? active_[1] : (e == epoch_ + 1 ? active_[0] : 0);
    return std::max<uint32_t>({cur, prev, 1});
  }

 private:
  DeliveredRate rate_;  // fed with a running byte count as its sequence
  uint32_t seq_ = 0;
  int64_t epoch_ = -1;           // current epoch number
  uint32_t active_[2] = {0, 0};  // members seen in the current / previous epoch
};

}  // namespace rsfc
