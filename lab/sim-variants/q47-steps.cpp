// Q47 (lab/EXPERIMENTS.md): a phone without timestamps on 3G (or `deep`: 0.5 / 2 Mbit/s at
// 100 ms), an upload next to a download, the shipped settings. Prints both knobs' state at the
// downlink knob's steps (at most every 250 ms) with the link's true queues, then the queues
// and rates every 0.5 s. With q47-one-sum.patch applied its switches act (e.g. Q47S=1).
//
//   B=build; g++ -std=c++20 -O2 -Iinclude -I$B/generated -Itest lab/sim-variants/q47-steps.cpp
//     -Wl,--start-group $B/librsfc_core.a $B/librsfc_regulators.a $B/librsfc_packet.a
//     -Wl,--end-group -o q47-steps   (one line)
//   ./q47-steps [deep]
// W is the law's window; swing the swing window's, which bounds what the ACK asks for from
// below (the applied window is the larger).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "regulator_sim.h"

using namespace rsfc;
using namespace rsfc::sim;

int main(int argc, char** argv) {
  Scenario s = three_g_link();
  if (argc > 1 && std::string(argv[1]) == "deep") s = constant_link(500e3, 2000e3, 100 * kMilli);
  s.duration = 38 * kSecond;
  s.warmup = 0;
  s.rsfc.threshold_ceiling = 30 * kMilli;
  s.rsfc.threshold_floor = std::min(s.rsfc.threshold_floor, s.rsfc.threshold_ceiling);
  s.dlq.threshold_ceiling = 30 * kMilli;
  s.dlq.threshold_floor = std::min(s.dlq.threshold_floor, s.dlq.threshold_ceiling);
  s.dlq_ceiling_alone = 80 * kMilli;
  s.phone_timestamps = false;
  s.uplink = Policy::kRsfc;
  s.downlink = Policy::kRsfc;
  s.downlink_queue_regulator = true;
  s.pacing.enabled = true;
  s.pacing.next_to_upload_only = true;
  Simulation sim(s);
  Nanos last = 0;
  std::vector<std::pair<Nanos, std::string>> steps;
  const auto ms = [](std::optional<Nanos> v) { return v ? static_cast<double>(*v) / 1e6 : -1.0; };
  sim.on_down_step = [&](int, Nanos now, const DownlinkQueueRegulator& d) {
    if (now - last < 250 * kMilli) return;
    last = now;
    const UplinkRegulator& u = sim.uplink_regulator(0);
    char b[320];
    std::snprintf(b, sizeof b,
                  "%6.2f DL %-6s q %4.0f T %3.0f base %4.0f rate %5.2f W %7u swing %7.0f | UL %-8s q %4.0f "
                  "T %3.0f base %4.0f rate %5.2f W %7u",
                  static_cast<double>(now) / 1e9, d.state_name(), ms(d.q_down()),
                  static_cast<double>(d.threshold()) / 1e6, ms(d.rtt_min()), d.rate() * 8 / 1e6,
                  d.window(), d.swing_window(now, s.dlq), u.state_name(), ms(u.t_buff()),
                  static_cast<double>(u.threshold()) / 1e6, ms(u.rtt_min()), u.rate() * 8 / 1e6,
                  u.window());
    steps.emplace_back(now, b);
  };
  const Result r = sim.run();
  std::printf("%s\n", r.summary().c_str());
  for (const auto& [t, line] : steps) {
    const Sample* at = nullptr;
    for (const Sample& x : r.samples) {
      if (x.t <= t) at = &x;
    }
    std::printf("%s | queues up %3.0f down %3.0f ms\n", line.c_str(), at ? at->upq_ms : -1.0,
                at ? at->downq_ms : -1.0);
  }
  Nanos lt = 0;
  uint64_t lu = 0, ld = 0;
  for (const Sample& x : r.samples) {
    if (lt != 0 && x.t - lt < kSecond / 2) continue;
    const double sec = static_cast<double>(x.t - lt) / 1e9;
    std::printf("t %5.1f queues up %4.0f down %4.0f ms  Mbit/s up %5.2f down %5.2f\n",
                static_cast<double>(x.t) / 1e9, x.upq_ms, x.downq_ms,
                lt ? static_cast<double>(x.up_delivered - lu) * 8 / sec / 1e6 : 0.0,
                lt ? static_cast<double>(x.down_delivered - ld) * 8 / sec / 1e6 : 0.0);
    lt = x.t;
    lu = x.up_delivered;
    ld = x.down_delivered;
  }
  return 0;
}
