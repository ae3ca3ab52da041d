#include "rsfc/core/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rsfc/core/downlink_regulator.h"

namespace rsfc {
namespace {

struct BucketCase {
  const char* description;
  uint64_t ns;
  size_t bucket;  // non-cumulative index; kBoundsNs.size() = overflow (+Inf)
};

class HistogramBucketTest : public ::testing::TestWithParam<BucketCase> {};

TEST_P(HistogramBucketTest, ObservationLandsInOneBucket) {
  const BucketCase& c = GetParam();
  LatencyHistogram h;
  h.observe(c.ns);
  for (size_t i = 0; i <= LatencyHistogram::kBoundsNs.size(); ++i) {
    EXPECT_EQ(h.bucket(i), i == c.bucket ? 1u : 0u) << c.description << " bucket " << i;
  }
  EXPECT_EQ(h.count(), 1u);
  EXPECT_EQ(h.sum_ns(), c.ns);
}

INSTANTIATE_TEST_SUITE_P(
    Bounds, HistogramBucketTest,
    ::testing::Values(BucketCase{"zero", 0, 0}, BucketCase{"below first bound", 100, 0},
                      BucketCase{"first bound is inclusive (le)", 250, 0},
                      BucketCase{"just above first bound", 251, 1}, BucketCase{"1 us", 1000, 2},
                      BucketCase{"1.5 us", 1500, 3}, BucketCase{"50 us", 50000, 7},
                      BucketCase{"last bound", 100000000, 11},
                      BucketCase{"above last bound", 100000001, 12},
                      BucketCase{"huge", UINT64_MAX / 4, 12}),
    [](const auto& p) { return "case" + std::to_string(p.index); });

TEST(LatencyHistogram, AccumulatesCountAndSum) {
  LatencyHistogram h;
  h.observe(100);
  h.observe(300);
  h.observe(300);
  EXPECT_EQ(h.count(), 3u);
  EXPECT_EQ(h.sum_ns(), 700u);
  EXPECT_EQ(h.bucket(0), 1u);
  EXPECT_EQ(h.bucket(1), 2u);
}

TEST(MetricNames, DirectionAndOutcome) {
  EXPECT_STREQ(to_string(Direction::kToSubscriber), "to_subscriber");
  EXPECT_STREQ(to_string(Direction::kFromSubscriber), "from_subscriber");
  const std::map<Outcome, std::string> want = {
      {Outcome::kPassed, "passed"},           {Outcome::kRewritten, "rewritten"},
      {Outcome::kUnparsed, "unparsed"},       {Outcome::kNotSubscriber, "not_subscriber"},
      {Outcome::kUnregulated, "unregulated"}, {Outcome::kTruncatedCopy, "truncated_copy"}};
  ASSERT_EQ(want.size(), static_cast<size_t>(Outcome::kCount));
  for (const auto& [o, name] : want) EXPECT_EQ(to_string(o), name);
  EXPECT_STREQ(to_string(HandshakeKind::kSyn), "syn");
  EXPECT_STREQ(to_string(HandshakeKind::kSynAck), "syn_ack");
  EXPECT_STREQ(to_string(CapAction::kEvictedOwn), "evicted_own");
  EXPECT_STREQ(to_string(CapAction::kUntracked), "untracked");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : lines_of(text)) {
    if (l == line) return true;
  }
  return false;
}

class RenderTest : public ::testing::Test {
 protected:
  CoreCounters core3, core7;
  QueueCounters io3, io7;
  std::string render() {
    return render_prometheus({{3, &core3, &io3}, {7, &core7, &io7}}, "1.2.3");
  }
};

TEST_F(RenderTest, CountersAppearWithTheirLabels) {
  core3.packets[0][static_cast<size_t>(Outcome::kRewritten)].add(5);
  core3.packets[1][static_cast<size_t>(Outcome::kPassed)].add(9);
  core7.packets[0][static_cast<size_t>(Outcome::kRewritten)].add(11);
  core3.windows_rewritten[1].add(2);
  core7.sacked_allowances[0].add(6);
  core3.parse_errors[static_cast<size_t>(ParseError::kNotTcp)].add(4);
  core3.packets_unknown_direction.add(4 + 6);  // 4 unparsed + 6 not between subscriber/peer
  core3.flows_active.set(42);
  core3.flows_created.add(50);
  core3.flows_evicted.add(1);
  core3.flows_unregulated.add(3);
  io3.overruns.add(8);
  io3.kernel_queue_dropped.set(13);
  io3.verdicts_with_payload.add(6);
  core3.rsfc_flows_in_state[2].set(5);
  core3.rsfc_path_rebaselines.add(2);
  core3.handshake_ignored[static_cast<size_t>(HandshakeKind::kSynAck)].add(7);
  core7.rst_ignored.add(4);
  core7.flows_subscriber_cap[static_cast<size_t>(CapAction::kUntracked)].add(2);
  core3.downlink_flows_in_state[static_cast<size_t>(DownlinkState::kDrain)].set(4);
  core3.downlink_windows_applied.add(21);
  core7.downlink_flows_no_timestamps.add(3);
  core3.downlink_flows_round_trip.add(5);
  core7.downlink_steps_yielded.add(8);
  core3.downlink_steps_held.add(11);
  core3.regulator_pool_used[static_cast<size_t>(Knob::kUplink)].set(17);
  core7.regulator_pool_full[static_cast<size_t>(Knob::kDownlink)].add(9);
  const std::string t = render();

  const std::string not_tcp = to_string(ParseError::kNotTcp);
  for (const std::string& line : std::vector<std::string>{
           "rsfcd_build_info{version=\"1.2.3\"} 1",
           "rsfcd_packets_total{queue=\"3\",direction=\"to_subscriber\",outcome=\"rewritten\"} 5",
           "rsfcd_packets_total{queue=\"3\",direction=\"from_subscriber\",outcome=\"passed\"} 9",
           "rsfcd_packets_total{queue=\"7\",direction=\"to_subscriber\",outcome=\"rewritten\"} 11",
           "rsfcd_packets_total{queue=\"3\",direction=\"unknown\",outcome=\"unparsed\"} 4",
           "rsfcd_packets_total{queue=\"3\",direction=\"unknown\",outcome=\"not_subscriber\"} 6",
           "rsfcd_windows_rewritten_total{queue=\"3\",direction=\"from_subscriber\"} 2",
           "rsfcd_windows_rewritten_total{queue=\"3\",direction=\"to_subscriber\"} 0",
           "rsfcd_sacked_allowances_total{queue=\"7\",direction=\"to_subscriber\"} 6",
           "rsfcd_parse_errors_total{queue=\"3\",reason=\"" + not_tcp + "\"} 4",
           "rsfcd_flows_active{queue=\"3\"} 42",
           "rsfcd_flows_created_total{queue=\"3\"} 50",
           "rsfcd_flows_evicted_total{queue=\"3\"} 1",
           "rsfcd_flows_unregulated_total{queue=\"3\"} 3",
           "rsfcd_queue_overruns_total{queue=\"3\"} 8",
           "rsfcd_kernel_queue_dropped_total{queue=\"3\"} 13",
           "rsfcd_queue_verdicts_with_payload_total{queue=\"3\"} 6",
           "rsfcd_rsfc_flows{queue=\"3\",state=\"fast\"} 5",
           "rsfcd_rsfc_flows{queue=\"3\",state=\"startup\"} 0",
           "rsfcd_rsfc_path_rebaselines_total{queue=\"3\"} 2",
           "rsfcd_handshake_ignored_total{queue=\"3\",kind=\"syn_ack\"} 7",
           "rsfcd_handshake_ignored_total{queue=\"3\",kind=\"syn\"} 0",
           "# TYPE rsfcd_handshake_ignored_total counter",
           "rsfcd_rst_ignored_total{queue=\"7\"} 4",
           "# TYPE rsfcd_rst_ignored_total counter",
           "rsfcd_flows_subscriber_cap_total{queue=\"7\",action=\"untracked\"} 2",
           "rsfcd_regulator_pool_used{queue=\"3\",knob=\"uplink\"} 17",
           "rsfcd_regulator_pool_used{queue=\"3\",knob=\"downlink\"} 0",
           "# TYPE rsfcd_regulator_pool_used gauge",
           "rsfcd_regulator_pool_full_total{queue=\"7\",knob=\"downlink\"} 9",
           "# TYPE rsfcd_regulator_pool_full_total counter",
           "rsfcd_flows_subscriber_cap_total{queue=\"7\",action=\"evicted_own\"} 0",
           "rsfcd_downlink_flows{queue=\"3\",state=\"drain\"} 4",
           "rsfcd_downlink_flows{queue=\"3\",state=\"no_timestamps\"} 0",
           "rsfcd_downlink_flows{queue=\"7\",state=\"startup\"} 0",
           "# TYPE rsfcd_downlink_flows gauge",
           "rsfcd_downlink_windows_applied_total{queue=\"3\"} 21",
           "# TYPE rsfcd_downlink_windows_applied_total counter",
           "rsfcd_downlink_flows_no_timestamps_total{queue=\"7\"} 3",
           "rsfcd_downlink_flows_round_trip_total{queue=\"3\"} 5",
           "rsfcd_downlink_flows_round_trip_total{queue=\"7\"} 0",
           "# TYPE rsfcd_downlink_flows_round_trip_total counter",
           "rsfcd_downlink_steps_yielded_total{queue=\"3\"} 0",
           "rsfcd_downlink_steps_yielded_total{queue=\"7\"} 8",
           "# TYPE rsfcd_downlink_steps_yielded_total counter",
           "rsfcd_downlink_steps_held_total{queue=\"3\"} 11",
           "rsfcd_downlink_steps_held_total{queue=\"7\"} 0",
           "# TYPE rsfcd_downlink_steps_held_total counter",
           "# TYPE rsfcd_packets_total counter",
           "# TYPE rsfcd_flows_active gauge",
           "# TYPE rsfcd_packet_processing_seconds histogram",
       }) {
    EXPECT_TRUE(has_line(t, line)) << "missing: " << line << "\n" << t;
  }
  // The "none" pseudo-reason is not a parse error.
  EXPECT_EQ(t.find("reason=\"none\""), std::string::npos);
}

TEST_F(RenderTest, HistogramIsCumulativeInSeconds) {
  io3.processing_time.observe(100);            // <= 250 ns
  io3.processing_time.observe(300);            // <= 500 ns
  io3.processing_time.observe(2'000'000'000);  // overflow
  const std::string t = render();
  for (const std::string& line : std::vector<std::string>{
           "rsfcd_packet_processing_seconds_bucket{queue=\"3\",le=\"2.5e-07\"} 1",
           "rsfcd_packet_processing_seconds_bucket{queue=\"3\",le=\"5e-07\"} 2",
           "rsfcd_packet_processing_seconds_bucket{queue=\"3\",le=\"0.1\"} 2",
           "rsfcd_packet_processing_seconds_bucket{queue=\"3\",le=\"+Inf\"} 3",
           "rsfcd_packet_processing_seconds_count{queue=\"3\"} 3",
           "rsfcd_packet_processing_seconds_sum{queue=\"3\"} 2.0000004",
           "rsfcd_packet_processing_seconds_count{queue=\"7\"} 0",
       }) {
    EXPECT_TRUE(has_line(t, line)) << "missing: " << line << "\n" << t;
  }
}

// Every line is a comment or a sample in the text format; every sample's family has HELP
// and TYPE lines before it; no series appears twice.
TEST_F(RenderTest, OutputIsWellFormedExposition) {
  core3.packets[0][0].add(1);
  io7.processing_time.observe(1234);
  const std::string t = render();
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.back(), '\n');
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)\})? ([0-9.e+-]+|\+Inf)$)");
  const std::regex comment(R"(^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$)");
  std::set<std::string> helped, typed, series;
  std::map<std::string, std::string> types;
  for (const auto& l : lines_of(t)) {
    std::smatch m;
    if (std::regex_match(l, m, comment)) {
      if (m[1] == "HELP") {
        EXPECT_TRUE(helped.insert(m[2]).second) << "HELP twice: " << l;
      } else {
        EXPECT_TRUE(typed.insert(m[2]).second) << "TYPE twice: " << l;
        types[m[2]] = m[3];
      }
      continue;
    }
    ASSERT_TRUE(std::regex_match(l, m, sample)) << "bad line: " << l;
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (family.size() > s.size() && family.ends_with(s)) {
        const std::string base = family.substr(0, family.size() - s.size());
        if (types.count(base) != 0 && types[base] == "histogram") family = base;
      }
    }
    EXPECT_TRUE(typed.count(family) == 1 && helped.count(family) == 1)
        << "sample before its HELP/TYPE: " << l;
    const std::string key = l.substr(0, l.rfind(' '));
    EXPECT_TRUE(series.insert(key).second) << "duplicate series: " << key;
  }
  EXPECT_GT(series.size(), 50u);
}

TEST(Render, EscapesLabelValuesAndSkipsMissingQueues) {
  CoreCounters c;
  const std::string t = render_prometheus({{0, &c, nullptr}, {1, nullptr, nullptr}}, "v\"1\\x");
  EXPECT_TRUE(has_line(t, "rsfcd_build_info{version=\"v\\\"1\\\\x\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "rsfcd_flows_active{queue=\"0\"} 0")) << t;
  EXPECT_EQ(t.find("queue=\"1\""), std::string::npos) << t;
  EXPECT_EQ(t.find("rsfcd_queue_overruns_total{"), std::string::npos) << t;
}

}  // namespace
}  // namespace rsfc
