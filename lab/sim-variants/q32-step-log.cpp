// EXPERIMENTS.md Q32: per-second samples of one constant link in the packet simulator (the
// download's delivery, each direction's mean queue, the share of 10 ms samples with the
// downlink buffer empty), unregulated and with the shipped settings; with q32-step-log.patch
// applied, DLQ_DEBUG=1 also prints every step of the downlink regulator (state, W, rate,
// round trips, q_down, T, in flight) on stderr; NOUP=1 runs the download alone. From the
// repository, with the patch applied and `build` rebuilt:
//   g++ -std=c++20 -O2 -Iinclude -Itest -Ibuild/generated lab/sim-variants/q32-step-log.cpp \
//     build/librsfc_core.a build/librsfc_regulators.a build/librsfc_core.a \
//     build/librsfc_packet.a -o /tmp/steplog
//   DLQ_DEBUG=1 /tmp/steplog 2000 7200 300     # up kbit/s, down kbit/s, base RTT ms
// q32-empty-double-on-step-log.patch (on top of the step log) is the inert second try
// (EMPTYDOUBLE=1), q32-startup-full-pipe.patch the first (it fails the unit simulation).
#include <cstdio>
#include <cstdlib>
#include "regulator_sim.h"
using namespace rsfc; using namespace rsfc::sim;
int main(int argc, char** argv) {
  double up = atof(argv[1]), down = atof(argv[2]), rtt = atof(argv[3]);
  int paced = argc > 4 ? atoi(argv[4]) : 1;
  for (int reg = 0; reg < 2; ++reg) {
    Scenario s = constant_link(up * 1e3, down * 1e3, static_cast<Nanos>(rtt * 1e6));
    s.duration = 38 * kSecond; s.warmup = 8 * kSecond; s.uploads = std::getenv("NOUP") ? 0 : 1; s.downloads = 1;
    s.rsfc.threshold_ceiling = 30 * kMilli; s.dlq.threshold_ceiling = 30 * kMilli;
    s.dlq_ceiling_alone = 80 * kMilli;
    if (reg) { s.uplink = Policy::kRsfc; s.downlink = Policy::kRsfc; s.downlink_queue_regulator = true;
      s.pacing.enabled = paced; s.pacing.next_to_upload_only = true; }
    Result r = simulate(s);
    // fraction of 10 ms samples with the downlink queue empty; and delivered in those
    int empty = 0, n = 0; double upq_when_empty = 0, upq_all = 0;
    for (auto& x : r.samples) { ++n; upq_all += x.upq_ms; if (x.downq_ms < 0.5) { ++empty; upq_when_empty += x.upq_ms; } }
    printf("%s: %s\n  downq empty %.1f %% of samples; upq mean %.0f ms (when downq empty %.0f ms)\n",
           reg ? "regulated" : "off", r.summary().c_str(), 100.0 * empty / n, upq_all / n, empty ? upq_when_empty / empty : 0);
    // per-second download delivery & mean queues
    if (reg) {
      for (size_t i = 100; i < r.samples.size(); i += 100) {
        auto& a = r.samples[i - 100]; auto& b = r.samples[i];
        double dq = 0, uq = 0; int e = 0;
        for (size_t j = i - 100; j < i; ++j) { dq += r.samples[j].downq_ms; uq += r.samples[j].upq_ms; e += r.samples[j].downq_ms < 0.5; }
        printf("   t %5.1f  down %.2f Mbit/s  up %.2f  downq %.0f ms  upq %.0f ms  empty %d%%\n", b.t / 1e9,
               (b.down_delivered - a.down_delivered) * 8 / 1e6, (b.up_delivered - a.up_delivered) * 8 / 1e6, dq / 100, uq / 100, e);
      }
    }
  }
}
