// Downlink queueing delay from the phone's own clock (docs/DESIGN.md §4a).
//
// The gateway forwards the server's data towards the phone BEFORE the downlink buffer, and
// the phone stamps each ACK with its TSval when it sends it, BEFORE the uplink buffer. So for
// a data segment forwarded at gateway time f and the phone's first ACK that covers it,
//
//   d = TSval(ack) * g - f       = downlink one-way delay (incl. its queue) + the phone's
//                                  reaction + an unknown clock offset,
//   q_down = d - min(d)          min over a sliding window (`horizon`), as for t_buff,
//
// and the ACK's own wait in the uplink queue never enters: the gateway's arrival time of
// the ACK is not used. (A round trip from data to ACK, DRWA's signal, contains it: with a
// concurrent upload that is seconds.)
//
// Matching, with bounded memory (kSlots): the gateway times at most one new data segment per
// `min_spacing` (its end sequence and forwarding time). The first ACK whose cumulative ack
// covers timed segments gives one sample from the latest of them (the tightest bound: the
// phone received it last) and frees them all. So:
//  - delayed ACKs (one ACK per two segments, or a lone segment acked by the delayed-ACK
//    timer) and stretch ACKs (GRO/LRO on the phone) add the time from the timed segment's
//    arrival to the ACK: upward spikes only, which the short filter (minimum over `filter`)
//    and min(d) remove;
//  - reordered, duplicate and old ACKs cover no pending slot: no sample;
//  - a retransmission cancels the slots at or after its start (Karn: the ACK may answer
//    either copy);
//  - TSval wraps are unwrapped; g (ns per tick) comes from the caller (the flow's tick
//    estimate from the phone's segments) and stored values are re-based when it changes;
//  - after an idle gap longer than the horizon the windows restart (a suspended phone's TS
//    clock stopped);
//  - before g is known (the phone's clock takes a second or more to measure, seconds when its
//    handshake ACK waited behind an upload) the first kEarly matches are kept, compactly, and
//    enter min(d) at their forwarding times when g arrives. The first data went out into an
//    empty buffer; a baseline learnt only from the first sample after g is known would take
//    the flow's own start-up queue for empty (a 2G download behind an upload: 2.3 s of it).
// Pure, fixed-size, no heap.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "rsfc/core/estimators.h"
#include "rsfc/core/types.h"

namespace rsfc {

class DownlinkQueueEstimator {
 public:
  static constexpr size_t kSlots = 8;
  static constexpr Nanos kMaxAge = 8 * kSecond;  // a slot never answered is dropped then
  // ... but before the first sample, 30 s: a download nobody regulates yet (its regulator
  // waits for this first sample) can build a queue longer than kMaxAge, and slots dropped
  // before their ACK would keep it waiting for good.
  static constexpr Nanos kMaxAgeFirst = 30 * kSecond;
  // Matches kept while the tick is unknown, to be scored once it is known.
  static constexpr size_t kEarly = 3;

  // A data segment [seq, end) forwarded towards the phone at `now`. True when it was timed
  // (took a slot): not within `min_spacing` of the last one timed, and a slot was free.
  bool on_data(Nanos now, uint32_t seq, uint32_t end, Nanos min_spacing);
  // An ACK from the phone with its TSval; `ns_per_tick` is the phone's tick length g
  // (0 = not known yet: the slots are consumed, no sample, but the match is recorded, so
  // that the data's forwarding time can give the tick its lower bound). Returns the ACK's
  // raw q_down when it covered timed segments.
  std::optional<Nanos> on_ack(Nanos now, uint32_t ack, uint32_t tsval, double ns_per_tick,
                              Nanos horizon, Nanos filter);

  // Standing downlink queue: the minimum of the raw samples of the last `filter`.
  std::optional<Nanos> filtered(Nanos now, Nanos filter) const;
  std::optional<Nanos> last_raw() const {
    if (last_raw_ < 0) return std::nullopt;
    return last_raw_;
  }
  uint32_t samples() const { return samples_; }
  // End sequence of the timed segment the last covering ACK matched (with or without a
  // sample), and how many ACKs matched so far.
  uint32_t last_matched_end() const { return matched_end_; }
  uint64_t matches() const { return matches_; }

 private:
  struct Slot {
    Nanos time = 0;
    uint32_t end = 0;
    bool pending = false;
  };
  struct Match {
    Nanos time;
    uint32_t end;
  };
  // A match before the tick was known, relative to ref_time_ / ref_ticks_ (us: 35 minutes).
  // It enters the window at its forwarding time (not its ACK's: 4 bytes less per flow, and
  // it ages out of the horizon that much sooner).
  struct Early {
    int32_t sent_us = 0;
    int32_t ticks = 0;
  };
  void keep_early(Nanos sent, int64_t ticks);
  void score_early(Nanos horizon);
  std::optional<Match> take_covered(Nanos now, uint32_t ack);
  void restart();

  Nanos max_age() const { return samples_ == 0 ? kMaxAgeFirst : kMaxAge; }
  std::array<Slot, kSlots> slots_{};
  std::array<Early, kEarly> early_{};
  TsUnwrapper unwrap_;
  WindowedMinAux<8> dmin_;  // value d, aux = ticks - ref_ticks_
  WindowedMin<4> filter_;   // raw q_down samples
  Nanos last_record_ = 0;
  Nanos last_sample_ = 0;
  Nanos ref_time_ = 0;
  int64_t ref_ticks_ = 0;
  double g_used_ = 0;
  Nanos last_raw_ = -1;  // < 0: none (a sample is >= 0; no optional's padding per flow)
  uint32_t high_end_ = 0;
  uint32_t matched_end_ = 0;
  uint64_t matches_ = 0;
  uint32_t samples_ = 0;
  uint8_t early_n_ = 0;
  bool have_high_ = false;
  bool recorded_ = false;
  bool has_ref_ = false;  // ref_time_, ref_ticks_ set (g_used_ = 0 until the tick is known)
};

}  // namespace rsfc
