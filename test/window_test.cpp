// The rewrite rules (docs/DESIGN.md §5) as a table: only lower, floor, right edge, scale.
#include "rsfc/core/window.h"

#include <gtest/gtest.h>

#include <random>

#include "rsfc/core/types.h"

namespace rsfc {
namespace {

struct ClampCase {
  const char* description;
  ClampRequest req;
  uint16_t expect_raw;
  ClampLimit expect_limit;
};

class ClampTable : public ::testing::TestWithParam<ClampCase> {};

TEST_P(ClampTable, Case) {
  const ClampCase& c = GetParam();
  const ClampResult r = clamp_window(c.req);
  EXPECT_EQ(r.raw_window, c.expect_raw) << c.description;
  EXPECT_EQ(r.limit, c.expect_limit) << c.description;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, ClampTable,
    ::testing::Values(
        ClampCase{"scale 0: exact target",
                  {.raw_window = 65535,
                   .scale = 0,
                   .ack = 1000,
                   .target_bytes = 16384,
                   .min_window_bytes = 2920},
                  16384,
                  ClampLimit::kTarget},
        ClampCase{"scale 7: rounds up to the unit",
                  {.raw_window = 1000,
                   .scale = 7,
                   .ack = 1,
                   .target_bytes = 16385,
                   .min_window_bytes = 2920},
                  129,
                  ClampLimit::kTarget},
        ClampCase{"scale 14: one unit is 16 KiB",
                  {.raw_window = 100,
                   .scale = 14,
                   .ack = 1,
                   .target_bytes = 20000,
                   .min_window_bytes = 2920},
                  2,
                  ClampLimit::kTarget},
        ClampCase{"target above original: untouched",
                  {.raw_window = 100,
                   .scale = 7,
                   .ack = 1,
                   .target_bytes = 65536,
                   .min_window_bytes = 2920},
                  100,
                  ClampLimit::kNone},
        ClampCase{"target equal to original: untouched",
                  {.raw_window = 128,
                   .scale = 7,
                   .ack = 1,
                   .target_bytes = 16384,
                   .min_window_bytes = 2920},
                  128,
                  ClampLimit::kNone},
        ClampCase{
            "zero window stays zero",
            {.raw_window = 0, .scale = 7, .ack = 1, .target_bytes = 4096, .min_window_bytes = 2920},
            0,
            ClampLimit::kNone},
        ClampCase{"floor holds a tiny target",
                  {.raw_window = 65535,
                   .scale = 0,
                   .ack = 1,
                   .target_bytes = 100,
                   .min_window_bytes = 2920},
                  2920,
                  ClampLimit::kFloor},
        ClampCase{"floor above original: untouched",
                  {.raw_window = 2000,
                   .scale = 0,
                   .ack = 1,
                   .target_bytes = 100,
                   .min_window_bytes = 2920},
                  2000,
                  ClampLimit::kNone},
        ClampCase{"right edge holds the window",
                  {.raw_window = 65535,
                   .scale = 0,
                   .ack = 1000,
                   .edge_valid = true,
                   .edge = 1000 + 40000,
                   .target_bytes = 16384,
                   .min_window_bytes = 2920},
                  40000,
                  ClampLimit::kRightEdge},
        ClampCase{"right edge behind the target: target wins",
                  {.raw_window = 65535,
                   .scale = 0,
                   .ack = 1000,
                   .edge_valid = true,
                   .edge = 1000 + 10000,
                   .target_bytes = 16384,
                   .min_window_bytes = 2920},
                  16384,
                  ClampLimit::kTarget},
        ClampCase{"right edge beyond the original: untouched (never raise)",
                  {.raw_window = 30000,
                   .scale = 0,
                   .ack = 1000,
                   .edge_valid = true,
                   .edge = 1000 + 50000,
                   .target_bytes = 16384,
                   .min_window_bytes = 2920},
                  30000,
                  ClampLimit::kNone},
        ClampCase{"right edge with scale rounds up",
                  {.raw_window = 1000,
                   .scale = 7,
                   .ack = 0,
                   .edge_valid = true,
                   .edge = 20001,
                   .target_bytes = 4096,
                   .min_window_bytes = 2920},
                  157,
                  ClampLimit::kRightEdge},
        ClampCase{"right edge across sequence wrap",
                  {.raw_window = 65535,
                   .scale = 0,
                   .ack = 0xfffffff0u,
                   .edge_valid = true,
                   .edge = 0x00001000u,
                   .target_bytes = 1024,
                   .min_window_bytes = 1024},
                  0x1010,
                  ClampLimit::kRightEdge},
        ClampCase{"stale edge (behind ack) is ignored",
                  {.raw_window = 65535,
                   .scale = 0,
                   .ack = 5000,
                   .edge_valid = true,
                   .edge = 4000,
                   .target_bytes = 8192,
                   .min_window_bytes = 2920},
                  8192,
                  ClampLimit::kTarget}),
    [](const ::testing::TestParamInfo<ClampCase>& i) { return "case" + std::to_string(i.index); });

TEST(WindowScale, EffectiveScaleCapsAt14) {
  EXPECT_EQ(effective_scale(0), 0);
  EXPECT_EQ(effective_scale(14), 14);
  EXPECT_EQ(effective_scale(15), 14);
  EXPECT_EQ(effective_scale(255), 14);
}

TEST(WindowScale, EncodeRoundsUpAndSaturates) {
  EXPECT_EQ(encode_window_round_up(0, 7), 0);
  EXPECT_EQ(encode_window_round_up(1, 7), 1);
  EXPECT_EQ(encode_window_round_up(128, 7), 1);
  EXPECT_EQ(encode_window_round_up(129, 7), 2);
  EXPECT_EQ(encode_window_round_up(uint64_t{1} << 40, 0), 0xffff);
}

// Property: whatever the inputs, the result never exceeds the original, never advertises
// less than min(original, max(target, floor)) and never pulls a valid edge back unless
// the original already did.
TEST(ClampProperty, NeverRaisesNeverBelowFloorNeverRetracts) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    ClampRequest r;
    r.raw_window = static_cast<uint16_t>(rng());
    r.scale = static_cast<uint8_t>(rng() % 15);
    r.ack = static_cast<uint32_t>(rng());
    r.edge_valid = rng() % 2;
    r.edge = r.ack + static_cast<uint32_t>(rng() % (uint64_t{1} << (16 + r.scale)));
    if (rng() % 8 == 0) r.edge = r.ack - static_cast<uint32_t>(rng() % 100000);
    r.target_bytes = rng() % (uint64_t{1} << (17 + r.scale));
    r.min_window_bytes = static_cast<uint32_t>(rng() % 20000);
    const ClampResult c = clamp_window(r);
    const uint64_t orig = window_bytes(r.raw_window, r.scale);
    const uint64_t got = window_bytes(c.raw_window, r.scale);
    ASSERT_LE(c.raw_window, r.raw_window);
    const uint64_t wanted = std::max<uint64_t>(r.target_bytes, r.min_window_bytes);
    ASSERT_GE(got, std::min(orig, wanted));
    if (r.edge_valid && seq_gt(r.edge, r.ack)) {
      const uint64_t needed = static_cast<uint32_t>(r.edge - r.ack);
      ASSERT_GE(got, std::min(orig, needed)) << "edge retracted";
    }
    ASSERT_EQ(c.changed(), c.raw_window != r.raw_window);
  }
}

}  // namespace
}  // namespace rsfc
