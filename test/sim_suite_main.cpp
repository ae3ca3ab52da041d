// rsfc-simsuite: the lab suite's cells in the packet simulator (test/regulator_sim.h), for
// the experiments in lab/EXPERIMENTS.md. Per start offset: the unregulated download alone and
// upload alone, then the policy's download with an upload and its download alone; prints
// download % / upload % of the unregulated ones and the phone's ping p95, then the medians.
//
//   rsfc-simsuite CELL [RUNS] [POLICY] [--threshold-packets N] [--floor-swing X]
//                 [--start SECONDS] [--pacing-gain X] [--pacing-burst BYTES]
//                 [--pacing-horizon SECONDS] [--threshold-ceiling MS] [--uplink-ceiling MS]
//                 [--downlink-ceiling MS] [--download-alone-ceiling MS] [--next-to-upload-only]
//                 [--no-timestamps] [--down-swing FACTOR:PERIOD_MS]
//
// --threshold-ceiling sets both knobs' auto-T ceiling (rsfc.threshold_ceiling_ms), then
// --uplink-ceiling / --downlink-ceiling one knob's; --download-alone-ceiling is
// rsfc.tuning.threshold_ceiling_download_alone_ms, --next-to-upload-only
// pacing.next_to_upload_only; --no-timestamps: the phone sends none (the uplink knob's lag
// signal, whose ceiling stays rsfc.tuning.threshold_ceiling_lag_ms); a constant cell's seed
// then also starts the download 37 ms x the seed later (a seed otherwise moves only the
// timestamp clocks' phases, and without them every seed ran the same run). --down-swing: a constant
// cell's downlink serves alternately at its rate and at its rate / FACTOR, PERIOD_MS each,
// for every run of the start (the unregulated ones too): a link that swings faster than a
// regulator's round trip, with nothing else of a trace's (lab/EXPERIMENTS.md Q42).
// --pacing-horizon: pacing.horizon_s, the span of the pacer's windowed maximum of the phone's
// receive rate (0.1 .. 60, as the configuration takes it; lab/EXPERIMENTS.md Q43).
//
// CELL: 2g, 3g, lte (constant links; RUNS seeds), a constant link of one's own,
// link:UP_KBPS:DOWN_KBPS:RTT_MS[:UP_BUFFER_KB:DOWN_BUFFER_KB] (RUNS seeds; base round trip
// RTT_MS with 10 ms of it on the server's side; buffers by default 4 s of the link's
// rate, at least 125 KB: deep, as a cellular link's), the same link whose downlink swings,
// swing:UP_KBPS:DOWN_KBPS:RTT_MS:FACTOR:PERIOD_MS[:UP_BUFFER_KB:DOWN_BUFFER_KB] (the lab's
// swing cell; as link: with --down-swing FACTOR:PERIOD_MS), or a trace of lab/traces (e.g.
// Verizon-EVDO-driving; RUNS start offsets spread over it, or RUNS seconds from --start on:
// 1 MB up / 512 KB down buffers, 50 ms base round trip, 38 s with 8 s of warm-up). POLICY:
// off, 64K, 128K, rsfc (uplink only), shipped (rsfc on both knobs; the default), paced
// (shipped with pacing.enabled) or downonly (paced with the uplink knob off: an upload rsfcd
// does not regulate, such as QUIC).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "regulator_sim.h"
#include "rsfc/io/config.h"
#include "sim_trace_link.h"

namespace {

using namespace rsfc;
using namespace rsfc::sim;

struct Policy_ {
  const char* name;
  Policy up;
  bool queue_regulator;
  Policy down;
  uint32_t static_window;
  bool pacing = false;
};

// Without timestamps a constant cell's seed starts the download this much later per seed.
constexpr Nanos kNoTimestampsSeedStep = 37 * kMilli;

constexpr Policy_ kPolicies[] = {{"off", Policy::kOff, false, Policy::kOff, 0},
                                 {"64K", Policy::kStatic, false, Policy::kStatic, 65536},
                                 {"128K", Policy::kStatic, false, Policy::kStatic, 131072},
                                 {"rsfc", Policy::kRsfc, false, Policy::kOff, 0},
                                 {"shipped", Policy::kRsfc, true, Policy::kRsfc, 0},
                                 {"paced", Policy::kRsfc, true, Policy::kRsfc, 0, true},
                                 // The shipped downlink knob with the uplink knob off: an
                                 // upload rsfcd does not regulate (QUIC), EXPERIMENTS Q46.
                                 {"downonly", Policy::kOff, true, Policy::kRsfc, 0, true}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int usage() {
  std::fprintf(stderr,
               "usage: rsfc-simsuite CELL [RUNS] [POLICY] [--threshold-packets N] "
               "[--floor-swing X] [--start SECONDS] [--pacing-gain X] [--pacing-burst BYTES]\n"
               "       [--pacing-horizon SECONDS] [--threshold-ceiling MS] [--uplink-ceiling MS]\n"
               "       [--downlink-ceiling MS] [--download-alone-ceiling MS] "
               "[--steady-ceiling MS] [--next-to-upload-only]\n"
               "       [--no-timestamps] [--down-swing FACTOR:PERIOD_MS]\n");
  return 2;
}

// The numbers of a colon-separated spec ("2000:7200:40"); nullopt unless every field is a
// finite number above 0.
std::optional<std::vector<double>> positive_fields(const std::string& spec) {
  std::vector<double> v;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(':', at), spec.size());
    char* stop = nullptr;
    const std::string field = spec.substr(at, end - at);
    const double x = std::strtod(field.c_str(), &stop);
    if (field.empty() || *stop != '\0' || !(x > 0) || !std::isfinite(x)) return std::nullopt;
    v.push_back(x);
    at = end + 1;
  }
  return v;
}

// UP_KBPS, DOWN_KBPS, RTT_MS[, UP_BUFFER_KB, DOWN_BUFFER_KB] (positive_fields).
std::optional<Scenario> link_from(const std::vector<double>& v) {
  if (v.size() != 3 && v.size() != 5) return std::nullopt;
  const Nanos rtt = static_cast<Nanos>(v[2] * 1e6);
  if (rtt <= 10 * kMilli) return std::nullopt;  // 10 ms of it are the server's side
  const auto kb = [&](size_t i) { return v.size() == 5 ? static_cast<uint64_t>(v[i] * 1e3) : 0; };
  return constant_link(v[0] * 1e3, v[1] * 1e3, rtt, kb(3), kb(4));
}

// link:UP_KBPS:DOWN_KBPS:RTT_MS[:UP_BUFFER_KB:DOWN_BUFFER_KB] without its prefix.
std::optional<Scenario> parse_link(const std::string& spec) {
  const auto v = positive_fields(spec);
  return v ? link_from(*v) : std::nullopt;
}

// A downlink swing, FACTOR:PERIOD_MS (--down-swing, and the swing cell's last two numbers).
struct Swing {
  double factor = 0, period_ms = 0;  // factor 0: none
};
std::optional<Swing> swing_from(double factor, double period_ms) {
  if (!(factor > 1) || !(period_ms >= 10)) return std::nullopt;
  return Swing{factor, period_ms};
}

// swing:UP_KBPS:DOWN_KBPS:RTT_MS:FACTOR:PERIOD_MS[:UP_BUFFER_KB:DOWN_BUFFER_KB] without its
// prefix, as the lab reads it (lab/exps/suite.py swing_cell): the link of `link:` whose
// downlink swings as --down-swing FACTOR:PERIOD_MS makes it (PERIOD_MS a whole number).
std::optional<std::pair<Scenario, Swing>> parse_swing(const std::string& spec) {
  const auto v = positive_fields(spec);
  if (!v || (v->size() != 5 && v->size() != 7)) return std::nullopt;
  std::vector<double> link = {(*v)[0], (*v)[1], (*v)[2]};
  if (v->size() == 7) link.insert(link.end(), {(*v)[5], (*v)[6]});
  const auto s = link_from(link);
  const auto sw = swing_from((*v)[3], (*v)[4]);
  if (!s || !sw || sw->period_ms != std::floor(sw->period_ms)) return std::nullopt;
  return std::pair{*s, *sw};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  double threshold_packets = -1, floor_swing = -1, pacing_gain = -1;
  long pacing_burst = -1;
  Nanos pacing_horizon = 0;  // 0: PacingParams' own
  double ceiling_ms = -1, up_ceiling_ms = -1, down_ceiling_ms = -1, alone_ceiling_ms = -1;
  double steady_ms =  // the daemon's default
      static_cast<double>(daemon_params().rsfc.threshold_ceiling_steady) / kMilli;
  bool next_to_upload_only = false, no_timestamps = false;
  long start_s = -1;
  Swing swing;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--threshold-packets" && more) {
      threshold_packets = std::atof(argv[++i]);
    } else if (a == "--floor-swing" && more) {
      floor_swing = std::atof(argv[++i]);
    } else if (a == "--pacing-gain" && more) {
      pacing_gain = std::atof(argv[++i]);
    } else if (a == "--pacing-burst" && more) {
      pacing_burst = std::atol(argv[++i]);
    } else if (a == "--pacing-horizon" && more) {
      const auto v = positive_fields(argv[++i]);
      if (!v || v->size() != 1 || (*v)[0] < 0.1 || (*v)[0] > 60) return usage();
      pacing_horizon = static_cast<Nanos>(std::llround((*v)[0] * 1e9));
    } else if (a == "--threshold-ceiling" && more) {
      ceiling_ms = std::atof(argv[++i]);
    } else if (a == "--uplink-ceiling" && more) {
      up_ceiling_ms = std::atof(argv[++i]);
    } else if (a == "--downlink-ceiling" && more) {
      down_ceiling_ms = std::atof(argv[++i]);
    } else if (a == "--steady-ceiling" && more) {
      steady_ms = std::atof(argv[++i]);
    } else if (a == "--download-alone-ceiling" && more) {
      alone_ceiling_ms = std::atof(argv[++i]);
    } else if (a == "--next-to-upload-only") {
      next_to_upload_only = true;
    } else if (a == "--no-timestamps") {
      no_timestamps = true;
    } else if (a == "--down-swing" && more) {
      const auto v = positive_fields(argv[++i]);
      const auto sw = v && v->size() == 2 ? swing_from((*v)[0], (*v)[1]) : std::nullopt;
      if (!sw) return usage();
      swing = *sw;
    } else if (a == "--start" && more) {
      start_s = std::atol(argv[++i]);
    } else if (a.rfind("--", 0) == 0) {
      return usage();
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty() || pos.size() > 3) return usage();
  if (up_ceiling_ms < 0) up_ceiling_ms = ceiling_ms;  // both knobs', unless one's is given
  if (down_ceiling_ms < 0) down_ceiling_ms = ceiling_ms;
  const std::string cell = pos[0];
  const int runs = pos.size() > 1 ? std::max(1, std::atoi(pos[1].c_str())) : 3;
  const std::string policy = pos.size() > 2 ? pos[2] : "shipped";
  const Policy_* pol = nullptr;
  for (const Policy_& p : kPolicies) {
    if (policy == p.name) pol = &p;
  }
  if (pol == nullptr) return usage();
  std::optional<Scenario> own;
  if (cell.rfind("link:", 0) == 0) {
    own = parse_link(cell.substr(5));
    if (!own) {
      std::fprintf(stderr,
                   "rsfc-simsuite: bad link %s (link:UP_KBPS:DOWN_KBPS:RTT_MS"
                   "[:UP_BUFFER_KB:DOWN_BUFFER_KB])\n",
                   cell.c_str());
      return 2;
    }
  }
  if (cell.rfind("swing:", 0) == 0) {
    const auto sw = parse_swing(cell.substr(6));
    if (!sw || swing.factor > 0) {
      std::fprintf(stderr,
                   "rsfc-simsuite: bad swing cell %s (swing:UP_KBPS:DOWN_KBPS:RTT_MS:FACTOR:"
                   "PERIOD_MS[:UP_BUFFER_KB:DOWN_BUFFER_KB], FACTOR above 1, PERIOD_MS a whole "
                   "number of 10 or more; not with --down-swing)\n",
                   cell.c_str());
      return 2;
    }
    own = sw->first;
    swing = sw->second;
  }
  const bool constant = cell == "2g" || cell == "3g" || cell == "lte" || own;
  if (swing.factor > 0 && !constant) {
    std::fprintf(stderr, "rsfc-simsuite: --down-swing needs a constant cell\n");
    return 2;
  }
  std::shared_ptr<const CapacityTrace> up, down;
  if (!constant) {
    const std::string dir = std::string(RSFC_SOURCE_DIR) + "/lab/traces/" + cell;
    auto u = std::make_shared<CapacityTrace>(CapacityTrace::load(dir + ".up"));
    auto d = std::make_shared<CapacityTrace>(CapacityTrace::load(dir + ".down"));
    if (!u->valid() || !d->valid()) {
      std::fprintf(stderr, "rsfc-simsuite: no trace %s.up/.down in lab/traces\n", cell.c_str());
      return 1;
    }
    up = u;
    down = d;
  }
  std::vector<double> dl, ul, p95, alone, alone_p95;
  for (int i = 0; i < runs; ++i) {
    Nanos start = 0;
    if (!constant) {
      start = start_s >= 0 ? (start_s + i) * kSecond : suite_trace_offset(*up, *down, i, runs);
    }
    auto scenario = [&](int uploads, int downloads, bool regulated) {
      Scenario s = own             ? *own
                   : cell == "2g"  ? two_g_link()
                   : cell == "3g"  ? three_g_link()
                   : cell == "lte" ? lte_link()
                                   : suite_trace_cell(up, down, start);
      s.duration = 38 * kSecond;
      s.warmup = 8 * kSecond;
      if (swing.factor > 0) {
        const Nanos period = static_cast<Nanos>(swing.period_ms * 1e6);
        const double full = s.down_bps;
        bool slow = true;
        for (Nanos t = period; t < s.duration; t += period, slow = !slow) {
          s.down_rate_steps.push_back({t, slow ? full / swing.factor : full});
        }
      }
      s.uploads = uploads;
      s.downloads = downloads;
      s.seed = static_cast<uint32_t>(i);
      if (threshold_packets >= 0) s.dlq.threshold_packets = threshold_packets;
      if (floor_swing >= 0) s.dlq.floor_swing = floor_swing;
      // The auto-T ceilings (and each floor under its ceiling).
      if (up_ceiling_ms >= 0) {
        s.rsfc.threshold_ceiling = static_cast<Nanos>(up_ceiling_ms * 1e6);
        s.rsfc.threshold_floor = std::min(s.rsfc.threshold_floor, s.rsfc.threshold_ceiling);
      }
      if (down_ceiling_ms >= 0) {
        s.dlq.threshold_ceiling = static_cast<Nanos>(down_ceiling_ms * 1e6);
        s.dlq.threshold_floor = std::min(s.dlq.threshold_floor, s.dlq.threshold_ceiling);
      }
      if (steady_ms >= 0) {
        s.rsfc.threshold_ceiling_steady = static_cast<Nanos>(steady_ms * 1e6);
        s.dlq.threshold_ceiling_steady = s.rsfc.threshold_ceiling_steady;
      }
      if (alone_ceiling_ms > 0) s.dlq_ceiling_alone = static_cast<Nanos>(alone_ceiling_ms * 1e6);
      if (no_timestamps) {
        s.phone_timestamps = false;
        if (constant) s.download_start = i * kNoTimestampsSeedStep;
      }
      if (regulated) {
        s.uplink = pol->up;
        s.downlink = pol->down;
        s.downlink_queue_regulator = pol->queue_regulator;
        s.static_window = pol->static_window ? pol->static_window : 65535;
        s.pacing.enabled = pol->pacing;
        s.pacing.next_to_upload_only = next_to_upload_only;
        if (pacing_gain > 1) s.pacing.gain = pacing_gain;
        if (pacing_burst >= 0) s.pacing.burst_bytes = static_cast<uint32_t>(pacing_burst);
        if (pacing_horizon > 0) s.pacing.horizon = pacing_horizon;
      }
      return simulate(s);
    };
    const Result base_down = scenario(0, 1, false), base_up = scenario(1, 0, false);
    const Result both = scenario(1, 1, true), down_alone = scenario(0, 1, true);
    dl.push_back(100 * both.download_bps / base_down.download_bps);
    ul.push_back(100 * both.upload_bps / base_up.upload_bps);
    p95.push_back(both.ping_p95_ms);
    alone.push_back(100 * down_alone.download_bps / base_down.download_bps);
    alone_p95.push_back(down_alone.ping_p95_ms);
    std::printf(
        "  %s %s %s %3lld: dl %5.1f %% ul %5.1f %% p95 %6.0f ms | alone dl %5.1f %% p95 %6.0f ms"
        " (unregulated %6.0f ms)%s\n",
        cell.c_str(), pol->name, constant ? "seed" : "from",
        static_cast<long long>(constant ? i : start / kSecond), dl.back(), ul.back(), p95.back(),
        alone.back(), alone_p95.back(), base_down.ping_p95_ms,
        pol->pacing
            ? (" paced " + std::to_string(both.paced) + " / " + std::to_string(down_alone.paced))
                  .c_str()
            : "");
    std::fflush(stdout);
  }
  std::printf(
      "%s %s median: dl %5.1f %% ul %5.1f %% p95 %6.0f ms | alone dl %5.1f %% p95 %6.0f ms\n",
      cell.c_str(), pol->name, median(dl), median(ul), median(p95), median(alone),
      median(alone_p95));
  return 0;
}
