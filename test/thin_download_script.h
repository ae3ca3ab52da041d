// A 2G download whose ACKs thin out (lab/EXPERIMENTS.md Q23), as the gateway sees it: 1448-byte
// segments forwarded from `first_forward` on, each acknowledged as it is delivered while the
// link is busy until `thin_from`; then two segments a round trip, acknowledged together, until
// `end`. The ACKs then come further apart than the downlink regulator's control interval, so
// no delivered-rate sample closes. Shared by the regulator's scripted test and rsfc-replay's
// capture of the same download.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rsfc/core/types.h"

namespace rsfc::testscript {

struct ThinDownloadEvent {
  Nanos at;        // at the gateway
  bool data;       // a segment forwarded to the phone; else an ACK reaching the gateway
  uint32_t seq;    // the segment's start, or the ACK number
  Nanos received;  // ACK: when the phone received what it acknowledges (its TSval's time)
};

// `path`: gateway <-> phone one way; `service`: one segment's time on the link; `server`:
// gateway -> server -> gateway. In time order.
inline std::vector<ThinDownloadEvent> thin_download_events(Nanos path, Nanos service, Nanos server,
                                                           Nanos first_forward, Nanos thin_from,
                                                           Nanos end, uint32_t first_seq) {
  std::vector<ThinDownloadEvent> ev;
  uint32_t seq = first_seq;
  Nanos fwd = first_forward;
  for (; fwd < thin_from; fwd += service) {
    ev.push_back({fwd, true, seq, 0});
    seq += 1448;
    const Nanos received = fwd + path + service;
    ev.push_back({received + path, false, seq, received});
  }
  for (Nanos t = fwd + 2 * path + service; t < end;) {  // from the busy phase's last ACK
    const Nanos f = t + server;
    ev.push_back({f, true, seq, 0});
    ev.push_back({f, true, seq + 1448, 0});
    seq += 2 * 1448;
    const Nanos received = f + path + 2 * service;
    t = received + path;
    ev.push_back({t, false, seq, received});
  }
  std::stable_sort(
      ev.begin(), ev.end(),
      [](const ThinDownloadEvent& a, const ThinDownloadEvent& b) { return a.at < b.at; });
  return ev;
}

}  // namespace rsfc::testscript
