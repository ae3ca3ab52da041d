// Tunable parameters of the core: plain structs, filled from YAML by config.cpp (the core
// never sees YAML), reloadable on SIGHUP. Every field has a safe default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rsfc/types.h"

namespace rsfc {

enum class Policy : uint8_t {
  kOff,      // not touched (flows are still tracked for the other knob)
  kObserve,  // tracked and exported, never modified
  kStatic,   // clamp to a fixed byte count (Android's tcp_rmem_max)
  kRsfc,     // uplink only: Receiver-Side Flow Control
  kDrwa,     // downlink only: Dynamic Receive Window Adjustment
};
const char* to_string(Policy p);

struct DirectionParams {
  Policy policy = Policy::kOff;
  uint32_t static_window_bytes = 65535;
};

// RSFC controller constants (uplink knob). See conf/rsfcd.yaml for what each one means.
struct RsfcParams {
  // Threshold T on the filtered uplink buffering delay; nullopt = auto (from RTT_min).
  std::optional<Nanos> threshold;
  Nanos threshold_floor = 20 * kMilli;     // auto T never below this (TS granularity)
  Nanos min_window_horizon = 10 * kSecond; // sliding window for min(d)
  Nanos tbuff_filter = 200 * kMilli;       // short windowed minimum on t_buff samples
  Nanos control_interval_floor = 20 * kMilli;  // time base floor for "per RTT" steps
  double growth_per_rtt = 0.25;            // slow state: multiplicative probe per RTT
  uint32_t initial_window_bytes = 0;       // 0 = do not clamp until estimates exist
  std::string decision_log;                // JSON-lines path, empty = off
};

struct DrwaParams {
  double alpha = 7.0 / 8.0;
  double lambda = 3.0;
};

// What the engine needs; everything here may change on SIGHUP.
struct EngineParams {
  std::vector<Prefix> subscriber_networks;
  DirectionParams uplink;    // window in ACKs travelling to subscribers
  DirectionParams downlink;  // window in ACKs travelling from subscribers
  uint32_t min_window_bytes = 2920;
  Nanos idle_timeout = 300 * kSecond;
  Nanos closed_timeout = 10 * kSecond;  // FIN/RST seen both ways: linger for late ACKs
  Nanos embryonic_timeout = 30 * kSecond;  // handshake not completed
  RsfcParams rsfc;
  DrwaParams drwa;
};

}  // namespace rsfc
