// DRWA: Dynamic Receive Window Adjustment (Jiang et al., IMC 2012; docs/DESIGN.md §4), run at the
// gateway on the downlink knob (the window in ACKs FROM the subscriber). One
// DownlinkRegulator per flow, fixed size, no heap. Pure: time comes in as `now`.
//
// The published algorithm runs in the phone's TCP receiver:
//   once per RTT_est:  cwnd_est <- alpha * cwnd_est + (1 - alpha) * bytes_received_in_last_RTT
//                      rwnd     <- lambda * (RTT_min / RTT_est) * cwnd_est
//   (cwnd_est starts as the bytes received in the first RTT_est; RTT_min = min RTT_est)
// At the gateway:
//   bytes received = the phone's cumulative ACK advancing (what the phone got, after the
//                    downlink buffer - not what the gateway forwarded into it);
//   RTT_est        = the average of the gateway -> phone -> gateway samples of the last
//                    interval (server data TSval echoed in the phone's TSecr; without
//                    timestamps: a seq/ACK probe) plus the minimum server half (phone ACK TSval
//                    echoed by the server; handshake);
//   RTT_min        = minimum RTT_est (handshake included). By default kept for the flow's
//                    life as published: DRWA holds the queue at about (lambda - 1) * RTT_min,
//                    so a minimum that ages out would be re-learnt with that queue in it and
//                    ratchet upwards. rtt_min_horizon > 0 lets it age (route changes).
//   interval       = max(RTT_est, interval_floor).
// In steady state the flow keeps lambda * rate * RTT_min in flight: a queue of about
// (lambda - 1) * RTT_min (published behaviour with lambda = 3).
//
// HOW THE ENGINE DRIVES IT (per flow whose downlink.policy is drwa):
//   every segment TO the subscriber (server data):  on_downlink_segment(now, seg, params)
//   every segment FROM the subscriber:              on_uplink_segment(now, seg, params)
//     then, for an ACK:  target_window(now, params) -> bytes (kNoClamp = leave alone;
//                        the engine applies the floor, right-edge rule and scale).
//   SYN and SYN-ACK segments must be fed too.
#pragma once

#include <cstdint>
#include <optional>

#include "rsfc/core/estimators.h"
#include "rsfc/core/params.h"
#include "rsfc/core/regulator.h"

namespace rsfc {

class DownlinkRegulator {
 public:
  static constexpr Nanos kMinSlotSpacing = 1 * kMilli;
  static constexpr int kSlotsPerRtt = 6;
  static constexpr Nanos kIdleIntervals = 2;  // an interval longer than this many RTTs: idle

  void on_downlink_segment(Nanos now, const TcpSegment& s, const DrwaParams& p);
  void on_uplink_segment(Nanos now, const TcpSegment& s, const DrwaParams& p);
  WindowDecision target_window(Nanos now, const DrwaParams& p);

  // --- Read-outs (decision log, tests), as of the last update. ---
  bool timestamps() const { return ts_; }
  std::optional<Nanos> rtt_est() const;
  std::optional<Nanos> rtt_min() const;
  double cwnd_est() const { return cwnd_est_; }  // bytes
  double rate() const { return rate_; }          // bytes/s over the last interval
  uint32_t window() const;                       // kNoClamp until the first update
  uint32_t updates() const { return updates_; }

 private:
  void take_handshake(Nanos now, const DrwaParams& p);
  void update(Nanos now, const DrwaParams& p);
  Nanos spacing() const;
  static Nanos horizon(const DrwaParams& p);
  std::optional<Nanos> server_half(Nanos now, const DrwaParams& p) const;

  HandshakeTimer hs_;
  EchoSampler phone_echo_;   // server data TSvals -> phone TSecr
  EchoSampler server_echo_;  // phone TSvals -> server TSecr
  AckProbe phone_probe_;     // timestamp-less phone half
  WindowedMin<4> server_half_min_;
  // The current interval: what the phone acknowledged in it and its phone-half samples.
  struct Interval {
    Nanos start = 0;
    uint64_t acked = 0;     // bytes
    double sample_sum = 0;  // ns
    uint32_t samples = 0;
    bool open = false;  // the first data acknowledged opens the first interval
    void restart(Nanos now) {
      start = now;
      acked = 0;
      sample_sum = 0;
      samples = 0;
    }
  };
  Interval interval_;
  uint32_t ack_high_ = 0;
  // RTT_est and RTT_min, as of the last update (0 = unknown).
  double rtt_est_ = 0;  // ns
  WindowedMin<4> rtt_min_;
  Nanos rtt_min_v_ = 0;
  // The window and what it is computed from, as of the last update.
  double cwnd_est_ = 0;  // bytes
  double rate_ = 0;      // bytes/s
  double rwnd_ = 0;      // bytes, valid when clamping_
  uint32_t updates_ = 0;
  bool ts_ = false;
  bool ts_decided_ = false;
  bool ack_known_ = false;
  bool hs_taken_ = false;
  bool clamping_ = false;
};

}  // namespace rsfc
