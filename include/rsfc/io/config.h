// The daemon's configuration: YAML mapped once into a plain struct. Strict: an unknown
// key, a wrong type, an out-of-range value or a bad prefix is a ConfigError whose message
// is one line naming the file, line and key.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rsfc/core/params.h"

namespace rsfc {

enum class LogLevel : uint8_t { kDebug, kInfo, kWarn, kError };

// The core's defaults with what the daemon runs on top of them where the core's stay off: each
// knob's steady ceiling (rsfc.tuning.threshold_ceiling_steady_ms, 10 ms; the lab's suite,
// lab/EXPERIMENTS.md Q52). conf/rsfcd.yaml leaves the tuning block out, so a tuning value the
// recommendation needs is a default here.
constexpr EngineParams daemon_params() {
  EngineParams p;
  p.rsfc.threshold_ceiling_steady = 10 * kMilli;
  return p;
}

struct Config {
  std::vector<uint16_t> queues{0};
  uint32_t queue_maxlen = 8192;      // queue.maxlen: kernel-side packets waiting for us
  uint32_t socket_rcvbuf = 8 << 20;  // queue.socket_buffer_bytes
  uint32_t batch_size = 64;          // queue.batch: packets drained per wakeup at most
  uint32_t flows_max = 1'000'000;
  uint32_t regulated_max = 58'000;                // flows.regulated_max: regulators per knob
  std::string metrics_listen = "127.0.0.1:9477";  // "" disables the HTTP endpoint
  LogLevel log_level = LogLevel::kInfo;
  std::string decision_log;  // JSON lines, one per control decision; "" = off (reloadable)
  uint64_t decision_log_max_bytes = uint64_t{256} << 20;  // its size cap; 0 = none (reloadable)
  EngineParams params = daemon_params();
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses YAML text. `source` names the file in error messages.
Config parse_config(std::string_view yaml_text, std::string_view source = "<config>");
// Reads and parses a file; a missing/unreadable file is a ConfigError too.
Config load_config_file(const std::string& path);

// The configuration that ships as conf/rsfcd.yaml: the defaults, with the lab's subscriber
// prefixes and a static 64 KB clamp on the uplink knob.
Config example_config();

// `shown` as commented YAML, every key with its help, what it accepts, and its default where
// `shown` differs from it; `tuning` adds the experimental block rsfc.tuning. The same tables
// read and print, so format_config(example_config(), false) is conf/rsfcd.yaml, byte for
// byte (config_test checks), and parse_config reads back exactly `shown`.
std::string format_config(const Config& shown, bool tuning);

// flows.max shared out between the queues' workers: flows.max / queues, rounded up.
// parse_config has checked that it is at least 1, that a worker's flow table can index it
// (at most 2^31), and that all the workers' tables fit in the machine's physical memory.
uint32_t flows_per_worker(const Config& c);
// flows.regulated_max shared out likewise (the engine caps it at its flows).
uint32_t regulated_per_worker(const Config& c);
// What the flow tables and regulator pools of all workers reserve at start (bytes), pacer
// state included when pacing is on: what the load-time memory check compares.
uint64_t reserved_bytes(const Config& c);

// Keys that need a restart (queues, flows.max, flows.regulated_max, metrics.listen, queue.*): a
// list of their names whose values differ, for the reload path to warn about.
std::vector<std::string> restart_only_differences(const Config& running, const Config& loaded);

const char* to_string(LogLevel l);

}  // namespace rsfc
