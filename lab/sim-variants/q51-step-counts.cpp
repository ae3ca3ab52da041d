// EXPERIMENTS.md Q51: at each knob's control steps after the warm-up, how often its auto T sits
// at the steady ceiling (10 ms) in q51-steady-ceiling.patch's first form, both transfers, five
// starts (traces) or seeds (constant links); Q51_SIGN picks the sign as in the patch. From the
// repository at 8509b75 with the patch applied and `build`'s libraries rebuilt:
//   g++ -std=c++20 -O2 -Iinclude -Itest -Ibuild/generated lab/sim-variants/q51-step-counts.cpp \
//     build/librsfc_core.a build/librsfc_regulators.a build/librsfc_core.a \
//     build/librsfc_packet.a -o step-counts
//   for c in lte 3g 2g Verizon-EVDO-driving TMobile-UMTS-driving Verizon-LTE-short; do
//     [Q51_SIGN=2] ./step-counts . $c; done
#include <cstdio>
#include <cstdlib>
#include <string>

#include "regulator_sim.h"
#include "sim_trace_link.h"
using namespace rsfc;
using namespace rsfc::sim;
int main(int argc, char** argv) {
  std::string dir = std::string(argv[1]) + "/lab/traces/";
  std::string tr = argv[2];
  int n = 5;
  long ds = 0, dlow = 0, us = 0, ulow = 0;
  for (int i = 0; i < n; ++i) {
    Scenario s;
    if (tr == "lte")
      s = lte_link();
    else if (tr == "3g")
      s = three_g_link();
    else if (tr == "2g")
      s = two_g_link();
    else {
      auto up = std::make_shared<CapacityTrace>(CapacityTrace::load(dir + tr + ".up"));
      auto down = std::make_shared<CapacityTrace>(CapacityTrace::load(dir + tr + ".down"));
      s = suite_trace_cell(up, down, suite_trace_offset(*up, *down, i, n));
    }
    s.seed = i;
    s.duration = 38 * kSecond;
    s.warmup = 8 * kSecond;
    s.uploads = 1;
    s.downloads = 1;
    s.rsfc.threshold_ceiling = 30 * kMilli;
    s.dlq.threshold_ceiling = 30 * kMilli;
    s.dlq_ceiling_alone = 80 * kMilli;
    s.uplink = Policy::kRsfc;
    s.downlink = Policy::kRsfc;
    s.downlink_queue_regulator = true;
    s.pacing.enabled = true;
    s.pacing.next_to_upload_only = true;
    s.rsfc.threshold_ceiling_steady = 10 * kMilli;
    s.dlq.threshold_ceiling_steady = 10 * kMilli;
    Simulation sim(s);
    sim.on_down_step = [&](int, Nanos now, const DownlinkQueueRegulator& r) {
      if (now < 8 * kSecond) return;
      ++ds;
      if (r.threshold() < 15 * kMilli) ++dlow;
    };
    sim.on_step = [&](int, Nanos now, const UplinkRegulator& r) {
      if (now < 8 * kSecond) return;
      ++us;
      if (r.threshold() < 15 * kMilli) ++ulow;
    };
    sim.run();
  }
  printf(
      "%-22s steps after warm-up with T at the steady ceiling: down %4.0f %% of %ld, up %4.0f %% "
      "of %ld\n",
      tr.c_str(), 100.0 * dlow / ds, ds, 100.0 * ulow / us, us);
}
