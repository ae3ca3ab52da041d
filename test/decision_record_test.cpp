// The one JSON writer for decision records, in both of its forms: the daemon's decision log
// (also tested through DecisionLogFile in io_test) and rsfc-replay's lines.
#include "rsfc/core/decision_record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace rsfc {
namespace {

DecisionRecord record() {
  DecisionRecord r;
  r.time = 5 * kSecond + 2500 * kMicro;
  r.subscriber = *IpAddr::parse("198.18.0.2");
  r.peer = *IpAddr::parse("2001:db8::1");
  r.subscriber_port = 40000;
  r.peer_port = 443;
  r.knob = "uplink";
  r.state = "fast";
  r.tick_ms = 0;  // unknown
  r.t_buff_ms = 12.5;
  r.rate_bps = 1.25e6;
  r.rtt_min_ms = 20;
  r.rtt_ms = NAN;  // unknown
  r.window_bytes = 44032;
  r.target_bytes = 43750;
  r.enforced = false;
  r.timestamps = true;
  return r;
}

std::string format(const DecisionRecord& r, DecisionJson form, Nanos origin = 0) {
  char buf[1024];
  return std::string(buf, format_decision_json(r, buf, sizeof(buf), form, origin));
}

TEST(DecisionRecordJson, LogFormKeepsTheValuesAsTheyAre) {
  EXPECT_EQ(format(record(), DecisionJson::kLog),
            "{\"time_ns\":5002500000,\"subscriber\":\"198.18.0.2\",\"subscriber_port\":40000,"
            "\"peer\":\"2001:db8::1\",\"peer_port\":443,\"knob\":\"uplink\",\"state\":\"fast\","
            "\"tick_ms\":0,\"t_buff_ms\":12.5,\"rate_bps\":1.25e+06,\"rtt_min_ms\":20,"
            "\"rtt_ms\":null,\"window_bytes\":44032,\"target_bytes\":43750,\"timestamps\":true,"
            "\"enforced\":false}\n");
}

TEST(DecisionRecordJson, ReplayFormCountsFromTheOriginAndNullsTheUnknown) {
  DecisionRecord r = record();
  EXPECT_EQ(format(r, DecisionJson::kReplay, 5 * kSecond),
            "{\"type\":\"decision\",\"time_s\":0.002500,\"subscriber\":\"198.18.0.2\","
            "\"subscriber_port\":40000,\"peer\":\"2001:db8::1\",\"peer_port\":443,"
            "\"knob\":\"uplink\",\"state\":\"fast\",\"tick_ms\":null,\"t_buff_ms\":12.500,"
            "\"rate_bps\":1250000,\"rtt_min_ms\":20.000,\"rtt_ms\":null,"
            "\"window_bytes\":44032,\"target_bytes\":43750,\"timestamps\":true}\n");
  r.t_buff_ms = -1;
  r.rate_bps = INFINITY;
  const std::string line = format(r, DecisionJson::kReplay);
  EXPECT_NE(line.find("\"t_buff_ms\":null,\"rate_bps\":null,"), std::string::npos) << line;
}

// The downlink queue regulator's records add q_down_ms after rtt_ms; the others (uplink
// above, DRWA's) stay as they were.
TEST(DecisionRecordJson, DownlinkQueueRecordsCarryQDown) {
  DecisionRecord r = record();
  r.knob = "downlink";
  r.state = "slow";
  r.has_q_down = true;
  r.q_down_ms = 7.25;
  std::string line = format(r, DecisionJson::kLog);
  EXPECT_NE(line.find("\"knob\":\"downlink\",\"state\":\"slow\","), std::string::npos) << line;
  EXPECT_NE(line.find("\"rtt_ms\":null,\"q_down_ms\":7.25,\"window_bytes\":44032,"),
            std::string::npos)
      << line;
  r.q_down_ms = NAN;
  line = format(r, DecisionJson::kReplay);
  EXPECT_NE(line.find("\"q_down_ms\":null,"), std::string::npos) << line;
  r.q_down_ms = 3;
  line = format(r, DecisionJson::kReplay);
  EXPECT_NE(line.find("\"q_down_ms\":3.000,"), std::string::npos) << line;
  r.has_q_down = false;
  EXPECT_EQ(format(r, DecisionJson::kLog).find("q_down_ms"), std::string::npos);
}

// An uplink step that was the idle law's (a phone without timestamps) says how idle its
// uplink was, after threshold_ms; every other record leaves idle_pct out.
TEST(DecisionRecordJson, IdleLawStepsCarryTheUplinksIdleShare) {
  DecisionRecord r = record();
  r.has_threshold = true;
  r.threshold_ms = 80;
  r.has_idle = true;
  r.idle_pct = 12.5;
  std::string line = format(r, DecisionJson::kLog);
  EXPECT_NE(line.find("\"threshold_ms\":80,\"idle_pct\":12.5,\"window_bytes\":"), std::string::npos)
      << line;
  line = format(r, DecisionJson::kReplay);
  EXPECT_NE(line.find("\"threshold_ms\":80.000,\"idle_pct\":12.500,"), std::string::npos) << line;
  r.idle_pct = 0;  // a step that read no idle time still says so
  EXPECT_NE(format(r, DecisionJson::kReplay).find("\"idle_pct\":0.000,"), std::string::npos);
  r.has_idle = false;
  EXPECT_EQ(format(r, DecisionJson::kLog).find("idle_pct"), std::string::npos);
  EXPECT_EQ(format(r, DecisionJson::kReplay).find("idle_pct"), std::string::npos);
}

// The two queue laws' records carry the T they hold their queue at, after rtt_ms (and before
// q_down_ms); unknown is null; DRWA's records leave it out.
TEST(DecisionRecordJson, QueueLawRecordsCarryTheirThreshold) {
  DecisionRecord r = record();
  r.has_threshold = true;
  r.threshold_ms = 80;
  std::string line = format(r, DecisionJson::kLog);
  EXPECT_NE(line.find("\"rtt_ms\":null,\"threshold_ms\":80,\"window_bytes\":"), std::string::npos)
      << line;
  r.has_q_down = true;
  r.q_down_ms = 7.25;
  r.threshold_ms = 360.5;
  line = format(r, DecisionJson::kReplay);
  EXPECT_NE(line.find("\"threshold_ms\":360.500,\"q_down_ms\":7.250,"), std::string::npos) << line;
  r.threshold_ms = NAN;
  line = format(r, DecisionJson::kLog);
  EXPECT_NE(line.find("\"threshold_ms\":null,"), std::string::npos) << line;
  r.has_threshold = false;
  EXPECT_EQ(format(r, DecisionJson::kLog).find("threshold_ms"), std::string::npos);
}

TEST(DecisionRecordJson, EscapesNamesAndNeverOverrunsTheBuffer) {
  DecisionRecord r = record();
  r.state = "a\"b\\c\n";
  r.knob = nullptr;
  const std::string line = format(r, DecisionJson::kLog);
  EXPECT_NE(line.find("\"knob\":\"\",\"state\":\"a\\\"b\\\\c\\u000a\""), std::string::npos) << line;
  for (DecisionJson form : {DecisionJson::kLog, DecisionJson::kReplay}) {
    const std::string full = format(r, form);
    char buf[1024];
    EXPECT_EQ(format_decision_json(r, buf, full.size() + 1, form), full.size());
    EXPECT_EQ(buf[full.size()], '\0');
    for (size_t cap : {size_t{0}, size_t{1}, size_t{40}, full.size()}) {
      buf[0] = 'x';
      EXPECT_EQ(format_decision_json(r, buf, cap, form), 0u) << cap;
    }
  }
}

}  // namespace
}  // namespace rsfc
