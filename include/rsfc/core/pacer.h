// Downlink pacing (docs/DESIGN.md §4b): the gateway releases a download's data no faster than
// a little above the rate at which the phone has been receiving it, so that the server's
// bursts wait at the gateway instead of in the base station's downlink buffer. The phone's
// other traffic (its uploads' ACKs, a page it loads) then no longer queues behind them, and
// the two directions' queues stop feeding each other through the ACK clock
// (lab/EXPERIMENTS.md Q16, Q22).
//
// The rate is the phone's own: bytes it acknowledged per span of its TCP timestamp clock (an
// ACK's TSval says when the phone received what it acknowledges), so an ACK's wait in the
// uplink buffer does not inflate it. Windowed maximum over `horizon`; the release rate is
// `gain` times that. Pure core: time in, release time out; the I/O shell holds the packet's
// verdict until then.
#pragma once

#include <cstdint>

#include "rsfc/core/estimators.h"
#include "rsfc/core/types.h"

namespace rsfc {

struct PacingParams {
  bool enabled = false;
  double gain = 1.05;             // release rate = gain x the phone's receive rate
  Nanos max_hold = 200 * kMilli;  // no packet is held longer than this
  Nanos sample = 50 * kMilli;     // a rate sample spans at least this much of the phone's clock
  Nanos horizon = 3 * kSecond;    // windowed maximum of the samples over this
  uint32_t min_samples = 4;       // no pacing before this many samples
  // Bytes that may leave back to back after the pacer has been idle (fq's quantum: two
  // full-sized segments). Without it a flow whose window is a few segments, acknowledged
  // once per window, is held on every window: the hold lengthens its round trip, its
  // receive rate falls with it, and the pacing rate with that (EXPERIMENTS Q22).
  uint32_t burst_bytes = 2920;
  // Pace a download only while its phone runs a bulk upload (regulated uploads, under the
  // uplink knob's rsfc and rsfc.per_subscriber; SubscriberUplink::uploads_bulk): the swing
  // pacing breaks needs one, and a download alone is then left to its windows, where the
  // pacer's lag behind a link that speeds up (gain per sample) would cost it (EXPERIMENTS
  // Q22).
  bool next_to_upload_only = false;
};

class DownlinkPacer {
 public:
  // An ACK from the phone: `ns_per_tick` is its timestamp clock's tick (0 = unknown: no
  // sample). ACKs without timestamps, reordered ones (TSval or ACK backwards) add nothing.
  void on_phone_ack(Nanos now, const TcpSegment& seg, double ns_per_tick, const PacingParams& p);
  // An ACK from a phone without timestamps: timed on the gateway's clock (its arrival, in
  // kUntimedTick), each sample spanning kUntimedSample (the ACKs' own wait in the uplink
  // jitters their arrival; a longer span averages it out). Used while the phone's upload
  // steps on its idle time (DownlinkQueueRegulator::paceable()).
  static constexpr Nanos kUntimedTick = 1 * kMilli;
  static constexpr Nanos kUntimedSample = 300 * kMilli;
  void on_phone_ack_untimed(Nanos now, const TcpSegment& seg, const PacingParams& p);

  // When a segment of `payload_bytes` arriving `now` may leave (payload, as the receive rate
  // counts what the phone acknowledged): `now` when
  // pacing is off for it, else no earlier than the schedule allows (each paced segment moves
  // it on by its spacing, and an idle pacer banks up to burst_bytes' worth), never later than
  // now + max_hold. `pace`: the segment is paced (data of a flow past its regulator's
  // startup); otherwise it only keeps its place behind held ones when `keep_order` (payload,
  // FIN or RST: a pure ACK may overtake).
  Nanos release_at(Nanos now, uint32_t payload_bytes, bool pace, bool keep_order,
                   const PacingParams& p);

  // The phone's receive rate (windowed maximum), bytes/s; 0 = none yet.
  double rate(Nanos now, const PacingParams& p) const;
  uint32_t samples() const { return samples_; }

 private:
  WindowedMax<6> max_rate_;  // bytes/s
  uint64_t sample_bytes_ = 0;
  uint32_t last_ack_ = 0;
  uint32_t sample_ts_ = 0;  // TSval at the sample's start
  uint32_t samples_ = 0;    // saturating
  bool have_ack_ = false;
  bool sampling_ = false;
  // The schedule: a paced segment leaves once it has passed the segment's spacing (while the
  // pacer is idle it lags now by the credit banked, at most burst_bytes' worth).
  Nanos next_release_ = 0;
  Nanos last_release_ = 0;  // latest release time given so far
};

}  // namespace rsfc
