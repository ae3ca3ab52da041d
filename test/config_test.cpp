// Config loading: the contract example, the shipped example file, defaults, every kind of
// error (one line, naming file, line and key), and the restart-only key list.
#include "rsfc/io/config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "rsfc/core/downlink_regulator.h"

namespace rsfc {
namespace {

const std::string kSourceDir = RSFC_SOURCE_DIR;
const std::string kDataDir = kSourceDir + "/test/data/config/";

// The keys outside tools rely on (see the issue): these names must keep working.
constexpr const char* kContractExample = R"(queues: [0]
subscriber_networks: ["198.18.0.0/16", "2001:2::/48"]
uplink:   { policy: static, static_window_bytes: 65535 }
downlink: { policy: off,    static_window_bytes: 65535 }
min_window_bytes: 2920
flows:    { max: 1000000, idle_timeout_s: 300 }
metrics:  { listen: "127.0.0.1:9477" }
log:      { level: info }
)";

Prefix prefix(const char* text) {
  auto p = Prefix::parse(text);
  EXPECT_TRUE(p.has_value()) << text;
  return p.value_or(Prefix{});
}

// The error text of parsing `yaml`, or "" if it parsed.
std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "t.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ContractExampleParses) {
  const Config c = parse_config(kContractExample);
  EXPECT_EQ(c.queues, std::vector<uint16_t>{0});
  EXPECT_EQ(c.params.subscriber_networks,
            (std::vector<Prefix>{prefix("198.18.0.0/16"), prefix("2001:2::/48")}));
  EXPECT_EQ(c.params.uplink.policy, Policy::kStatic);
  EXPECT_EQ(c.params.uplink.static_window_bytes, 65535u);
  EXPECT_EQ(c.params.downlink.policy, Policy::kOff);
  EXPECT_EQ(c.params.downlink.static_window_bytes, 65535u);
  EXPECT_EQ(c.params.min_window_bytes, 2920u);
  EXPECT_EQ(c.flows_max, 1'000'000u);
  EXPECT_EQ(c.params.idle_timeout, 300 * kSecond);
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9477");
  EXPECT_EQ(c.log_level, LogLevel::kInfo);
}

// A minimal file leaves everything else at the struct defaults.
TEST(Config, DefaultsForKeysLeftOut) {
  const Config d;
  for (const char* yaml : {"queues: [0]\n", "log: { level: info }\nrsfc:\n  # all commented\n"}) {
    SCOPED_TRACE(yaml);
    const Config c = parse_config(yaml);
    EXPECT_EQ(c.queues, d.queues);
    EXPECT_EQ(c.queue_maxlen, 8192u);
    EXPECT_EQ(c.socket_rcvbuf, 8u << 20);
    EXPECT_EQ(c.batch_size, 64u);
    EXPECT_EQ(c.flows_max, 1'000'000u);
    EXPECT_EQ(c.metrics_listen, "127.0.0.1:9477");
    EXPECT_EQ(c.log_level, LogLevel::kInfo);
    EXPECT_TRUE(c.params.subscriber_networks.empty());
    EXPECT_EQ(c.params.uplink.policy, Policy::kOff);
    EXPECT_EQ(c.params.downlink.policy, Policy::kOff);
    EXPECT_EQ(c.params.uplink.static_window_bytes, 65535u);
    EXPECT_EQ(c.params.min_window_bytes, 2920u);
    EXPECT_EQ(c.params.idle_timeout, 300 * kSecond);
    EXPECT_EQ(c.params.closed_timeout, 10 * kSecond);
    EXPECT_EQ(c.params.embryonic_timeout, 30 * kSecond);
    EXPECT_EQ(c.params.max_flows_per_subscriber, 4096u);
    EXPECT_TRUE(c.params.adopt_from_conntrack);
    EXPECT_FALSE(c.params.rsfc.threshold.has_value());
    EXPECT_EQ(c.params.rsfc.threshold_floor, 20 * kMilli);
    EXPECT_EQ(c.params.rsfc.min_window_horizon, 10 * kSecond);
    EXPECT_EQ(c.params.rsfc.tbuff_filter, 200 * kMilli);
    EXPECT_EQ(c.params.rsfc.control_interval_floor, 20 * kMilli);
    EXPECT_EQ(c.params.rsfc.growth_per_rtt, 0.25);
    EXPECT_EQ(c.params.rsfc.initial_window_bytes, 16384u);
    EXPECT_EQ(c.decision_log, "");
    EXPECT_EQ(c.decision_log_max_bytes, 256u << 20);
    EXPECT_EQ(c.params.drwa.alpha, 0.875);
    EXPECT_EQ(c.params.drwa.lambda, 3.0);
  }
}

// Every key, set away from its default.
constexpr const char* kEveryKeyChanged = R"(
queues: [3, 1, 2]
subscriber_networks:
  - 10.0.0.0/8
  - "2001:db8::/32"
  - 192.0.2.7
uplink: { policy: rsfc, static_window_bytes: 131072 }
downlink: { policy: drwa, static_window_bytes: 4096 }
min_window_bytes: 4000
queue: { maxlen: 100_000, socket_buffer_bytes: 65536, batch: 1 }
flows: { max: 5, idle_timeout_s: 86_400, closed_timeout_s: 1.5, embryonic_timeout_s: 7,
         max_per_subscriber: 0, adopt_from_conntrack: false }
metrics: { listen: "[::1]:9100" }
log: { level: debug }
decision_log: /var/log/rsfcd/decisions.jsonl
decision_log_max_bytes: 0
rsfc:
  threshold_ms: 12.5
  threshold_floor_ms: 4
  min_window_horizon_s: 30
  tbuff_filter_ms: 0
  growth_per_rtt: 1
  initial_window_bytes: 65535
  path_check_ms: 0
  per_subscriber: false
  idle_law: false
  share_equalize: 0.25
  tuning:
    control_interval_floor_ms: 1
    path_foreign_rate: 0.5
    path_tolerance_ms: 2.5
    max_interval_ms: 500
    tick_multiple: 2
    rtt_gain: 1
    monitor_after_steps: 5
    monitor_steps: 4
    fine_tick_ms: 1
    unused_fraction: 0
    unused_decay: 1
    startup_growth: 1.5
    probe_doublings: 0
    recut_fraction: 1
    min_window_segments: 4
    lag_confirm_fraction: 0.3
    refresh_holdoff: 0
    threshold_ceiling_lag_ms: 120
    threshold_ceiling_download_alone_ms: 90
    threshold_packets: 3.5
    threshold_packets_ceiling_ms: 45
    threshold_ceiling_steady_ms: 12
    downlink_round_trip: false
    downlink_yield: 0.75
drwa: { alpha: 0.5, lambda: 2.25 }
pacing: { gain: 1.2, max_hold_ms: 80, sample_ms: 25, horizon_s: 1.5, burst_bytes: 1448,
          next_to_upload_only: true }
)";

// Every key, set away from its default, lands in its field.
TEST(Config, EveryKeyMapsToItsField) {
  const Config c = parse_config(kEveryKeyChanged);
  EXPECT_EQ(c.queues, (std::vector<uint16_t>{3, 1, 2}));
  EXPECT_EQ(
      c.params.subscriber_networks,
      (std::vector<Prefix>{prefix("10.0.0.0/8"), prefix("2001:db8::/32"), prefix("192.0.2.7/32")}));
  EXPECT_EQ(c.params.uplink.policy, Policy::kRsfc);
  EXPECT_EQ(c.params.uplink.static_window_bytes, 131072u);
  EXPECT_EQ(c.params.downlink.policy, Policy::kDrwa);
  EXPECT_EQ(c.params.downlink.static_window_bytes, 4096u);
  EXPECT_EQ(c.params.min_window_bytes, 4000u);
  EXPECT_EQ(c.queue_maxlen, 100'000u);
  EXPECT_EQ(c.socket_rcvbuf, 65536u);
  EXPECT_EQ(c.batch_size, 1u);
  EXPECT_EQ(c.flows_max, 5u);
  EXPECT_EQ(c.params.idle_timeout, 86'400 * kSecond);
  EXPECT_EQ(c.params.closed_timeout, 1'500 * kMilli);
  EXPECT_EQ(c.params.embryonic_timeout, 7 * kSecond);
  EXPECT_EQ(c.params.max_flows_per_subscriber, 0u);
  EXPECT_FALSE(c.params.adopt_from_conntrack);
  EXPECT_EQ(c.metrics_listen, "[::1]:9100");
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.params.rsfc.threshold, std::optional<Nanos>(12'500 * kMicro));
  EXPECT_EQ(c.params.rsfc.threshold_floor, 4 * kMilli);
  EXPECT_EQ(c.params.rsfc.min_window_horizon, 30 * kSecond);
  EXPECT_EQ(c.params.rsfc.tbuff_filter, 0);
  EXPECT_EQ(c.params.rsfc.control_interval_floor, 1 * kMilli);
  EXPECT_EQ(c.params.rsfc.growth_per_rtt, 1.0);
  EXPECT_EQ(c.params.rsfc.initial_window_bytes, 65535u);
  EXPECT_EQ(c.decision_log, "/var/log/rsfcd/decisions.jsonl");
  EXPECT_EQ(c.decision_log_max_bytes, 0u);
  EXPECT_EQ(c.params.rsfc.path_check, 0);
  EXPECT_EQ(c.params.rsfc.path_foreign_rate, 0.5);
  EXPECT_EQ(c.params.rsfc.path_tolerance, 2'500 * kMicro);
  EXPECT_EQ(c.params.rsfc.max_interval, 500 * kMilli);
  EXPECT_EQ(c.params.rsfc.tick_multiple, 2.0);
  EXPECT_EQ(c.params.rsfc.rtt_gain, 1.0);
  EXPECT_EQ(c.params.rsfc.monitor_after_steps, 5u);
  EXPECT_EQ(c.params.rsfc.monitor_steps, 4u);
  EXPECT_EQ(c.params.rsfc.fine_tick, 1 * kMilli);
  EXPECT_EQ(c.params.rsfc.unused_fraction, 0.0);
  EXPECT_EQ(c.params.rsfc.unused_decay, 1.0);
  EXPECT_EQ(c.params.rsfc.startup_growth, 1.5);
  EXPECT_FALSE(c.params.rsfc.per_subscriber);
  EXPECT_FALSE(c.params.rsfc.idle_law);
  EXPECT_EQ(c.params.rsfc.share_equalize, 0.25);
  EXPECT_EQ(c.params.rsfc.probe_doublings, 0u);
  EXPECT_EQ(c.params.rsfc.recut_fraction, 1.0);
  EXPECT_EQ(c.params.rsfc.min_window_segments, 4u);
  EXPECT_EQ(c.params.rsfc.lag_confirm_fraction, 0.3);
  EXPECT_EQ(c.params.rsfc.refresh_holdoff, 0.0);
  EXPECT_EQ(c.params.rsfc.threshold_ceiling_lag, 120 * kMilli);
  EXPECT_EQ(c.params.rsfc.threshold_ceiling_download_alone, 90 * kMilli);
  EXPECT_EQ(c.params.rsfc.threshold_packets, 3.5);
  EXPECT_EQ(c.params.rsfc.threshold_packets_ceiling, 45 * kMilli);
  EXPECT_EQ(c.params.rsfc.threshold_ceiling_steady, 12 * kMilli);
  EXPECT_FALSE(c.params.rsfc.downlink_round_trip);
  EXPECT_EQ(c.params.rsfc.downlink_yield, 0.75);
  EXPECT_EQ(c.params.drwa.alpha, 0.5);
  EXPECT_EQ(c.params.drwa.lambda, 2.25);
  EXPECT_FALSE(c.params.pacing.enabled);  // with downlink drwa it may not be set true
  EXPECT_EQ(c.params.pacing.gain, 1.2);
  EXPECT_EQ(c.params.pacing.max_hold, 80 * kMilli);
  EXPECT_EQ(c.params.pacing.sample, 25 * kMilli);
  EXPECT_EQ(c.params.pacing.horizon, 1500 * kMilli);
  EXPECT_EQ(c.params.pacing.burst_bytes, 1448u);
  EXPECT_TRUE(c.params.pacing.next_to_upload_only);
}

TEST(Config, PacingWithDownlinkRsfc) {
  const Config c = parse_config(
      "subscriber_networks: [10.0.0.0/8]\ndownlink: { policy: rsfc }\npacing: { enabled: true }\n");
  EXPECT_TRUE(c.params.pacing.enabled);
  EXPECT_EQ(c.params.pacing.gain, 1.05);
  EXPECT_EQ(c.params.pacing.max_hold, 200 * kMilli);
  EXPECT_EQ(c.params.pacing.burst_bytes, 2920u);
  EXPECT_FALSE(c.params.pacing.next_to_upload_only);
}

TEST(Config, OtherValidSpellings) {
  // threshold "auto" quoted or not; listen "" disables; levels; explicit maximum values.
  Config c = parse_config("rsfc: { threshold_ms: \"auto\" }\nmetrics: { listen: \"\" }\n");
  EXPECT_FALSE(c.params.rsfc.threshold.has_value());
  EXPECT_EQ(c.metrics_listen, "");
  c = parse_config("log: { level: warn }\nflows: { max: 2 }\nqueues: [65535, 0]\n");
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  EXPECT_EQ(c.flows_max, 2u);
  EXPECT_EQ(c.queues, (std::vector<uint16_t>{65535, 0}));
  c = parse_config("log: { level: error }\nmetrics: { listen: 0.0.0.0:1 }\n");
  EXPECT_EQ(c.log_level, LogLevel::kError);
  EXPECT_EQ(c.metrics_listen, "0.0.0.0:1");
  // Lowest allowed window values; a static window below min_window_bytes is fine when the
  // direction's policy does not use it.
  c = parse_config(
      "min_window_bytes: 1072\nuplink: { policy: static, static_window_bytes: 1072 }\n"
      "downlink: { policy: observe, static_window_bytes: 1072 }\n"
      "subscriber_networks: [10.0.0.0/8]\n");
  EXPECT_EQ(c.params.min_window_bytes, 1072u);
  EXPECT_EQ(c.params.downlink.policy, Policy::kObserve);
  c = parse_config(
      "min_window_bytes: 100000\ndownlink: { policy: observe }\nuplink: { policy: \"off\" }\n"
      "subscriber_networks: [10.0.0.0/8]\n");
  EXPECT_EQ(c.params.uplink.static_window_bytes, 65535u);
  // A min_window_bytes above the default startup floor (16 KB) is fine while the floor is
  // left out: no window is written below min_window_bytes. Set explicitly, it must reach it
  // (BadConfig: initial_window_below_raised_min).
  c = parse_config("min_window_bytes: 20000\nsubscriber_networks: [10.0.0.0/8]\n");
  EXPECT_EQ(c.params.rsfc.initial_window_bytes, 16384u);
  EXPECT_EQ(c.params.min_window_bytes, 20000u);
}

// rsfc runs on either knob (the downlink one: the downlink queue regulator, on the rsfc
// keys); drwa stays downlink-only (the refusal is in BadConfig's table: drwa_on_uplink).
TEST(Config, RsfcOnEitherKnob) {
  Config c = parse_config(
      "subscriber_networks: [10.0.0.0/8]\ndownlink: { policy: rsfc }\n"
      "uplink: { policy: \"off\" }\nrsfc: { threshold_ms: 30, fast_target: 1.5 }\n");
  EXPECT_EQ(c.params.downlink.policy, Policy::kRsfc);
  EXPECT_EQ(c.params.uplink.policy, Policy::kOff);
  const DownlinkQueueParams dp = downlink_params_from(c.params.rsfc);
  ASSERT_TRUE(dp.threshold.has_value());
  EXPECT_EQ(*dp.threshold, 30 * kMilli);
  EXPECT_EQ(dp.fast_target, 1.5);
  c = parse_config(
      "subscriber_networks: [10.0.0.0/8]\nuplink: { policy: rsfc }\n"
      "downlink: { policy: rsfc }\n");
  EXPECT_EQ(c.params.uplink.policy, Policy::kRsfc);
  EXPECT_EQ(c.params.downlink.policy, Policy::kRsfc);
  // Like every policy but off, it needs to know which side is the subscriber.
  EXPECT_NE(error_of("downlink: { policy: rsfc }\n").find("subscriber_networks"),
            std::string::npos);
}

// yaml-cpp reads a bare `off` as "off", PyYAML as false: both spellings work, and real
// booleans are refused, so a file means the same thing to both readers.
// What editors produce: a byte-order mark, CRLF line ends, non-ASCII comments, quoted
// values with escapes and tags. (The quote check must not misfire on any of it.)
TEST(Config, EditorArtefactsAreFine) {
  const std::string yaml =
      "\xEF\xBB\xBF# caf\xC3\xA9 \xE2\x82\xAC config\r\n"
      "log: { level: \"info\" }\r\n"
      "subscriber_networks: [\"10.0.0.0/8\", '2001:2::/48']  # r\xC3\xA9seau\r\n"
      "uplink: { policy: !!str 'static' }\r\n"
      "decision_log: \"/tmp/d\\\"q\\\".log\"\r\n"
      "metrics: { listen: !!str '[::1]:9477' }\r\n";
  const Config c = parse_config(yaml);
  EXPECT_EQ(c.log_level, LogLevel::kInfo);
  EXPECT_EQ(c.params.uplink.policy, Policy::kStatic);
  EXPECT_EQ(c.params.subscriber_networks.size(), 2u);
  EXPECT_EQ(c.decision_log, "/tmp/d\"q\".log");
  EXPECT_EQ(c.metrics_listen, "[::1]:9477");
  EXPECT_EQ(parse_config("decision_log: 'it''s'\n").decision_log, "it's");
  // A directive header, an explicit document start and end.
  EXPECT_EQ(parse_config("%YAML 1.1\n# header\n---\nlog: { level: warn }\n...\n").log_level,
            LogLevel::kWarn);
  // UTF-16 is refused with a clear message rather than misread.
  const std::string utf16("\xFF\xFEq\0u\0", 6);
  EXPECT_NE(error_of(utf16).find("not UTF-8"), std::string::npos) << error_of(utf16);
}

TEST(Config, PolicyOffSpellings) {
  for (const char* off : {"off", "\"off\"", "'off'"}) {
    const Config c = parse_config(std::string("uplink: { policy: ") + off + " }\n");
    EXPECT_EQ(c.params.uplink.policy, Policy::kOff) << off;
  }
  for (const char* boolean : {"false", "no", "False", "OFF", "n", "0"}) {
    const std::string err = error_of(std::string("uplink:\n  policy: ") + boolean + "\n");
    EXPECT_NE(err.find("t.yaml:2: uplink.policy: unknown value"), std::string::npos) << err;
    EXPECT_NE(err.find("(got " + std::string(boolean) + ")"), std::string::npos) << err;
  }
}

// The shipped example parses, keeps the contract keys, and shows the true defaults for
// every tunable (its comments say "defaults shown": this keeps them honest).
TEST(Config, ExampleFileParsesAndShowsDefaults) {
  const Config c = load_config_file(kSourceDir + "/conf/rsfcd.yaml");
  const Config d;
  EXPECT_EQ(c.queues, std::vector<uint16_t>{0});
  EXPECT_EQ(c.params.subscriber_networks,
            (std::vector<Prefix>{prefix("198.18.0.0/16"), prefix("2001:2::/48")}));
  // The recommendation (issue 16's suite, docs/RESULTS.md §13): rsfc on both knobs with a
  // 30 ms ceiling next to an upload, and the download paced while its phone uploads.
  EXPECT_EQ(c.params.uplink.policy, Policy::kRsfc);
  EXPECT_EQ(c.params.downlink.policy, Policy::kRsfc);
  EXPECT_EQ(c.params.rsfc.threshold_ceiling, 30 * kMilli);
  EXPECT_EQ(c.params.rsfc.threshold_ceiling_steady, 10 * kMilli);  // a default (Q52)
  EXPECT_TRUE(c.params.pacing.enabled);
  EXPECT_TRUE(c.params.pacing.next_to_upload_only);
  EXPECT_TRUE(c.params.rsfc.idle_law);  // a default (Q57)
  // With the pacer's state, a million flows still fit in 512 MiB (issue 17's memory target).
  EXPECT_EQ(c.flows_max, 1'000'000u);
  EXPECT_LE(reserved_bytes(c), uint64_t{512} << 20);  // one queue, pacer state included
  EXPECT_GE(c.regulated_max, 50'000u);
  // ... and so do the code's defaults (a million flows, their regulator slots, no pacer).
  EXPECT_EQ(d.flows_max, 1'000'000u);
  EXPECT_LE(reserved_bytes(d), uint64_t{512} << 20);
  EXPECT_EQ(c.metrics_listen, d.metrics_listen);
  EXPECT_EQ(c.log_level, d.log_level);
  EXPECT_EQ(c.queue_maxlen, d.queue_maxlen);
  EXPECT_EQ(c.socket_rcvbuf, d.socket_rcvbuf);
  EXPECT_EQ(c.batch_size, d.batch_size);
  EXPECT_EQ(c.flows_max, d.flows_max);
  EXPECT_EQ(c.decision_log, d.decision_log);
  EXPECT_EQ(c.decision_log_max_bytes, d.decision_log_max_bytes);
  const EngineParams& p = c.params;
  const EngineParams& dp = d.params;
  EXPECT_EQ(p.uplink.static_window_bytes, dp.uplink.static_window_bytes);
  EXPECT_EQ(p.downlink.static_window_bytes, dp.downlink.static_window_bytes);
  EXPECT_EQ(p.min_window_bytes, dp.min_window_bytes);
  EXPECT_EQ(p.idle_timeout, dp.idle_timeout);
  EXPECT_EQ(p.closed_timeout, dp.closed_timeout);
  EXPECT_EQ(p.embryonic_timeout, dp.embryonic_timeout);
  EXPECT_EQ(p.max_flows_per_subscriber, dp.max_flows_per_subscriber);
  EXPECT_EQ(p.adopt_from_conntrack, dp.adopt_from_conntrack);
  EXPECT_EQ(p.rsfc.threshold, dp.rsfc.threshold);
  EXPECT_EQ(p.rsfc.threshold_floor, dp.rsfc.threshold_floor);
  EXPECT_EQ(p.rsfc.threshold_ceiling_lag, dp.rsfc.threshold_ceiling_lag);
  EXPECT_EQ(p.rsfc.threshold_ceiling_download_alone, dp.rsfc.threshold_ceiling_download_alone);
  EXPECT_EQ(p.rsfc.threshold_packets, dp.rsfc.threshold_packets);
  EXPECT_EQ(p.rsfc.threshold_packets_ceiling, dp.rsfc.threshold_packets_ceiling);
  EXPECT_EQ(p.rsfc.threshold_ceiling_steady, dp.rsfc.threshold_ceiling_steady);
  EXPECT_EQ(p.rsfc.downlink_round_trip, dp.rsfc.downlink_round_trip);
  EXPECT_EQ(p.rsfc.downlink_yield, dp.rsfc.downlink_yield);
  EXPECT_EQ(p.rsfc.min_window_horizon, dp.rsfc.min_window_horizon);
  EXPECT_EQ(p.rsfc.tbuff_filter, dp.rsfc.tbuff_filter);
  EXPECT_EQ(p.rsfc.control_interval_floor, dp.rsfc.control_interval_floor);
  EXPECT_EQ(p.rsfc.growth_per_rtt, dp.rsfc.growth_per_rtt);
  EXPECT_EQ(p.rsfc.initial_window_bytes, dp.rsfc.initial_window_bytes);
  EXPECT_EQ(p.rsfc.rtt_smoothing, dp.rsfc.rtt_smoothing);
  EXPECT_EQ(p.rsfc.probe_step_queue, dp.rsfc.probe_step_queue);
  EXPECT_EQ(p.rsfc.probe_below, dp.rsfc.probe_below);
  EXPECT_EQ(p.rsfc.fast_target, dp.rsfc.fast_target);
  EXPECT_EQ(p.rsfc.min_refresh, dp.rsfc.min_refresh);
  EXPECT_EQ(p.rsfc.drain_fraction, dp.rsfc.drain_fraction);
  EXPECT_EQ(p.rsfc.path_check, dp.rsfc.path_check);
  EXPECT_EQ(p.rsfc.path_foreign_rate, dp.rsfc.path_foreign_rate);
  EXPECT_EQ(p.rsfc.path_tolerance, dp.rsfc.path_tolerance);
  EXPECT_EQ(p.rsfc.max_interval, dp.rsfc.max_interval);
  EXPECT_EQ(p.rsfc.tick_multiple, dp.rsfc.tick_multiple);
  EXPECT_EQ(p.rsfc.rtt_gain, dp.rsfc.rtt_gain);
  EXPECT_EQ(p.rsfc.monitor_after_steps, dp.rsfc.monitor_after_steps);
  EXPECT_EQ(p.rsfc.monitor_steps, dp.rsfc.monitor_steps);
  EXPECT_EQ(p.rsfc.fine_tick, dp.rsfc.fine_tick);
  EXPECT_EQ(p.rsfc.unused_fraction, dp.rsfc.unused_fraction);
  EXPECT_EQ(p.rsfc.unused_decay, dp.rsfc.unused_decay);
  EXPECT_EQ(p.rsfc.startup_growth, dp.rsfc.startup_growth);
  EXPECT_EQ(p.rsfc.per_subscriber, dp.rsfc.per_subscriber);
  EXPECT_EQ(p.rsfc.idle_law, dp.rsfc.idle_law);
  EXPECT_EQ(p.rsfc.share_equalize, dp.rsfc.share_equalize);
  EXPECT_EQ(p.rsfc.probe_doublings, dp.rsfc.probe_doublings);
  EXPECT_EQ(p.rsfc.recut_fraction, dp.rsfc.recut_fraction);
  EXPECT_EQ(p.rsfc.min_window_segments, dp.rsfc.min_window_segments);
  EXPECT_EQ(p.rsfc.lag_confirm_fraction, dp.rsfc.lag_confirm_fraction);
  EXPECT_EQ(p.rsfc.refresh_holdoff, dp.rsfc.refresh_holdoff);
  EXPECT_EQ(p.drwa.alpha, dp.drwa.alpha);
  EXPECT_EQ(p.drwa.lambda, dp.drwa.lambda);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The dotted names of the mapping keys in printed (block style) YAML, comments skipped.
std::vector<std::string> dotted_keys(const std::string& yaml) {
  std::vector<std::string> keys, path;
  std::istringstream in(yaml);
  for (std::string line; std::getline(in, line);) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos || line[indent] == '#') continue;
    path.resize(indent / 2);
    path.push_back(line.substr(indent, line.find(':') - indent));
    std::string dotted;
    for (const std::string& k : path) dotted += (dotted.empty() ? "" : ".") + k;
    keys.push_back(dotted);
  }
  return keys;
}

std::vector<std::string> keys_under(const std::vector<std::string>& keys,
                                    const std::string& section) {
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    if (k.rfind(section + ".", 0) == 0 && k.find('.', section.size() + 1) == std::string::npos) {
      out.push_back(k.substr(section.size() + 1));
    }
  }
  return out;
}

// conf/rsfcd.yaml is generated from the tables that read it, so its keys, defaults, ranges
// and help cannot drift from the parser.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ConfigPrint, ShippedFileIsThePrintedExample) {
  const std::string shipped = read_text(kSourceDir + "/conf/rsfcd.yaml");
  const std::string printed = format_config(example_config(), false);
  if (shipped == printed) return;
  const std::vector<std::string> a = lines_of(shipped), b = lines_of(printed);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  ADD_FAILURE() << "conf/rsfcd.yaml:" << i + 1 << ": '" << (i < a.size() ? a[i] : "<end>")
                << "', printed: '" << (i < b.size() ? b[i] : "<end>")
                << "'. The file is generated: build/rsfcd --print-config > conf/rsfcd.yaml";
}

// What the operator sees under rsfc: (at most 12 keys), and the experimental block that
// --print-config --tuning adds.
TEST(ConfigPrint, RsfcKeysAndTuningBlock) {
  const std::vector<std::string> shipped = dotted_keys(format_config(example_config(), false));
  EXPECT_EQ(
      keys_under(shipped, "rsfc"),
      (std::vector<std::string>{
          "threshold_ms", "threshold_floor_ms", "threshold_ceiling_ms", "min_window_horizon_s",
          "tbuff_filter_ms", "growth_per_rtt", "fast_target", "min_refresh_s", "path_check_ms",
          "initial_window_bytes", "per_subscriber", "idle_law", "share_equalize"}));
  const std::vector<std::string> all = dotted_keys(format_config(example_config(), true));
  EXPECT_EQ(keys_under(all, "rsfc").back(), "tuning");
  EXPECT_EQ(keys_under(all, "rsfc.tuning"),
            (std::vector<std::string>{"control_interval_floor_ms",
                                      "rtt_smoothing_ms",
                                      "probe_step_queue",
                                      "probe_below",
                                      "drain_fraction",
                                      "path_foreign_rate",
                                      "path_tolerance_ms",
                                      "max_interval_ms",
                                      "tick_multiple",
                                      "rtt_gain",
                                      "monitor_after_steps",
                                      "monitor_steps",
                                      "fine_tick_ms",
                                      "unused_fraction",
                                      "unused_decay",
                                      "startup_growth",
                                      "probe_doublings",
                                      "recut_fraction",
                                      "min_window_segments",
                                      "lag_confirm_fraction",
                                      "refresh_holdoff",
                                      "threshold_ceiling_lag_ms",
                                      "threshold_ceiling_download_alone_ms",
                                      "threshold_packets",
                                      "threshold_packets_ceiling_ms",
                                      "threshold_ceiling_steady_ms",
                                      "downlink_round_trip",
                                      "downlink_yield"}));
  EXPECT_EQ(all.size(), shipped.size() + 29);  // tuning and its keys: nothing else differs
}

// Printing and reading go through the same table: a printed configuration reads back as
// the one printed, for the defaults, the example, and every key away from its default.
TEST(ConfigPrint, ReadsBackAsPrinted) {
  for (const Config& c : {Config{}, example_config(), parse_config(kEveryKeyChanged)}) {
    for (const bool tuning : {false, true}) {
      const std::string text = format_config(c, tuning);
      EXPECT_EQ(format_config(parse_config(text), tuning), text) << text;
    }
  }
  const Config changed = parse_config(kEveryKeyChanged);
  const Config back = parse_config(format_config(changed, true));
  EXPECT_EQ(back.params.rsfc.threshold, changed.params.rsfc.threshold);
  EXPECT_EQ(back.params.rsfc.path_tolerance, 2'500 * kMicro);
  EXPECT_EQ(back.params.rsfc.probe_doublings, 0u);
  EXPECT_EQ(back.params.subscriber_networks, changed.params.subscriber_networks);
  EXPECT_EQ(back.decision_log, "/var/log/rsfcd/decisions.jsonl");
}

// A value away from its default says what the default is; awkward strings are quoted so
// that they read back.
TEST(ConfigPrint, ShowsDefaultsAndQuotes) {
  Config shown = example_config();
  shown.params.uplink.policy = Policy::kStatic;
  shown.params.downlink.policy = Policy::kOff;
  const std::string text = format_config(shown, false);
  EXPECT_NE(text.find("# Values: off, observe, static, rsfc or drwa. Default: \"off\".\n"
                      "  policy: static\n"),
            std::string::npos);
  EXPECT_NE(text.find("  policy: \"off\"\n"), std::string::npos);  // PyYAML reads off as false
  Config c;
  c.decision_log = "/tmp/a \"b\"\\c\n";
  c.params.rsfc.threshold = 12'500 * kMicro;
  c.params.idle_timeout = 1'500 * kMilli;
  const std::string printed = format_config(c, false);
  EXPECT_NE(printed.find("decision_log: \"/tmp/a \\\"b\\\"\\\\c\\n\"\n"), std::string::npos)
      << printed;
  EXPECT_NE(printed.find("threshold_ms: 12.5\n"), std::string::npos);
  EXPECT_NE(printed.find("idle_timeout_s: 1.5\n"), std::string::npos);
  const Config back = parse_config(printed);
  EXPECT_EQ(back.decision_log, c.decision_log);
  EXPECT_EQ(back.params.rsfc.threshold, c.params.rsfc.threshold);
  EXPECT_EQ(back.params.idle_timeout, c.params.idle_timeout);
  // No line is longer than the printer's width.
  std::istringstream in(format_config(example_config(), true));
  for (std::string line; std::getline(in, line);) EXPECT_LE(line.size(), 96u) << line;
}

struct BadCase {
  const char* name;
  const char* yaml;
  int line;          // expected line in "t.yaml:<line>: "; 0 = no line in the message
  const char* key;   // expected dotted key right after the line ("" = none)
  const char* what;  // expected fragment of the explanation
};

// One case per kind of mistake. The message must be exactly one line and start with
// "t.yaml:<line>: <key>: ".
const BadCase kBadCases[] = {
    // document shape
    {"empty_text", "", 1, "", "empty configuration"},
    {"only_comments", "# nothing\n", 1, "", "empty configuration"},
    {"top_level_list", "- queues: [0]\n", 1, "",
     "top level must be a mapping of keys (got a list)"},
    {"top_level_scalar", "hello\n", 1, "", "top level must be a mapping of keys (got hello)"},
    {"syntax_error", "queues: [0\nlog: {}\n", 2, "", "YAML syntax error"},
    {"tab_indent", "flows:\n\tmax: 5\n", 2, "", "YAML syntax error"},
    {"stray_comma", "# yaml-cpp 0.7 used to loop forever on this\n,queues: [0]\n", 2, "",
     "YAML syntax error"},
    {"unterminated_quote", "log:\n  level: \"info\ndrwa:\n  alpha: 0.5\n", 2, "log.level",
     "unterminated quoted string: the closing \" must be on the line"},
    {"unterminated_single_quote", "log:\n  level: 'info\nqueues: [0]\n", 2, "log.level",
     "unterminated quoted string"},
    {"unterminated_tagged_quote", "log:\n  level: !!str \"x\nqueues: [0]\n", 2, "log.level",
     "unterminated"},
    {"unterminated_quoted_key", "\"queues: [0]\nlog: {}\n", 1, "", "unterminated quoted string"},
    {"multi_line_quote", "metrics: { listen: \"127.0.0.1:\n  9477\" }\n", 1, "metrics.listen",
     "unterminated quoted string"},
    {"line_continuation_in_quote", "decision_log: \"/var/\\\n  log\"\n", 1, "decision_log",
     "unterminated quoted string"},
    {"directive_inside", "queues: [0]\n%og: { level: debug }\n", 2, "",
     "a line starting with % (a YAML directive) inside the document"},
    {"directive_unknown", "%queues: [0]\n---\nlog: {}\n", 1, "", "unknown YAML directive"},
    {"directive_without_start", "%YAML 1.1\nlog: {}\n", 2, "", "followed by a '---' line"},
    {"document_end_then_more", "queues: [0]\n...\nlog: { level: warn }\n", 3, "",
     "more than one YAML document"},
    {"two_empty_documents", "---\n---\n", 2, "", "more than one YAML document"},
    {"newline_in_value", "log: { level: \"in\\nfo\" }\n", 1, "log.level", "(got \"in\\nfo\")"},
    {"two_documents", "queues: [0]\n---\nqueues: [1]\n", 2, "", "more than one YAML document"},
    // keys
    {"unknown_top_key", "queues: [0]\nqueue_s: [1]\n", 2, "queue_s",
     "unknown key, did you mean queues?"},
    {"unknown_nested_key", "flows:\n  max: 5\n  idle_timeout: 3\n", 3, "flows.idle_timeout",
     "unknown key, did you mean idle_timeout_s?"},
    {"unknown_key_lists_known", "log: { color: true }\n", 1, "log.color",
     "unknown key (known: level)"},
    {"unknown_rsfc_key", "rsfc:\n  threshold_ms: auto\n  growth: 0.5\n", 3, "rsfc.growth",
     "unknown key"},
    {"decision_log_in_rsfc", "rsfc:\n  decision_log: /tmp/d.jsonl\n", 2, "rsfc.decision_log",
     "unknown key: the decision log is the top-level key decision_log (got /tmp/d.jsonl)"},
    {"tuning_key_in_rsfc", "rsfc:\n  probe_below: 0.3\n", 2, "rsfc.probe_below",
     "unknown key: moved to the experimental block, rsfc.tuning.probe_below (got 0.3)"},
    {"operator_key_in_tuning", "rsfc: { tuning: { fast_target: 1 } }\n", 1,
     "rsfc.tuning.fast_target", "unknown key: an operator key, set it as rsfc.fast_target"},
    {"unknown_tuning_key", "rsfc:\n  tuning:\n    probe_belo: 0.3\n", 3, "rsfc.tuning.probe_belo",
     "unknown key, did you mean probe_below?"},
    {"tuning_not_mapping", "rsfc: { tuning: 1 }\n", 1, "rsfc.tuning", "expected a mapping"},
    {"anchor", "log: { level: info }\nuplink: { policy: &p static }\n", 2, "",
     "YAML anchors and aliases (&name, *name) are not accepted: write the value out (got &p)"},
    {"anchored_section", "defaults: &d\n  level: info\nlog:\n  <<: *d\n", 1, "",
     "anchors and aliases (&name, *name) are not accepted: write the value out (got &d)"},
    {"anchor_in_flow", "queues: [0, &q 1]\n", 1, "", "(got &q)"},
    {"merge_key", "<<: { queues: [0] }\n", 1, "<<", "unknown key"},
    {"duplicate_top_key", "queues: [0]\nlog: {level: info}\nqueues: [1]\n", 3, "queues",
     "duplicate key (first set on line 1)"},
    {"duplicate_nested_key", "uplink:\n  policy: static\n  policy: \"off\"\n", 3, "uplink.policy",
     "duplicate key (first set on line 2)"},
    {"duplicate_flow_key", "flows: { max: 1, max: 2 }\n", 1, "flows.max", "duplicate key"},
    {"non_scalar_key", "flows:\n  [max]: 5\n", 2, "flows.?", "a key must be a plain name"},
    // types
    {"section_not_mapping", "flows: 5\n", 1, "flows", "expected a mapping of keys (got 5)"},
    {"section_is_list", "rsfc:\n  - threshold_ms\n", 2, "rsfc", "expected a mapping"},
    {"queues_scalar", "queues: 0\n", 1, "queues",
     "expected a list of NFQUEUE numbers, e.g. [0, 1] (got 0)"},
    {"queues_null", "queues:\nlog: {}\n", 1, "queues", "expected a list"},
    {"networks_scalar", "subscriber_networks: 10.0.0.0/8\n", 1, "subscriber_networks",
     "expected a list of prefixes"},
    {"networks_null", "subscriber_networks:\n", 1, "subscriber_networks", "has no value"},
    {"integer_missing", "min_window_bytes:\nqueues: [0]\n", 1, "min_window_bytes",
     "has no value, expected an integer (got nothing)"},
    {"integer_fraction", "min_window_bytes: 1.5\n", 1, "min_window_bytes",
     "expected an integer (got 1.5)"},
    {"integer_exponent", "flows: { max: 1e6 }\n", 1, "flows.max", "expected an integer (got 1e6)"},
    {"integer_hex", "queue: { batch: 0x10 }\n", 1, "queue.batch", "expected an integer (got 0x10)"},
    {"integer_word", "queue: { maxlen: lots }\n", 1, "queue.maxlen",
     "expected an integer (got lots)"},
    {"integer_bool", "queue: { maxlen: true }\n", 1, "queue.maxlen", "expected an integer"},
    {"integer_quoted", "uplink: { static_window_bytes: \"65535\" }\n", 1,
     "uplink.static_window_bytes", "not a quoted string (got \"65535\")"},
    {"integer_list", "min_window_bytes: [2920]\n", 1, "min_window_bytes",
     "expected an integer (got a list)"},
    {"integer_negative", "min_window_bytes: -2920\n", 1, "min_window_bytes",
     "must not be negative (got -2920)"},
    {"integer_leading_zero", "queues: [0755]\n", 1, "queues[0]", "leading zero"},
    {"integer_bad_separator", "flows: { max: 1__000 }\n", 1, "flows.max", "expected an integer"},
    {"number_bad_separator", "flows: { idle_timeout_s: 1_.5 }\n", 1, "flows.idle_timeout_s",
     "expected a number"},
    {"integer_trailing_separator", "flows: { max: 1000_ }\n", 1, "flows.max",
     "expected an integer"},
    {"number_quoted", "drwa: { lambda: \"3\" }\n", 1, "drwa.lambda", "not a quoted string"},
    {"number_word", "drwa: { lambda: three }\n", 1, "drwa.lambda", "expected a number (got three)"},
    {"number_nan", "drwa: { alpha: .nan }\n", 1, "drwa.alpha", "expected a number (got .nan)"},
    {"number_inf", "drwa: { lambda: .inf }\n", 1, "drwa.lambda", "expected a number"},
    {"number_overflow", "flows: { idle_timeout_s: 1e400 }\n", 1, "flows.idle_timeout_s",
     "out of range"},
    {"string_is_list", "decision_log: [a, b]\n", 1, "decision_log",
     "expected a string (got a list)"},
    {"string_is_bool", "queues: [0]\ndecision_log: off\n", 2, "decision_log", "reads as a boolean"},
    {"string_is_null", "log: { level: ~ }\n", 1, "log.level", "has no value"},
    // ranges
    {"uint32_overflow", "flows: { max: 4294967296 }\n", 1, "flows.max",
     "out of range, must be between 1 and 4294967295 (got 4294967296)"},
    {"uint64_overflow", "flows: { max: 99999999999999999999999 }\n", 1, "flows.max",
     "out of range"},
    {"flows_max_zero", "flows: { max: 0 }\n", 1, "flows.max", "out of range"},
    // flows.max per worker: it used to wrap to 1 flow per worker with two queues
    {"flows_max_below_queues", "queues: [0, 1, 2]\nflows: { max: 2 }\n", 2, "flows.max",
     "must be at least the number of queues (3): each queue's worker gets flows.max / 3 flows "
     "(got 2)"},
    {"flows_max_default_below_queues", "flows:\n  max: 1\nqueues: [0, 1]\n", 2, "flows.max",
     "at least the number of queues (2)"},
    {"flows_max_wraps_with_two_queues", "queues: [0, 1]\nflows: { max: 4294967295 }\n", 2,
     "flows.max", "per flows.regulated_max), more than this machine's memory"},
    {"flows_max_per_worker_index", "flows: { max: 4294967295 }\n", 1, "flows.max",
     "4294967295 flows per queue's worker, more than its flow table can index (2147483648)"},
    {"path_foreign_rate_zero", "rsfc: { tuning: { path_foreign_rate: 0 } }\n", 1,
     "rsfc.tuning.path_foreign_rate", "out of range"},
    {"path_check_too_long", "rsfc: { path_check_ms: 60001 }\n", 1, "rsfc.path_check_ms",
     "out of range"},
    {"monitor_steps_zero", "rsfc: { tuning: { monitor_steps: 0 } }\n", 1,
     "rsfc.tuning.monitor_steps", "out of range"},
    {"rtt_gain_zero", "rsfc: { tuning: { rtt_gain: 0 } }\n", 1, "rsfc.tuning.rtt_gain",
     "out of range"},
    {"startup_growth_below_one", "rsfc: { tuning: { startup_growth: 0.5 } }\n", 1,
     "rsfc.tuning.startup_growth", "out of range"},
    {"per_subscriber_yes", "rsfc: { per_subscriber: yes }\n", 1, "rsfc.per_subscriber",
     "expected true or false (got yes)"},
    {"per_subscriber_list", "rsfc: { per_subscriber: [true] }\n", 1, "rsfc.per_subscriber",
     "expected true or false"},
    {"idle_law_number", "rsfc: { idle_law: 1 }\n", 1, "rsfc.idle_law", "expected true or false"},
    {"share_equalize_above_one", "rsfc: { share_equalize: 1.5 }\n", 1, "rsfc.share_equalize",
     "out of range"},
    {"probe_doublings_too_many", "rsfc: { tuning: { probe_doublings: 11 } }\n", 1,
     "rsfc.tuning.probe_doublings", "out of range"},
    {"recut_fraction_zero", "rsfc: { tuning: { recut_fraction: 0 } }\n", 1,
     "rsfc.tuning.recut_fraction", "out of range"},
    {"min_window_segments_zero", "rsfc: { tuning: { min_window_segments: 0 } }\n", 1,
     "rsfc.tuning.min_window_segments", "out of range"},
    {"refresh_holdoff_above_one", "rsfc: { tuning: { refresh_holdoff: 2 } }\n", 1,
     "rsfc.tuning.refresh_holdoff", "out of range"},
    {"min_window_too_small", "min_window_bytes: 1071\n", 1, "min_window_bytes",
     "must be between 1072 and 1073725440 (got 1071)"},
    {"min_window_too_big", "min_window_bytes: 1073725441\n", 1, "min_window_bytes", "out of range"},
    {"static_window_too_big", "downlink: { static_window_bytes: 2000000000 }\n", 1,
     "downlink.static_window_bytes", "out of range"},
    {"queue_number_too_big", "queues: [0, 65536]\n", 1, "queues[1]",
     "must be between 0 and 65535 (got 65536)"},
    {"batch_zero", "queue:\n  batch: 0\n", 2, "queue.batch", "out of range"},
    {"socket_buffer_small", "queue: { socket_buffer_bytes: 1000 }\n", 1,
     "queue.socket_buffer_bytes", "out of range"},
    {"idle_timeout_zero", "flows: { idle_timeout_s: 0 }\n", 1, "flows.idle_timeout_s",
     "must be between 1 and 604800 (got 0)"},
    {"closed_timeout_negative", "flows: { closed_timeout_s: -1 }\n", 1, "flows.closed_timeout_s",
     "must not be negative"},
    {"embryonic_timeout_big", "flows: { embryonic_timeout_s: 3601 }\n", 1,
     "flows.embryonic_timeout_s", "out of range"},
    {"max_per_subscriber_negative", "flows: { max_per_subscriber: -1 }\n", 1,
     "flows.max_per_subscriber", "must not be negative"},
    {"threshold_zero", "rsfc: { threshold_ms: 0 }\n", 1, "rsfc.threshold_ms",
     "must be > 0 and <= 10000 (got 0)"},
    {"threshold_word", "rsfc: { threshold_ms: fast }\n", 1, "rsfc.threshold_ms",
     "expected auto or a number of ms (got fast)"},
    {"threshold_quoted_number", "rsfc: { threshold_ms: \"20\" }\n", 1, "rsfc.threshold_ms",
     "expected auto or a number of ms (got \"20\")"},
    {"threshold_floor_negative", "rsfc: { threshold_floor_ms: -5 }\n", 1, "rsfc.threshold_floor_ms",
     "must not be negative"},
    {"horizon_zero", "rsfc: { min_window_horizon_s: 0 }\n", 1, "rsfc.min_window_horizon_s",
     "out of range"},
    {"tbuff_filter_big", "rsfc: { tbuff_filter_ms: 10001 }\n", 1, "rsfc.tbuff_filter_ms",
     "out of range"},
    {"control_floor_zero", "rsfc: { tuning: { control_interval_floor_ms: 0 } }\n", 1,
     "rsfc.tuning.control_interval_floor_ms", "out of range"},
    {"growth_zero", "rsfc: { growth_per_rtt: 0 }\n", 1, "rsfc.growth_per_rtt",
     "must be > 0 and <= 4 (got 0)"},
    {"initial_window_fraction", "rsfc: { initial_window_bytes: 3000.5 }\n", 1,
     "rsfc.initial_window_bytes", "expected an integer"},
    {"alpha_one", "drwa: { alpha: 1 }\n", 1, "drwa.alpha", "must be >= 0 and < 1 (got 1)"},
    {"lambda_zero", "drwa: { lambda: 0 }\n", 1, "drwa.lambda", "out of range"},
    {"pacing_gain_one", "pacing: { gain: 1 }\n", 1, "pacing.gain", "must be > 1 and <= 4 (got 1)"},
    {"pacing_hold_zero", "pacing: { max_hold_ms: 0 }\n", 1, "pacing.max_hold_ms", "out of range"},
    {"pacing_burst_huge", "pacing: { burst_bytes: 2000000 }\n", 1, "pacing.burst_bytes",
     "out of range"},
    {"pacing_without_downlink_rsfc",
     "subscriber_networks: [10.0.0.0/8]\ndownlink: { policy: drwa }\npacing: { enabled: true }\n",
     3, "pacing.enabled", "needs downlink.policy rsfc"},
    // names
    {"policy_unknown", "uplink:\n  policy: fast\n", 2, "uplink.policy",
     "unknown value, expected one of off, observe, static, rsfc, drwa (got fast)"},
    {"policy_wrong_case", "uplink: { policy: Static }\n", 1, "uplink.policy", "unknown value"},
    {"policy_null", "uplink: { policy: }\n", 1, "uplink.policy", "has no value"},
    {"log_level_unknown", "log: { level: verbose }\n", 1, "log.level",
     "expected one of debug, info, warn, error (got verbose)"},
    // policy per direction
    {"drwa_on_uplink", "subscriber_networks: [10.0.0.0/8]\nuplink: { policy: drwa }\n", 2,
     "uplink.policy", "drwa is a downlink-only policy"},
    // prefixes
    {"prefix_length", "subscriber_networks:\n  - 10.0.0.0/8\n  - 10.0.0.0/33\n", 3,
     "subscriber_networks[1]", "bad prefix"},
    {"prefix_host_bits", "subscriber_networks: [\"198.18.0.1/16\"]\n", 1, "subscriber_networks[0]",
     "bad prefix"},
    {"prefix_word", "subscriber_networks: [internal]\n", 1, "subscriber_networks[0]",
     "(got internal)"},
    {"prefix_v6_length", "subscriber_networks: [\"2001:2::/129\"]\n", 1, "subscriber_networks[0]",
     "bad prefix"},
    {"prefix_not_string", "subscriber_networks: [[10.0.0.0/8]]\n", 1, "subscriber_networks[0]",
     "expected a string"},
    {"prefix_duplicate", "subscriber_networks: [10.0.0.0/8, 2001:2::/48, 10.0.0.0/8]\n", 1,
     "subscriber_networks[2]", "duplicate prefix, same as subscriber_networks[0]"},
    {"networks_needed_empty", "subscriber_networks: []\nuplink: { policy: static }\n", 1,
     "subscriber_networks", "must list at least one prefix when uplink.policy is not off"},
    {"networks_needed_missing", "queues: [0]\ndownlink:\n  policy: observe\n", 3,
     "subscriber_networks", "when downlink.policy is not off"},
    // queues
    {"queues_empty", "log: { level: info }\nqueues: []\n", 2, "queues",
     "must list at least one queue"},
    {"queue_duplicate", "queues:\n  - 0\n  - 1\n  - 0\n", 4, "queues[2]",
     "duplicate queue number, also queues[0] (got 0)"},
    {"queue_negative", "queues: [-1]\n", 1, "queues[0]", "must not be negative"},
    // windows across keys
    {"static_below_min_window",
     "subscriber_networks: [10.0.0.0/8]\nmin_window_bytes: 4000\nuplink:\n  policy: static\n"
     "  static_window_bytes: 3000\n",
     5, "uplink.static_window_bytes",
     "below min_window_bytes (4000) while uplink.policy is static (got 3000)"},
    {"min_window_above_default_static",
     "subscriber_networks: [10.0.0.0/8]\ndownlink: { policy: static }\nmin_window_bytes: 70000\n",
     3, "min_window_bytes",
     "above downlink.static_window_bytes (65535 by default) while downlink.policy is static"},
    {"initial_window_below_min", "rsfc:\n  initial_window_bytes: 2000\n", 2,
     "rsfc.initial_window_bytes", "at least min_window_bytes (2920) (got 2000)"},
    {"initial_window_below_raised_min",
     "min_window_bytes: 20000\nrsfc:\n  initial_window_bytes: 16384\n", 3,
     "rsfc.initial_window_bytes", "at least min_window_bytes (20000) (got 16384)"},
    // metrics.listen
    {"listen_no_port", "metrics: { listen: \"127.0.0.1\" }\n", 1, "metrics.listen",
     "expected host:port"},
    {"listen_port_only", "metrics: { listen: \"9477\" }\n", 1, "metrics.listen",
     "expected host:port"},
    {"listen_hostname", "metrics: { listen: \"localhost:9477\" }\n", 1, "metrics.listen",
     "host must be an IPv4 address"},
    {"listen_empty_host", "metrics: { listen: \":9477\" }\n", 1, "metrics.listen",
     "host must be an IPv4 address"},
    {"listen_bare_ipv6", "metrics: { listen: \"::1:9477\" }\n", 1, "metrics.listen",
     "must be in brackets"},
    {"listen_bad_ipv6", "metrics: { listen: \"[::g]:9477\" }\n", 1, "metrics.listen",
     "not an IPv6 address"},
    {"listen_ipv4_in_brackets", "metrics: { listen: \"[127.0.0.1]:9477\" }\n", 1, "metrics.listen",
     "not an IPv6 address"},
    {"listen_unclosed_bracket", "metrics: { listen: \"[::1:9477\" }\n", 1, "metrics.listen",
     "expected [ipv6]:port"},
    {"listen_port_zero", "metrics: { listen: \"127.0.0.1:0\" }\n", 1, "metrics.listen",
     "port must be a number between 1 and 65535 (got \"127.0.0.1:0\")"},
    {"listen_port_big", "metrics:\n  listen: \"[::1]:65536\"\n", 2, "metrics.listen",
     "port must be a number"},
    {"listen_port_name", "metrics: { listen: \"127.0.0.1:http\" }\n", 1, "metrics.listen",
     "port must be a number"},
    {"listen_port_empty", "metrics: { listen: \"127.0.0.1:\" }\n", 1, "metrics.listen",
     "port must be a number"},
    {"listen_not_string", "metrics: { listen: [a] }\n", 1, "metrics.listen", "expected a string"},
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name;
}

class BadConfig : public testing::TestWithParam<BadCase> {};

TEST_P(BadConfig, IsRejectedWithOneLineNamingLineAndKey) {
  const BadCase& c = GetParam();
  SCOPED_TRACE(c.yaml);
  const std::string err = error_of(c.yaml);
  ASSERT_FALSE(err.empty()) << "accepted";
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  std::string head = "t.yaml:" + std::to_string(c.line) + ": ";
  if (*c.key != '\0') head += std::string(c.key) + ": ";
  EXPECT_EQ(err.rfind(head, 0), 0u) << "want prefix '" << head << "' in: " << err;
  EXPECT_NE(err.find(c.what), std::string::npos) << "want '" << c.what << "' in: " << err;
}

INSTANTIATE_TEST_SUITE_P(Config, BadConfig, testing::ValuesIn(kBadCases),
                         [](const testing::TestParamInfo<BadCase>& p) {
                           return std::string(p.param.name);
                         });

// load_config_file: the path is the source in every message.
struct FileCase {
  const char* file;
  const char* what;  // expected message after "<path>"
};

TEST(ConfigFile, ErrorsNameThePath) {
  const FileCase cases[] = {
      {"typo.yaml", ":7: rsfc.growth_per_rt: unknown key, did you mean growth_per_rtt?"},
      {"empty.yaml", ":1: empty configuration"},
      {"comments_only.yaml", ":1: empty configuration"},
      {"not_a_mapping.yaml", ":1: the top level must be a mapping"},
      {"missing.yaml", ": cannot open: No such file or directory"},
      {"", ": is a directory"},
  };
  for (const FileCase& c : cases) {
    const std::string path = kDataDir + c.file;
    try {
      load_config_file(path);
      ADD_FAILURE() << path << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + c.what, 0), 0u) << e.what();
    }
  }
}

// Nested aliases grow 10x per level once expanded: refused before any walk of the tree, so
// the answer comes at once (10^8 nodes: it took ~14 s when every alias was followed).
TEST(ConfigFile, AliasBombIsRefusedAtOnce) {
  const std::string path = kDataDir + "alias_bomb.yaml";
  const auto start = std::chrono::steady_clock::now();
  try {
    load_config_file(path);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              path +
                  ":3: YAML anchors and aliases (&name, *name) are not accepted: write the "
                  "value out (got &a)");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(ConfigFile, LargeFileIsRefused) {
  const std::string path = testing::TempDir() + "rsfcd_config_test_large.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string line = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 1100; ++i) std::fputs(line.c_str(), f);
    std::fputs("queues: [0]\n", f);
    std::fclose(f);
  }
  try {
    load_config_file(path);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(FlowsPerWorker, SharesFlowsMaxBetweenQueues) {
  EXPECT_EQ(flows_per_worker(parse_config("queues: [0]\n")), 1'000'000u);
  EXPECT_EQ(flows_per_worker(parse_config("queues: [0, 1]\nflows: { max: 5 }\n")), 3u);
  EXPECT_EQ(flows_per_worker(parse_config("queues: [0, 1]\nflows: { max: 2 }\n")), 1u);
  // The largest that used to wrap to 1: two queues, 2^32 - 1 flows, no overflow.
  Config c;
  c.queues = {0, 1};
  c.flows_max = 4'294'967'295u;
  EXPECT_EQ(flows_per_worker(c), 2'147'483'648u);
}

// flows.regulated_max is shared out between the workers like flows.max (rounded up).
TEST(Flows, RegulatedMaxIsSharedOutBetweenWorkers) {
  EXPECT_EQ(Config{}.regulated_max, 58000u);
  const Config c = parse_config("queues: [0, 1, 2]\nflows: { max: 30, regulated_max: 10 }\n");
  EXPECT_EQ(c.regulated_max, 10u);
  EXPECT_EQ(regulated_per_worker(c), 4u);
  EXPECT_EQ(flows_per_worker(c), 10u);
}

TEST(RestartOnly, ListsChangedRestartOnlyKeys) {
  const Config a = parse_config(kContractExample);
  EXPECT_TRUE(restart_only_differences(a, a).empty());

  // Reloadable keys changed: nothing to warn about.
  Config b = parse_config(std::string(kContractExample) +
                          "rsfc: { growth_per_rtt: 0.5 }\ndrwa: { lambda: 2 }\n");
  b.params.uplink.policy = Policy::kRsfc;
  b.params.min_window_bytes = 5000;
  b.log_level = LogLevel::kDebug;
  EXPECT_TRUE(restart_only_differences(a, b).empty());

  struct Change {
    const char* key;
    void (*apply)(Config&);
  };
  const Change changes[] = {
      {"queues",
       [](Config& c) {
         c.queues = {0, 1};
       }},
      {"queue.maxlen", [](Config& c) { c.queue_maxlen = 100; }},
      {"queue.socket_buffer_bytes", [](Config& c) { c.socket_rcvbuf = 1 << 20; }},
      {"queue.batch", [](Config& c) { c.batch_size = 8; }},
      {"flows.max", [](Config& c) { c.flows_max = 10; }},
      {"flows.regulated_max", [](Config& c) { c.regulated_max = 10; }},
      {"metrics.listen", [](Config& c) { c.metrics_listen = ""; }},
  };
  Config all = a;
  std::vector<std::string> expected;
  for (const Change& ch : changes) {
    Config one = a;
    ch.apply(one);
    EXPECT_EQ(restart_only_differences(a, one), std::vector<std::string>{ch.key});
    ch.apply(all);
    expected.emplace_back(ch.key);
  }
  EXPECT_EQ(restart_only_differences(a, all), expected);
}

TEST(RestartOnly, FromParsedFiles) {
  const Config running = parse_config("queues: [0]\nflows: { max: 100 }\n");
  const Config loaded = parse_config(
      "queues: [0]\nflows: { max: 200, idle_timeout_s: 5 }\nmetrics: { listen: \"\" }\n");
  EXPECT_EQ(restart_only_differences(running, loaded),
            (std::vector<std::string>{"flows.max", "metrics.listen"}));
}

TEST(LogLevel, Names) {
  EXPECT_STREQ(to_string(LogLevel::kDebug), "debug");
  EXPECT_STREQ(to_string(LogLevel::kInfo), "info");
  EXPECT_STREQ(to_string(LogLevel::kWarn), "warn");
  EXPECT_STREQ(to_string(LogLevel::kError), "error");
  // Round trip through the parser.
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    EXPECT_EQ(parse_config(std::string("log: { level: ") + to_string(l) + " }\n").log_level, l);
  }
}

}  // namespace
}  // namespace rsfc
