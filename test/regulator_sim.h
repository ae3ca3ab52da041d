// A small packet-level simulation of the setting the regulators live in, for tests and tuning:
//
//   phone --[uplink: rate, drop-tail buffer]--(P1)--> gateway --(P2)--> server
//   phone <--(P1)--[downlink: rate, drop-tail buffer]-- gateway <--(P2)-- server
//
// TCP endpoints are simplified but keep what matters here: a CUBIC-like sender (slow start
// with a HyStart-like delay exit, cubic growth, beta 0.7, cwnd grows only when cwnd-limited),
// the send window taken only from ACKs that advance (or grow the window), timestamps with a
// per-host tick and offset, TS.Recent as RFC 7323, delayed ACKs (every 2nd segment, 40 ms),
// out-of-order buffering. Losses are announced to the sender one RTT after the drop (an
// oracle standing in for SACK). The gateway runs the regulators exactly as the engine does
// (feed, target, clamp with floor and right-edge rule, report the edge). The downlink knob
// runs DRWA (Policy::kDrwa), a static clamp, or the downlink queue regulator
// (Scenario::downlink_queue_regulator, a sim-only switch: downlink_regulator.h), with the
// core's downlink pacer if Scenario::pacing says so (pacer.h). Test-only
// code: allocations and std::function are fine here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "rsfc/core/downlink_regulator.h"
#include "rsfc/core/drwa.h"
#include "rsfc/core/pacer.h"
#include "rsfc/core/rsfc_controller.h"

namespace rsfc::sim {

struct Packet {
  int flow = -1;  // -1: ping
  bool from_phone = true;
  TcpSegment seg;
  uint32_t wnd = 0;     // bytes
  uint32_t sacked = 0;  // SACK stand-in: bytes the receiver holds beyond its cumulative ACK
  Nanos ping_sent = 0;
  uint32_t size() const { return seg.payload_len + 52; }
};

class EventQueue {
 public:
  void at(Nanos t, std::function<void()> f) { q_.push({t, n_++, std::move(f)}); }
  Nanos now() const { return now_; }
  void run_until(Nanos end) {
    while (!q_.empty() && q_.top().t <= end) {
      Ev e = q_.top();
      q_.pop();
      now_ = e.t;
      e.f();
    }
    now_ = end;
  }

 private:
  struct Ev {
    Nanos t;
    uint64_t n;
    std::function<void()> f;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : n > o.n; }
  };
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> q_;
  uint64_t n_ = 0;
  Nanos now_ = 0;
};

// Drop-tail FIFO with a constant rate (optionally with outages and rate steps), then a
// propagation delay.
class Link {
 public:
  struct Outage {
    Nanos start, end;
  };
  Link(EventQueue& ev, double rate_bps, uint64_t buffer_bytes, Nanos prop)
      : ev_(ev), rate_bps_(rate_bps), buffer_(buffer_bytes), prop_(prop) {}
  struct PropStep {
    Nanos at, prop;  // from `at` on, packets leaving the queue take `prop`
  };
  std::function<void(const Packet&)> deliver;
  std::vector<Outage> outages;
  std::vector<PropStep> prop_steps;  // in time order
  struct RateStep {
    Nanos at;         // from `at` on, the link transmits at ...
    double rate_bps;  // ... this rate (> 0)
  };
  // In time order. The schedule is known in advance, so each packet's transmission end is
  // the exact integral of the rate from its start: packets queued before a drop are sent at
  // the new rate once it applies.
  std::vector<RateStep> rate_steps;
  // Optional, replaces the rate: when a packet of `bytes` whose transmission may start at
  // `start` has left (called in FIFO order; test/sim_trace_link.h).
  std::function<Nanos(Nanos start, uint32_t bytes)> service;

  // False when the buffer refused the packet.
  bool send(const Packet& p) {
    const Nanos now = ev_.now();
    while (!inq_.empty() && inq_.front().first <= now) {
      queued_ -= inq_.front().second;
      inq_.pop_front();
    }
    if (rate_bps_ <= 0) {
      ev_.at(now + prop_at(now), [this, p] { deliver(p); });
      return true;
    }
    if (queued_ + p.size() > buffer_) {
      ++drops;
      return false;
    }
    Nanos start = std::max(now, tail_);
    for (const Outage& o : outages) {
      if (start >= o.start && start < o.end) start = o.end;
    }
    tail_ = service ? service(start, p.size()) : transmission_end(start, p.size() * 8.0);
    queued_ += p.size();
    inq_.push_back({tail_, p.size()});
    ev_.at(tail_ + prop_at(tail_), [this, p] { deliver(p); });
    return true;
  }
  double rate_at(Nanos t) const {
    double rate = rate_bps_;
    for (const RateStep& s : rate_steps) {
      if (s.at <= t) rate = s.rate_bps;
    }
    return rate;
  }
  // When `bits` starting at `start` have left, with the rate following rate_steps.
  Nanos transmission_end(Nanos start, double bits) const {
    Nanos t = start;
    for (const RateStep& s : rate_steps) {
      if (s.at <= t) continue;
      const double rate = rate_at(t);
      const double span_bits = rate * static_cast<double>(s.at - t) / 1e9;
      if (bits <= span_bits) break;
      bits -= span_bits;
      t = s.at;
    }
    return t + static_cast<Nanos>(bits / rate_at(t) * 1e9);
  }
  Nanos prop_at(Nanos t) const {
    Nanos prop = prop_;
    for (const PropStep& s : prop_steps) {
      if (s.at <= t) prop = s.prop;
    }
    return prop;
  }
  // Time a packet entering now would wait before its transmission starts.
  Nanos queue_delay() const { return std::max<Nanos>(0, tail_ - ev_.now()); }
  uint64_t drops = 0;

 private:
  EventQueue& ev_;
  double rate_bps_;
  uint64_t buffer_;
  Nanos prop_;
  Nanos tail_ = 0;
  uint64_t queued_ = 0;
  std::deque<std::pair<Nanos, uint32_t>> inq_;
};

struct TsClock {
  Nanos tick = kMilli;
  Nanos offset = 0;
  uint32_t at(Nanos t) const { return static_cast<uint32_t>((t + offset) / tick); }
};

// One TCP endpoint: bulk sender and/or receiver of one connection.
class TcpEnd {
 public:
  static constexpr uint32_t kMss = 1448;
  TcpEnd(EventQueue& ev, TsClock clock, bool timestamps, uint32_t isn, uint32_t rcv_buffer)
      : ev_(ev), clock_(clock), ts_(timestamps), isn_(isn), rcv_buffer_(rcv_buffer) {}

  std::function<void(const Packet&)> out;  // hand a packet to the network
  std::function<bool()> has_data = [] { return false; };

  // --- sender state ---
  double cwnd = 10.0 * kMss;
  double ssthresh = 1e12;
  uint32_t snd_una = 0, snd_nxt = 0, snd_wnd = 65535, snd_wl1 = 0;
  Nanos min_rtt = 0;
  Nanos srtt = 0;
  // --- receiver state ---
  uint32_t rcv_nxt = 0;
  uint64_t delivered = 0;  // in-order payload bytes received

  void connect_as_client(uint32_t peer_isn_unused = 0) {
    (void)peer_isn_unused;
    snd_una = snd_nxt = isn_;
    Packet p = base();
    p.seg.seq = isn_;
    p.seg.flags = tcpflag::kSyn;
    p.seg.mss_option = kMss + 12;
    p.wnd = 65535;
    snd_nxt = isn_ + 1;
    out(p);
  }

  void on_packet(const Packet& p) {
    const TcpSegment& s = p.seg;
    if (s.syn()) {
      rcv_nxt = s.seq + 1;
      ts_recent_ = s.tsval;
      if (s.ack_flag()) {  // SYN-ACK: we are the client
        snd_una = s.ack;
        snd_wnd = p.wnd;
        snd_wl1 = s.seq;
        established_ = true;
        send_ack();
        try_send();
      } else {  // SYN: we are the server
        snd_una = isn_;
        snd_nxt = isn_ + 1;
        snd_wnd = p.wnd;  // the SYN's window (never scaled) until the first ACK
        Packet r = base();
        r.seg.seq = isn_;
        r.seg.ack = rcv_nxt;
        r.seg.flags = tcpflag::kSyn | tcpflag::kAck;
        r.seg.mss_option = kMss + 12;
        r.wnd = 65535;
        rcv_wup_ = rcv_nxt;
        out(r);
      }
      return;
    }
    if (!established_ && s.ack_flag() && s.ack == isn_ + 1) {
      established_ = true;
      snd_una = s.ack;
    }
    // TS.Recent (RFC 7323): from segments at or before the last ACK we sent.
    if (ts_ && s.has_ts && seq_le(s.seq, rcv_wup_)) ts_recent_ = s.tsval;
    if (s.ack_flag()) on_ack(p);
    if (s.payload_len > 0) on_data(p);
  }

  // Oracle loss notification (stands in for SACK): the segment [seq, seq+len) was dropped.
  void on_loss(uint32_t seq, uint32_t len) {
    if (!seq_gt(seq + len, snd_una)) return;
    lost_.push_back({seq, len});
    lost_bytes_ += len;
    if (!in_recovery_ || seq_ge(seq, recovery_end_)) {
      in_recovery_ = true;
      recovery_end_ = snd_nxt;
      const double pk = cwnd / kMss;
      w_max_ = (pk < w_max_) ? pk * (1.0 + kBeta) / 2.0 : pk;
      cwnd = std::max(2.0 * kMss, cwnd * kBeta);
      ssthresh = cwnd;
      epoch_ = 0;
      ++loss_events;
    }
    try_send();
  }
  uint64_t loss_events = 0;

 private:
  static constexpr double kBeta = 0.7;
  static constexpr double kC = 0.4;

  Packet base() const {
    Packet p;
    p.seg.has_ts = ts_;
    p.seg.tsval = clock_.at(ev_.now());
    p.seg.tsecr = ts_recent_;
    return p;
  }
  uint32_t in_flight() const {
    const uint32_t outstanding = snd_nxt - snd_una;
    const uint32_t gone = lost_bytes_ + sacked_;
    return outstanding > gone ? outstanding - gone : 0;
  }
  uint32_t ooo_bytes() const {
    uint32_t n = 0;
    for (const auto& [b, e] : ooo_) n += e - b;
    return n;
  }

  void on_ack(const Packet& p) {
    const TcpSegment& s = p.seg;
    const bool advances = seq_gt(s.ack, snd_una);
    sacked_ = p.sacked;
    if (advances || seq_gt(s.seq, snd_wl1) || (s.seq == snd_wl1 && p.wnd > snd_wnd)) {
      snd_wnd = p.wnd;
      snd_wl1 = s.seq;
    }
    if (advances) {
      const uint32_t acked = s.ack - snd_una;
      snd_una = s.ack;
      // Lost segments now acknowledged are no longer missing.
      for (auto it = lost_.begin(); it != lost_.end();) {
        if (seq_le(it->first + it->second, snd_una)) {
          lost_bytes_ -= it->second;
          it = lost_.erase(it);
        } else {
          ++it;
        }
      }
      if (in_recovery_ && seq_ge(snd_una, recovery_end_)) in_recovery_ = false;
      if (ts_ && s.has_ts && s.tsecr != 0) {
        const Nanos rtt = static_cast<Nanos>(clock_.at(ev_.now()) - s.tsecr) * clock_.tick;
        rtt_sample(std::max<Nanos>(rtt, clock_.tick));
      }
      if (seq_ge(snd_una, window_end_)) {  // a new window of data: reset the usage marks
        window_end_ = snd_nxt;
        prev_max_out_ = max_out_;
        max_out_ = in_flight();
        was_cwnd_limited_ = cwnd_limited_;
        cwnd_limited_ = false;
      }
      const bool limited = cwnd < ssthresh ? cwnd < 2.0 * std::max(max_out_, prev_max_out_)
                                           : (cwnd_limited_ || was_cwnd_limited_);
      if (!in_recovery_ && limited) grow(acked);
      validate_cwnd();
    }
    try_send();
  }

  // Linux tcp_cwnd_validate / tcp_cwnd_application_limited: a sender limited by the
  // application or the receive window for an RTO lets cwnd decay towards what it used.
  void validate_cwnd() {
    const Nanos now = ev_.now();
    if (cwnd_limited_ || was_cwnd_limited_) {
      cwnd_stamp_ = now;
      used_ = 0;
      return;
    }
    used_ = std::max<double>(used_, std::max(max_out_, prev_max_out_));
    const Nanos rto = std::max<Nanos>(200 * kMilli, 2 * srtt);
    if (now - cwnd_stamp_ >= rto) {
      const double win_used = std::max(used_, 10.0 * kMss);
      if (win_used < cwnd) {
        // tcp_current_ssthresh(): max(ssthresh, 3/4 cwnd), so a sender still in slow start
        // (ssthresh infinite) stays in it.
        ssthresh = std::max(ssthresh, 0.75 * cwnd);
        cwnd = (cwnd + win_used) / 2;
      }
      cwnd_stamp_ = now;
      used_ = 0;
    }
  }

  void rtt_sample(Nanos rtt) {
    min_rtt = min_rtt == 0 ? rtt : std::min(min_rtt, rtt);
    srtt = srtt == 0 ? rtt : (7 * srtt + rtt) / 8;
    // HyStart-like delay exit from slow start.
    if (cwnd < ssthresh && cwnd >= 16.0 * kMss) {
      const Nanos eta = std::clamp<Nanos>(min_rtt / 8, 4 * kMilli, 16 * kMilli);
      if (rtt > min_rtt + eta) ssthresh = cwnd;
    }
  }

  void grow(uint32_t acked) {
    if (cwnd < ssthresh) {
      cwnd += acked;
      return;
    }
    const Nanos now = ev_.now();
    const double pk = cwnd / kMss;
    if (epoch_ == 0) {
      epoch_ = now;
      origin_ = std::max(pk, w_max_);
      k_ = pk < w_max_ ? std::cbrt((w_max_ - pk) / kC) : 0.0;
      w_est_ = pk;
    }
    const double t = static_cast<double>(now - epoch_ + min_rtt) / 1e9;
    double target = origin_ + kC * std::pow(t - k_, 3.0);
    w_est_ += 3.0 * (1 - kBeta) / (1 + kBeta) * (acked / static_cast<double>(kMss)) / pk;
    target = std::max(target, w_est_);
    if (target > pk) {
      cwnd += std::min(target - pk, pk) / pk * acked;
    } else {
      cwnd += 0.01 * acked / pk;
    }
  }

  void on_data(const Packet& p) {
    const TcpSegment& s = p.seg;
    const uint32_t end = s.seq + s.payload_len;
    bool immediate = false;
    if (s.seq == rcv_nxt) {
      rcv_nxt = end;
      delivered += s.payload_len;
      if (!ooo_.empty()) immediate = true;
      for (auto it = ooo_.begin(); it != ooo_.end();) {
        if (seq_le(it->first, rcv_nxt)) {
          if (seq_gt(it->second, rcv_nxt)) {
            delivered += it->second - rcv_nxt;
            rcv_nxt = it->second;
          }
          it = ooo_.erase(it);
        } else {
          ++it;
        }
      }
      ++unacked_;
    } else if (seq_gt(s.seq, rcv_nxt)) {
      ooo_[s.seq] = std::max(ooo_[s.seq], end);
      immediate = true;
    } else {
      immediate = true;  // old duplicate
    }
    if (immediate || unacked_ >= 2) {
      send_ack();
    } else if (!delack_armed_) {
      delack_armed_ = true;
      const uint64_t gen = ++delack_gen_;
      ev_.at(ev_.now() + 40 * kMilli, [this, gen] {
        if (delack_armed_ && gen == delack_gen_) send_ack();
      });
    }
  }

  void send_ack() {
    delack_armed_ = false;
    unacked_ = 0;
    Packet p = base();
    p.seg.seq = snd_nxt;
    p.seg.ack = rcv_nxt;
    p.seg.flags = tcpflag::kAck;
    p.wnd = rcv_buffer_;
    p.sacked = ooo_bytes();
    rcv_wup_ = rcv_nxt;
    out(p);
  }

  void try_send() {
    if (!established_) return;
    for (;;) {
      // Retransmissions first.
      if (!lost_.empty()) {
        if (in_flight() + kMss > cwnd) {
          cwnd_limited_ = true;
          return;
        }
        max_out_ = std::max<double>(max_out_, in_flight() + kMss);
        auto [seq, len] = lost_.front();
        lost_.pop_front();
        lost_bytes_ -= len;
        if (seq_le(seq + len, snd_una)) continue;
        transmit(seq, len);
        continue;
      }
      if (!has_data()) return;
      if (seq_gt(snd_nxt + kMss, snd_una + snd_wnd)) return;  // receive-window limited
      if (in_flight() + kMss > cwnd) {
        cwnd_limited_ = true;
        return;
      }
      max_out_ = std::max<double>(max_out_, in_flight() + kMss);
      transmit(snd_nxt, kMss);
      snd_nxt += kMss;
    }
  }

  void transmit(uint32_t seq, uint32_t len) {
    Packet p = base();
    p.seg.seq = seq;
    p.seg.ack = rcv_nxt;
    p.seg.flags = tcpflag::kAck;
    p.seg.payload_len = len;
    p.wnd = rcv_buffer_;
    rcv_wup_ = rcv_nxt;
    unacked_ = 0;
    out(p);
  }

  EventQueue& ev_;
  TsClock clock_;
  bool ts_;
  uint32_t isn_;
  uint32_t rcv_buffer_;
  bool established_ = false;
  uint32_t ts_recent_ = 0;
  uint32_t rcv_wup_ = 0;
  std::map<uint32_t, uint32_t> ooo_;
  int unacked_ = 0;
  bool delack_armed_ = false;
  uint64_t delack_gen_ = 0;
  std::deque<std::pair<uint32_t, uint32_t>> lost_;
  uint32_t lost_bytes_ = 0;
  uint32_t sacked_ = 0;
  bool in_recovery_ = false;
  uint32_t recovery_end_ = 0;
  bool cwnd_limited_ = false;      // blocked by cwnd in the current window of data
  bool was_cwnd_limited_ = false;  // ... in the previous one
  double max_out_ = 0, prev_max_out_ = 0, used_ = 0;
  uint32_t window_end_ = 0;
  Nanos cwnd_stamp_ = 0;
  double w_max_ = 0, origin_ = 0, k_ = 0, w_est_ = 0;
  Nanos epoch_ = 0;
};

struct Scenario {
  double up_bps = 2e6;
  uint64_t up_buffer = 1'000'000;
  double down_bps = 7.2e6;
  uint64_t down_buffer = 256'000;
  Nanos p1 = 10 * kMilli;  // phone <-> gateway, one way
  Nanos p2 = 10 * kMilli;  // gateway <-> server, one way
  Nanos phone_tick = kMilli;
  bool phone_timestamps = true;
  int uploads = 1;
  int downloads = 1;
  Nanos upload_start = 0;    // relative to the downloads (which start at 0)
  Nanos upload_stagger = 0;  // upload i starts i * this later
  Nanos duration = 40 * kSecond;
  Nanos warmup = 10 * kSecond;  // measurements from here on
  Policy uplink = Policy::kOff;
  Policy downlink = Policy::kOff;
  uint32_t static_window = 65535;
  uint32_t min_window = 2920;
  RsfcParams rsfc;
  DrwaParams drwa;
  std::vector<Link::Outage> up_outages;
  std::vector<Link::PropStep> p1_steps;       // phone <-> gateway delay changes, both directions
  std::vector<Link::RateStep> up_rate_steps;  // uplink capacity changes (up_bps until the first)
  std::string trace_path;                     // optional CSV of the first upload's controller
  bool subscriber_state = true;               // the flows' regulators share SubscriberUplink
  // The downlink knob runs DownlinkQueueRegulator (whatever `downlink` says).
  bool downlink_queue_regulator = false;
  DownlinkQueueParams dlq;
  // The downlink queue regulator sees nothing before this time (it starts mid-flow, as after
  // a reload to downlink rsfc, a restart or a flow adopted from conntrack).
  Nanos downlink_regulator_start = 0;
  std::vector<Link::Outage> down_outages;       // downlink outages (packets wait them out)
  std::vector<Link::RateStep> down_rate_steps;  // downlink capacity changes (down_bps until)
  Nanos download_start = 0;                     // the downloads start this much later
  uint32_t seed = 0;  // != 0: other TS clock offsets (phone and server): another phase
  // A restart of the regulating daemon (docs/DESIGN.md §5a): from restart_at on, for
  // restart_gap, windows pass unclamped and no regulator is fed (the queue is bypassed); then
  // every flow gets a fresh regulator that never saw its handshake (and fresh subscriber
  // state), told it was adopted (on_adopted) when adopt_drains. 0 = no restart.
  Nanos restart_at = 0;
  Nanos restart_gap = 100 * kMilli;
  bool adopt_drains = true;
  // Optional: shapes the phone's links (uplink, downlink) before the run, e.g. trace-driven
  // service (test/sim_trace_link.h).
  std::function<void(Link& up, Link& down)> shape_links;
  // Downlink pacing (pacer.h) of the downloads the downlink queue regulator steers, as
  // Engine::pace runs it: a segment not rewritten leaves the gateway at the pacer's release
  // time (data once the regulator is past its startup), and the regulator times it from then.
  // pacing.next_to_upload_only: only while the phone's regulated upload delivers (the shared
  // subscriber state says so: subscriber_state).
  PacingParams pacing;
  // The downlink queue regulator's auto-T ceiling while the phone's regulated upload does not
  // deliver (RsfcParams::threshold_ceiling_download_alone, as Engine::downlink_target runs
  // it), where it is above dlq's.
  Nanos dlq_ceiling_alone = 0;
};

// The links of the SimLinks tests: 3G-like (the defaults: 2 Mbit/s / 1 MB up, 7.2 Mbit/s /
// 256 KB down, 20 ms one way) and LTE-like (10 Mbit/s / 2 MB up, 30 Mbit/s / 1 MB down, 30 ms
// one way).
inline Scenario three_g_link() {
  return {};
}
// The lab suite's 2G cell: 100 kbit/s both ways, 200 ms base round trip, 10 s of buffer.
inline Scenario two_g_link() {
  Scenario s;
  s.up_bps = 100e3;
  s.down_bps = 100e3;
  s.up_buffer = 125'000;
  s.down_buffer = 125'000;
  s.p1 = 90 * kMilli;
  s.p2 = 10 * kMilli;
  return s;
}
// A constant link of one's own (rsfc-simsuite's link: cell, EXPERIMENTS Q32): the base round
// trip with 10 ms of it on the server's side; buffers of 0 bytes take 4 s of the direction's
// rate, at least 125 KB (deep, as a cellular link's).
inline Scenario constant_link(double up_bps, double down_bps, Nanos rtt, uint64_t up_buffer = 0,
                              uint64_t down_buffer = 0) {
  const auto deep = [](double bps) {
    return std::max<uint64_t>(125'000, static_cast<uint64_t>(bps / 8 * 4));
  };
  Scenario s;
  s.up_bps = up_bps;
  s.down_bps = down_bps;
  s.p2 = 5 * kMilli;
  s.p1 = rtt / 2 - s.p2;
  s.up_buffer = up_buffer ? up_buffer : deep(up_bps);
  s.down_buffer = down_buffer ? down_buffer : deep(down_bps);
  return s;
}
inline Scenario lte_link() {
  Scenario s;
  s.up_bps = 10e6;
  s.up_buffer = 2'000'000;
  s.down_bps = 30e6;
  s.down_buffer = 1'000'000;
  s.p1 = 20 * kMilli;
  s.p2 = 10 * kMilli;
  return s;
}

// One sample of the measurement period (every 10 ms from the warmup on).
struct Sample {
  Nanos t = 0;
  double upq_ms = 0;            // uplink queue delay
  uint64_t up_delivered = 0;    // in-order bytes the uploads' servers received so far, all flows
  double downq_ms = 0;          // downlink queue delay
  uint64_t down_delivered = 0;  // in-order bytes the downloads' phones received so far
};

struct Result {
  double upload_bps = 0;    // sum over uploads, goodput over the measurement period
  double download_bps = 0;  // sum over downloads
  std::vector<double> upload_each_bps;
  double ping_p50_ms = 0, ping_p95_ms = 0;
  double upq_mean_ms = 0, upq_p95_ms = 0;  // uplink queue delay, sampled every 10 ms
  double downq_mean_ms = 0, downq_p95_ms = 0;
  uint64_t up_drops = 0, down_drops = 0;
  uint64_t paced = 0;  // segments the pacer held (Scenario::pacing)
  double jain = 1;
  std::vector<Sample> samples;
  std::string summary() const {
    char b[256];
    std::snprintf(b, sizeof b,
                  "up %.2f Mbit/s  down %.2f Mbit/s  ping p50 %.0f p95 %.0f ms  upq mean %.0f "
                  "p95 %.0f ms  downq p95 %.0f ms  drops up %llu down %llu  jain %.3f",
                  upload_bps / 1e6, download_bps / 1e6, ping_p50_ms, ping_p95_ms, upq_mean_ms,
                  upq_p95_ms, downq_p95_ms, static_cast<unsigned long long>(up_drops),
                  static_cast<unsigned long long>(down_drops), jain);
    return b;
  }
};

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

class Simulation {
 public:
  explicit Simulation(const Scenario& sc)
      : sc_(sc),
        up_(ev_, sc.up_bps, sc.up_buffer, sc.p1),
        down_(ev_, sc.down_bps, sc.down_buffer, sc.p1),
        to_srv_(ev_, 0, 0, sc.p2),
        from_srv_(ev_, 0, 0, sc.p2) {
    up_.outages = sc.up_outages;
    up_.prop_steps = sc.p1_steps;
    up_.rate_steps = sc.up_rate_steps;
    down_.prop_steps = sc.p1_steps;
    down_.outages = sc.down_outages;
    down_.rate_steps = sc.down_rate_steps;
    if (sc.shape_links) sc.shape_links(up_, down_);
    up_.deliver = [this](const Packet& p) { gw_from_phone(p); };
    to_srv_.deliver = [this](const Packet& p) { server_receive(p); };
    from_srv_.deliver = [this](const Packet& p) { gw_from_server(p); };
    down_.deliver = [this](const Packet& p) { phone_receive(p); };
    if (!sc.trace_path.empty()) trace_ = std::fopen(sc.trace_path.c_str(), "w");
    dlq_steps_ = DownlinkStepParams(sc.dlq, sc.dlq_ceiling_alone);
  }
  ~Simulation() {
    if (trace_) std::fclose(trace_);
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  Result run() {
    const int n = sc_.uploads + sc_.downloads;
    for (int i = 0; i < n; ++i) {
      const bool upload = i < sc_.uploads;
      auto f = std::make_unique<FlowState>();
      f->upload = upload;
      if (sc_.subscriber_state) f->rsfc.attach(&phone_uplink_);  // one phone: one subscriber
      const Nanos phase = static_cast<Nanos>(sc_.seed) * 7'654'321;
      TsClock phone_clock{sc_.phone_tick, 123'456'789 + i * 7'777'777 + phase};
      TsClock srv_clock{kMilli, 987'654'321 + i * 3'333'333 + 3 * phase};
      const bool ts = sc_.phone_timestamps;
      f->phone_isn = 1000u + 100000u * i;
      f->server_isn = 0xfffff000u - 1000u * i;
      f->phone = std::make_unique<TcpEnd>(ev_, phone_clock, ts, f->phone_isn, 6u << 20);
      f->server = std::make_unique<TcpEnd>(ev_, srv_clock, ts, f->server_isn, 6u << 20);
      if (upload) {
        f->phone->has_data = [] { return true; };
      } else {
        f->server->has_data = [] { return true; };
      }
      const int id = i;
      f->phone->out = [this, id](Packet p) {
        p.flow = id;
        p.from_phone = true;
        phone_send(p);
      };
      f->server->out = [this, id](Packet p) {
        p.flow = id;
        p.from_phone = false;
        from_srv_.send(p);
      };
      flows_.push_back(std::move(f));
      const Nanos start =
          (upload ? sc_.upload_start + i * sc_.upload_stagger : sc_.download_start) +
          i * 3 * kMilli;
      ev_.at(start, [this, id] { flows_[id]->phone->connect_as_client(); });
    }
    if (sc_.restart_at > 0) {
      ev_.at(sc_.restart_at, [this] { bypass_ = true; });
      ev_.at(sc_.restart_at + sc_.restart_gap, [this] { restart(); });
    }
    schedule_ping(50 * kMilli);
    schedule_sample(sc_.warmup);
    ev_.at(sc_.warmup, [this] {
      for (auto& f : flows_) f->delivered_at_warmup = receiver(*f).delivered;
    });
    ev_.run_until(sc_.duration);

    Result r;
    const double secs = static_cast<double>(sc_.duration - sc_.warmup) / 1e9;
    double sum = 0, sum2 = 0;
    for (auto& f : flows_) {
      const double bps =
          static_cast<double>(receiver(*f).delivered - f->delivered_at_warmup) * 8.0 / secs;
      if (f->upload) {
        r.upload_bps += bps;
        r.upload_each_bps.push_back(bps);
        sum += bps;
        sum2 += bps * bps;
      } else {
        r.download_bps += bps;
      }
    }
    if (sc_.uploads > 0 && sum2 > 0) r.jain = sum * sum / (sc_.uploads * sum2);
    r.ping_p50_ms = percentile(pings_, 0.5);
    r.ping_p95_ms = percentile(pings_, 0.95);
    double m = 0;
    for (double x : upq_) m += x;
    r.upq_mean_ms = upq_.empty() ? 0 : m / static_cast<double>(upq_.size());
    r.upq_p95_ms = percentile(upq_, 0.95);
    m = 0;
    for (double x : downq_) m += x;
    r.downq_mean_ms = downq_.empty() ? 0 : m / static_cast<double>(downq_.size());
    r.downq_p95_ms = percentile(downq_, 0.95);
    r.up_drops = up_.drops;
    r.down_drops = down_.drops;
    r.paced = paced_packets;
    r.samples = samples_;
    return r;
  }

  const UplinkRegulator& uplink_regulator(int flow) const { return flows_[flow]->rsfc; }
  const DownlinkRegulator& downlink_regulator(int flow) const { return flows_[flow]->drwa; }
  const DownlinkQueueRegulator& downlink_queue_regulator(int flow) const {
    return flows_[flow]->dlq;
  }
  std::map<DownlinkState, uint64_t> down_state_steps;  // control steps per state, downloads
  uint64_t paced_packets = 0;                          // segments the pacer held (Scenario::pacing)
  // Called after every control step of a download's DownlinkQueueRegulator (optional).
  std::function<void(int flow, Nanos now, const DownlinkQueueRegulator&)> on_down_step;
  std::map<RsfcState, uint64_t> state_steps;  // control steps per state, all uploads
  // Called after every control step of an upload's controller (optional).
  std::function<void(int flow, Nanos now, const UplinkRegulator&)> on_step;

 private:
  struct FlowState {
    bool upload = true;
    std::unique_ptr<TcpEnd> phone, server;
    UplinkRegulator rsfc;
    DownlinkRegulator drwa;
    DownlinkQueueRegulator dlq;
    DownlinkPacer pacer;
    uint32_t phone_isn = 0, server_isn = 0;
    bool isns_known = true;  // false after a restart: the new regulators never saw them
    uint32_t edge_to_phone = 0, edge_to_server = 0;
    bool edge_to_phone_valid = false, edge_to_server_valid = false;
    uint64_t delivered_at_warmup = 0;
  };
  static TcpEnd& receiver(FlowState& f) { return f.upload ? *f.server : *f.phone; }

  // Engine::bulk_other_way: the ACK's sender has sent more than 64 KB and the knob's own way
  // carried at most that (counted from the ISNs; unknown after a restart).
  static bool bulk_other_way(const FlowState& f, const Packet& p) {
    if (!f.isns_known) return false;
    const uint32_t sender = p.from_phone ? f.phone_isn : f.server_isn;
    const uint32_t carrier = p.from_phone ? f.server_isn : f.phone_isn;
    return other_way_bulk(p.seg.seq + p.seg.payload_len - (sender + 1), p.seg.ack - (carrier + 1));
  }

  // The engine's rewrite rule: only lower, never below the floor, never pull the right edge
  // back. Returns the window actually forwarded.
  uint32_t clamp(uint32_t orig, uint32_t ack, uint32_t target, bool edge_valid,
                 uint32_t edge) const {
    if (target == kNoClamp) return orig;
    uint64_t w = std::max<uint64_t>(target, sc_.min_window);
    if (edge_valid && seq_gt(edge, ack)) w = std::max<uint64_t>(w, edge - ack);
    return static_cast<uint32_t>(std::min<uint64_t>(w, orig));
  }

  // Engine::with_sacked: an rsfc knob's target counts out the bytes the ACK's sender holds
  // above its cumulative ACK (here the SACK stand-in, Packet::sacked).
  static uint32_t with_sacked(uint32_t target, const Packet& p) {
    if (target == kNoClamp) return target;
    return static_cast<uint32_t>(std::min<uint64_t>(uint64_t{target} + p.sacked, kNoClamp - 1));
  }

  void phone_send(const Packet& p) {
    if (!up_.send(p) && p.seg.payload_len > 0) {
      FlowState& f = *flows_[p.flow];
      const Nanos delay = std::max<Nanos>(f.phone->srtt, 50 * kMilli);
      const uint32_t seq = p.seg.seq, len = p.seg.payload_len;
      TcpEnd* s = f.phone.get();
      ev_.at(ev_.now() + delay, [s, seq, len] { s->on_loss(seq, len); });
    }
  }

  void gw_from_phone(Packet p) {
    if (p.flow < 0) {  // ping: echo at the server
      to_srv_.send(p);
      return;
    }
    if (bypass_) {
      to_srv_.send(p);
      return;
    }
    FlowState& f = *flows_[p.flow];
    const Nanos now = ev_.now();
    // The phone's tick shared between its flows (Engine::take_phone_tick / note_phone_tick:
    // the engine keeps it with the subscriber's shared state, which a regulated upload holds;
    // it has an uplink regulator only for a flow that sends payload).
    const bool share = sc_.uplink == Policy::kRsfc && sc_.subscriber_state;
    // Engine::feed_regulators: every packet of a phone without timestamps times its uplink.
    // (with pacing only).
    if (share && !p.seg.has_ts && sc_.rsfc.idle_law && sc_.pacing.enabled) {
      phone_uplink_.idle().on_packet(now, p.size());
    }
    if (sc_.uplink == Policy::kRsfc) {
      if (share && phone_tick_ > 0) f.rsfc.sibling_tick(phone_tick_);
      f.rsfc.on_uplink_segment(now, p.seg, sc_.rsfc);
      if (share && p.seg.payload_len > 0 && f.rsfc.measured_tick() > 0) {
        phone_tick_ = f.rsfc.measured_tick();
      }
    }
    const bool dlq_on = sc_.downlink_queue_regulator && now >= sc_.downlink_regulator_start;
    // The phone's SYN, for the downlink knob (with timestamps or on the gateway's round trip:
    // hold_handshake_window).
    if (p.seg.syn() && !p.seg.ack_flag() && dlq_on && (p.seg.has_ts || sc_.dlq.round_trip_no_ts)) {
      p.wnd = std::min(p.wnd, startup_floor_bytes(sc_.dlq.initial_window_bytes));
    }
    if (dlq_on) {
      if (share && phone_tick_ > 0) f.dlq.sibling_tick(phone_tick_);
      f.dlq.on_uplink_segment(now, p.seg, sc_.dlq);
      if (share && f.dlq.measured_tick() > 0) phone_tick_ = f.dlq.measured_tick();
      if (sc_.pacing.enabled && !p.seg.has_ts && sc_.rsfc.idle_law) {
        f.pacer.on_phone_ack_untimed(now, p.seg, sc_.pacing);
      } else if (sc_.pacing.enabled) {
        f.pacer.on_phone_ack(now, p.seg, f.dlq.ns_per_tick(), sc_.pacing);
      }
    } else if (sc_.downlink == Policy::kDrwa) {
      f.drwa.on_uplink_segment(now, p.seg, sc_.drwa);
    }
    if (p.seg.ack_flag() && !p.seg.syn()) {
      uint32_t target = kNoClamp;
      if (dlq_on) {
        target = downlink_queue_target(p.flow, f, now, bulk_other_way(f, p));
      } else if (sc_.downlink == Policy::kDrwa) {
        target = f.drwa.target_window(now, sc_.drwa).window;
      }
      if (!sc_.downlink_queue_regulator && sc_.downlink == Policy::kStatic) {
        target = sc_.static_window;
      }
      if (dlq_on) target = with_sacked(target, p);
      p.wnd = clamp(p.wnd, p.seg.ack, target, f.edge_to_server_valid, f.edge_to_server);
      const uint32_t edge = p.seg.ack + p.wnd;
      if (!f.edge_to_server_valid || seq_gt(edge, f.edge_to_server)) f.edge_to_server = edge;
      f.edge_to_server_valid = true;
      if (dlq_on) f.dlq.on_window_forwarded(edge);
    }
    to_srv_.send(p);
  }

  // The restarted daemon: nothing of the old one survives (docs/DESIGN.md §5a).
  void restart() {
    phone_uplink_ = SubscriberUplink{};
    phone_tick_ = 0;
    for (auto& f : flows_) {
      f->rsfc = UplinkRegulator{};
      if (sc_.subscriber_state) f->rsfc.attach(&phone_uplink_);
      if (sc_.adopt_drains) f->rsfc.on_adopted();
      f->drwa = DownlinkRegulator{};
      f->dlq = DownlinkQueueRegulator{};
      f->pacer = DownlinkPacer{};
      f->isns_known = false;
      f->edge_to_phone_valid = f->edge_to_server_valid = false;
    }
    bypass_ = false;
  }

  // Engine::phone_uploads: a bulk upload of the phone's is running.
  bool phone_uploads(Nanos now) const {
    return sc_.uplink == Policy::kRsfc && sc_.subscriber_state && phone_uplink_.uploads_bulk(now);
  }

  // Engine::note_uplink_law: whether the phone's upload stepped on its idle time since the
  // download's last step.
  void note_uplink_law(FlowState& f) const {
    if (!f.dlq.round_trip()) return;
    const bool share = sc_.uplink == Policy::kRsfc && sc_.subscriber_state;
    f.dlq.set_uplink_law(share && phone_uplink_.idle().law_running(f.dlq.last_step_at()));
  }

  // Engine::downlink_target's choice of parameters.
  uint32_t downlink_queue_target(int flow, FlowState& f, Nanos now, bool release) {
    note_uplink_law(f);
    const auto choice = dlq_steps_.choose(
        f.dlq, now, [&] { return phone_uploads(now); },
        [&] { return phone_uplink_.short_of_best(now); });
    const WindowDecision d = f.dlq.target_window(now, dlq_steps_[choice], release);
    if (d.stepped) {
      ++down_state_steps[f.dlq.state()];
      if (on_down_step) on_down_step(flow, now, f.dlq);
    }
    return d.window;
  }

  void server_receive(const Packet& p) {
    if (p.flow < 0) {
      from_srv_.send(p);
      return;
    }
    flows_[p.flow]->server->on_packet(p);
  }

  void gw_from_server(Packet p) {
    if (p.flow < 0) {
      down_.send(p);
      return;
    }
    FlowState& f = *flows_[p.flow];
    const Nanos now = ev_.now();
    if (bypass_) {
      forward_down(f, p);
      return;
    }
    if (sc_.uplink == Policy::kRsfc) f.rsfc.on_downlink_segment(now, p.seg, sc_.rsfc);
    const uint32_t wnd_in = p.wnd;
    // The engine holds an rsfc knob's handshake window to the startup floor (Engine::
    // hold_handshake_window): the SYN-ACK's, for the uplink knob.
    if (p.seg.syn() && p.seg.ack_flag() && sc_.uplink == Policy::kRsfc) {
      p.wnd = std::min(p.wnd, startup_floor_bytes(sc_.rsfc.initial_window_bytes));
    }
    const bool dlq_on = sc_.downlink_queue_regulator && now >= sc_.downlink_regulator_start;
    const bool paced = dlq_on && sc_.pacing.enabled;
    if (dlq_on && !paced) {
      f.dlq.on_downlink_segment(now, p.seg, sc_.dlq);  // paced: below, at its release
    } else if (!dlq_on && sc_.downlink == Policy::kDrwa) {
      f.drwa.on_downlink_segment(now, p.seg, sc_.drwa);
    }
    if (p.seg.ack_flag() && !p.seg.syn()) {
      uint32_t target = kNoClamp;
      if (sc_.uplink == Policy::kRsfc) {
        const WindowDecision d = f.rsfc.target_window(now, sc_.rsfc, bulk_other_way(f, p));
        target = d.window;
        if (d.stepped) {
          ++state_steps[f.rsfc.state()];
          if (trace_) trace(p.flow, f);
          if (on_step) on_step(p.flow, now, f.rsfc);
        }
      }
      if (sc_.uplink == Policy::kStatic) target = sc_.static_window;
      if (sc_.uplink == Policy::kRsfc) target = with_sacked(target, p);
      p.wnd = clamp(p.wnd, p.seg.ack, target, f.edge_to_phone_valid, f.edge_to_phone);
      const uint32_t edge = p.seg.ack + p.wnd;
      if (!f.edge_to_phone_valid || seq_gt(edge, f.edge_to_phone)) f.edge_to_phone = edge;
      f.edge_to_phone_valid = true;
      if (sc_.uplink == Policy::kRsfc) f.rsfc.on_window_forwarded(now, edge, sc_.rsfc);
    }
    if (!paced) {
      forward_down(f, p);
      return;
    }
    // Engine::pace: a rewritten segment leaves at once; data is paced while the regulator
    // steers and knows the phone's clock; a FIN or RST keeps its place, a pure ACK may overtake.
    Nanos at = now;
    if (p.wnd == wnd_in) {
      const bool data = p.seg.payload_len > 0;
      const bool keep_order = data || p.seg.fin() || p.seg.rst();
      const bool gate = !sc_.pacing.next_to_upload_only || phone_uploads(now);
      note_uplink_law(f);
      at = f.pacer.release_at(now, p.seg.payload_len, data && f.dlq.paceable() && gate, keep_order,
                              sc_.pacing);
    }
    f.dlq.on_downlink_segment(now, at, p.seg, sc_.dlq);
    if (at <= now) {
      forward_down(f, p);
    } else {
      ++paced_packets;
      FlowState* fp = &f;
      ev_.at(at, [this, fp, p] { forward_down(*fp, p); });
    }
  }

  void forward_down(FlowState& f, const Packet& p) {
    if (!down_.send(p) && p.seg.payload_len > 0) {
      const Nanos delay = std::max<Nanos>(f.server->srtt, 50 * kMilli);
      const uint32_t seq = p.seg.seq, len = p.seg.payload_len;
      TcpEnd* s = f.server.get();
      ev_.at(ev_.now() + delay, [s, seq, len] { s->on_loss(seq, len); });
    }
  }

  void phone_receive(const Packet& p) {
    if (p.flow < 0) {
      if (p.ping_sent >= sc_.warmup) {
        pings_.push_back(static_cast<double>(ev_.now() - p.ping_sent) / 1e6);
      }
      return;
    }
    flows_[p.flow]->phone->on_packet(p);
  }

  void schedule_ping(Nanos t) {
    ev_.at(t, [this, t] {
      Packet p;
      p.flow = -1;
      p.ping_sent = ev_.now();
      p.seg.payload_len = 32;
      up_.send(p);
      if (t + 100 * kMilli < sc_.duration) schedule_ping(t + 100 * kMilli);
    });
  }

  void schedule_sample(Nanos t) {
    ev_.at(t, [this, t] {
      upq_.push_back(static_cast<double>(up_.queue_delay()) / 1e6);
      downq_.push_back(static_cast<double>(down_.queue_delay()) / 1e6);
      uint64_t up_delivered = 0, down_delivered = 0;
      for (auto& f : flows_) {
        (f->upload ? up_delivered : down_delivered) += receiver(*f).delivered;
      }
      samples_.push_back({t, upq_.back(), up_delivered, downq_.back(), down_delivered});
      if (t + 10 * kMilli < sc_.duration) schedule_sample(t + 10 * kMilli);
    });
  }

  void trace(int flow, const FlowState& f) {
    const UplinkRegulator& r = f.rsfc;
    std::fprintf(trace_, "%d,%.3f,%s,%u,%.1f,%.1f,%.1f,%.0f,%.1f,%.1f,%.1f,%.0f,%.1f\n", flow,
                 static_cast<double>(ev_.now()) / 1e9, r.state_name(), r.window(),
                 r.t_buff() ? static_cast<double>(*r.t_buff()) / 1e6 : -1.0,
                 r.rtt_used() ? static_cast<double>(*r.rtt_used()) / 1e6 : -1.0,
                 static_cast<double>(r.threshold()) / 1e6, r.rate() * 8,
                 static_cast<double>(up_.queue_delay()) / 1e6,
                 static_cast<double>(down_.queue_delay()) / 1e6,
                 r.rtt_min() ? static_cast<double>(*r.rtt_min()) / 1e6 : -1.0, f.phone->cwnd,
                 static_cast<double>(r.rtt_now()) / 1e6);
  }

  Scenario sc_;
  DownlinkStepParams dlq_steps_;   // sc_.dlq, with dlq_ceiling_alone
  SubscriberUplink phone_uplink_;  // declared before flows_: outlives their regulators
  Nanos phone_tick_ = 0;           // the phone's tick as one of its flows measured it
  bool bypass_ = false;            // the daemon is restarting (Scenario::restart_at)
  EventQueue ev_;
  Link up_, down_, to_srv_, from_srv_;
  std::vector<std::unique_ptr<FlowState>> flows_;
  std::vector<double> pings_, upq_, downq_;
  std::vector<Sample> samples_;
  FILE* trace_ = nullptr;
};

inline Result simulate(const Scenario& sc) {
  Simulation s(sc);
  return s.run();
}

}  // namespace rsfc::sim
