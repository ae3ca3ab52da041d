#include "rsfc/core/drwa.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rsfc {

Nanos DownlinkRegulator::horizon(const DrwaParams& p) {
  return p.rtt_min_horizon > 0 ? p.rtt_min_horizon : std::numeric_limits<Nanos>::max() / 4;
}

Nanos DownlinkRegulator::spacing() const {
  const Nanos rtt = static_cast<Nanos>(rtt_est_);
  return std::max(kMinSlotSpacing, rtt / kSlotsPerRtt);
}

std::optional<Nanos> DownlinkRegulator::rtt_est() const {
  if (rtt_est_ <= 0) return std::nullopt;
  return std::llround(rtt_est_);
}

std::optional<Nanos> DownlinkRegulator::rtt_min() const {
  if (rtt_min_v_ <= 0) return std::nullopt;
  return rtt_min_v_;
}

uint32_t DownlinkRegulator::window() const {
  if (!clamping_) return kNoClamp;
  return rwnd_ >= static_cast<double>(kNoClamp - 1) ? kNoClamp - 1 : static_cast<uint32_t>(rwnd_);
}

std::optional<Nanos> DownlinkRegulator::server_half(Nanos now, const DrwaParams& p) const {
  const auto m = server_half_min_.get(now, horizon(p));
  if (!m) return std::nullopt;
  return m->value;
}

void DownlinkRegulator::take_handshake(Nanos now, const DrwaParams& p) {
  if (!ts_decided_ && hs_.synack_seen()) {
    ts_ = hs_.syn_timestamps();
    ts_decided_ = true;
  }
  if (hs_taken_ || !hs_.complete()) return;
  hs_taken_ = true;
  const auto ph = hs_.phone_half();
  const auto sh = hs_.server_half();
  if (sh) server_half_min_.update(now, *sh, horizon(p));
  if (ph && sh) {
    // The handshake round trip seeds RTT_est, RTT_min and the first interval.
    rtt_est_ = static_cast<double>(*ph + *sh);
    rtt_min_.update(now, *ph + *sh, horizon(p));
    rtt_min_v_ = *ph + *sh;
  }
}

void DownlinkRegulator::on_downlink_segment(Nanos now, const TcpSegment& s, const DrwaParams& p) {
  hs_.on_segment(now, false, s);
  take_handshake(now, p);
  if (ts_ && s.has_ts) {
    phone_echo_.on_forward(now, s.tsval, spacing());
    if (s.ack_flag() && !s.syn()) {
      if (auto sh = server_echo_.on_echo(now, s.tsecr)) {
        server_half_min_.update(now, *sh, horizon(p));
      }
    }
  }
  if (!ts_ && !s.syn()) phone_probe_.on_data(now, s.seq, s.payload_len);
}

void DownlinkRegulator::on_uplink_segment(Nanos now, const TcpSegment& s, const DrwaParams& p) {
  hs_.on_segment(now, true, s);
  if (!ts_decided_ && !hs_.synack_seen() && !s.syn()) ts_ = s.has_ts;  // handshake unseen
  take_handshake(now, p);
  if (ts_ && s.has_ts) server_echo_.on_forward(now, s.tsval, spacing());
  if (!s.ack_flag() || s.syn()) return;

  if (!ack_known_) {
    ack_known_ = true;
    ack_high_ = s.ack;
  } else if (seq_gt(s.ack, ack_high_)) {
    interval_.acked += s.ack - ack_high_;
    ack_high_ = s.ack;
    if (!interval_.open) {
      // The first data acknowledged opens the first interval.
      interval_.open = true;
      interval_.start = now;
      interval_.acked = 0;
    }
  }
  std::optional<Nanos> sample;
  if (ts_ && s.has_ts) {
    sample = phone_echo_.on_echo(now, s.tsecr);
  } else if (!ts_) {
    sample = phone_probe_.on_ack(now, s.ack);
  }
  if (sample) {
    interval_.sample_sum += static_cast<double>(*sample);
    ++interval_.samples;
  }
}

void DownlinkRegulator::update(Nanos now, const DrwaParams& p) {
  // RTT_est: the phone-half samples of this interval, averaged, plus the server half.
  if (interval_.samples > 0) {
    const auto sh = server_half(now, p);
    rtt_est_ = interval_.sample_sum / interval_.samples + static_cast<double>(sh ? *sh : 0);
    rtt_min_.update(now, std::llround(rtt_est_), horizon(p));
  }
  const double elapsed = static_cast<double>(now - interval_.start);
  rate_ = static_cast<double>(interval_.acked) * static_cast<double>(kSecond) / elapsed;
  if (updates_ == 0) {
    cwnd_est_ = static_cast<double>(interval_.acked);
  } else {
    cwnd_est_ = p.alpha * cwnd_est_ + (1.0 - p.alpha) * static_cast<double>(interval_.acked);
  }
  interval_.restart(now);
  ++updates_;
  const auto m = rtt_min_.get(now, horizon(p));
  if (!m || rtt_est_ <= 0) return;
  rtt_min_v_ = m->value;
  rwnd_ = p.lambda * (static_cast<double>(m->value) / rtt_est_) * cwnd_est_;
  clamping_ = true;
}

WindowDecision DownlinkRegulator::target_window(Nanos now, const DrwaParams& p) {
  WindowDecision d;
  if (interval_.open && rtt_est_ > 0) {
    const Nanos iv = std::max(p.interval_floor, static_cast<Nanos>(rtt_est_));
    if (now - interval_.start >= iv) {
      if (interval_.acked > 0 && now - interval_.start <= kIdleIntervals * iv) {
        update(now, p);
        d.stepped = true;
      } else {
        // Nothing received, or a few bytes spread over a long idle stretch: the receiver-side
        // algorithm only runs as data arrives, so an idle flow keeps its window (it must not
        // decay to the floor while idle); the next interval starts now.
        interval_.restart(now);
      }
    }
  }
  d.window = window();
  return d;
}

}  // namespace rsfc
