// rsfc-replay: runs a pcap taken at a gateway through rsfcd's core and writes what the daemon
// would have done. See include/rsfc/tools/replay.h and `rsfc-replay --help`.
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "rsfc/io/config.h"
#include "rsfc/tools/replay.h"

namespace {

constexpr const char* kUsage =
    "usage: rsfc-replay --config FILE [--policy-uplink rsfc|static:N|observe|off]\n"
    "                   [--policy-downlink rsfc|drwa|static:N|observe|off] [--flows-max N]\n"
    "                   [--out FILE|-] [--summary FILE] capture.pcap\n"
    "\n"
    "Runs every packet of a classic pcap (ethernet, VLAN, raw IP, linux cooked v1/v2;\n"
    "not pcapng) through rsfcd's own core with the daemon's YAML config, using the\n"
    "capture's timestamps as time, and reports what the daemon would have done. A\n"
    "header-only capture (tcpdump -s 96 or -s 128) replays as a whole one: lengths come\n"
    "from the IP header; records cut inside their TCP options are counted, not parsed.\n"
    "\n"
    "  --config FILE         the daemon's config (subscriber_networks, policies, ...)\n"
    "  --policy-uplink P     override uplink.policy (static:N = clamp to N bytes)\n"
    "  --policy-downlink P   override downlink.policy\n"
    "  --flows-max N         override flows.max (memory is reserved for it)\n"
    "  --out FILE            JSON lines: one per decision record, then one per flow\n"
    "                        (\"-\" = stdout; the readable summary then goes to stderr)\n"
    "  --summary FILE        the summary as JSON\n"
    "\n"
    "Exit status: 0 done; 1 the capture is broken part-way (everything before the break\n"
    "is reported, with \"complete\": false); 2 bad arguments, config or file.\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "rsfc-replay: %s (rsfc-replay --help shows the usage)\n", msg.c_str());
  return 2;
}

struct Args {
  std::optional<std::string> config_path, policy_up, policy_down, out_path, summary_path, capture;
  std::optional<uint32_t> flows_max;
};

// Reads the command line into `a`. An exit status when that is all (help, a bad argument).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::optional<std::string>& dst) -> bool {
      if (i + 1 >= argc) return false;
      dst = argv[++i];
      return true;
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--config") {
      if (!value(a.config_path)) return usage_error("--config needs a file");
    } else if (arg == "--policy-uplink") {
      if (!value(a.policy_up)) return usage_error("--policy-uplink needs a policy");
    } else if (arg == "--policy-downlink") {
      if (!value(a.policy_down)) return usage_error("--policy-downlink needs a policy");
    } else if (arg == "--out") {
      if (!value(a.out_path)) return usage_error("--out needs a file");
    } else if (arg == "--summary") {
      if (!value(a.summary_path)) return usage_error("--summary needs a file");
    } else if (arg == "--flows-max") {
      std::optional<std::string> v;
      if (!value(v)) return usage_error("--flows-max needs a number");
      uint32_t n = 0;
      const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
      if (ec != std::errc() || p != v->data() + v->size() || n == 0) {
        return usage_error("--flows-max: expected 1 .. 4294967295, got " + *v);
      }
      a.flows_max = n;
    } else if (arg.starts_with("-") && arg != "-") {
      return usage_error("unknown option " + std::string(arg));
    } else if (a.capture) {
      return usage_error("one capture file only (got " + *a.capture + " and " + std::string(arg) +
                         ")");
    } else {
      a.capture = std::string(arg);
    }
  }
  if (!a.config_path) return usage_error("--config is required");
  if (!a.capture) return usage_error("no capture file given");
  return std::nullopt;
}

// The daemon's config with the command line's policies. An exit status when it is unusable.
std::optional<int> load_params(const Args& a, rsfc::Config& cfg) {
  try {
    cfg = rsfc::load_config_file(*a.config_path);
  } catch (const rsfc::ConfigError& e) {
    std::fprintf(stderr, "rsfc-replay: %s\n", e.what());
    return 2;
  }
  rsfc::EngineParams& params = cfg.params;
  if (a.policy_up) {
    auto d = rsfc::replay::parse_policy(*a.policy_up, true, params.min_window_bytes);
    if (!d) return usage_error(d.error().message);
    params.uplink = *d;
  }
  if (a.policy_down) {
    auto d = rsfc::replay::parse_policy(*a.policy_down, false, params.min_window_bytes);
    if (!d) return usage_error(d.error().message);
    params.downlink = *d;
  }
  if (auto ok = rsfc::replay::check_params(params); !ok) {
    std::fprintf(stderr, "rsfc-replay: %s\n", ok.error().message.c_str());
    return 2;
  }
  return std::nullopt;
}

// Runs the capture and writes the lines (--out), the JSON summary (--summary) and the
// readable summary. The exit status.
int replay(const Args& a, const rsfc::Config& cfg) {
  std::ofstream out_file;
  std::ostream* lines = nullptr;
  const bool lines_to_stdout = a.out_path && *a.out_path == "-";
  if (lines_to_stdout) {
    lines = &std::cout;
  } else if (a.out_path) {
    out_file.open(*a.out_path, std::ios::out | std::ios::trunc);
    if (!out_file) {
      std::fprintf(stderr, "rsfc-replay: cannot write %s: %s\n", a.out_path->c_str(),
                   std::strerror(errno));
      return 2;
    }
    lines = &out_file;
  }
  auto summary =
      rsfc::replay::replay_file(*a.capture, a.flows_max.value_or(cfg.flows_max), cfg.params, lines);
  if (!summary) {
    std::fprintf(stderr, "rsfc-replay: %s\n", summary.error().message.c_str());
    return 2;
  }
  if (out_file.is_open()) {
    out_file.close();
    if (!out_file) {
      std::fprintf(stderr, "rsfc-replay: writing %s failed\n", a.out_path->c_str());
      return 2;
    }
  }
  if (a.summary_path) {
    std::ofstream sf(*a.summary_path, std::ios::out | std::ios::trunc);
    sf << rsfc::replay::to_json(*summary);
    sf.close();
    if (!sf) {
      std::fprintf(stderr, "rsfc-replay: cannot write %s\n", a.summary_path->c_str());
      return 2;
    }
  }
  const std::string text = rsfc::replay::to_text(*summary);
  std::fputs(text.c_str(), lines_to_stdout ? stderr : stdout);
  if (summary->error) {
    std::fprintf(stderr, "rsfc-replay: %s\n", summary->error->c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  Args args;
  if (auto done = parse_args(argc, argv, args)) return *done;
  rsfc::Config cfg;
  if (auto bad = load_params(args, cfg)) return *bad;
  return replay(args, cfg);
}
