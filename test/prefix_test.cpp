// types.h: IpAddr / Prefix parsing, printing and matching (config-time code), and the
// regulators' four-byte deadline.
#include <gtest/gtest.h>

#include <string>

#include "rsfc/core/types.h"

namespace rsfc {
namespace {

TEST(IpAddr, ParsesAndPrintsBothFamilies) {
  struct Case {
    const char* text;
    uint8_t family;
    const char* printed;
  };
  const Case cases[] = {
      {"198.18.0.1", 4, "198.18.0.1"},
      {"0.0.0.0", 4, "0.0.0.0"},
      {"255.255.255.255", 4, "255.255.255.255"},
      {"2001:2::1", 6, "2001:2::1"},
      {"2001:0DB8:0000:0000:0000:0000:0000:0001", 6, "2001:db8::1"},
      {"::", 6, "::"},
      {"::ffff:198.18.0.1", 6, "::ffff:198.18.0.1"},  // v4-mapped stays IPv6
  };
  for (const auto& c : cases) {
    auto a = IpAddr::parse(c.text);
    ASSERT_TRUE(a.has_value()) << c.text;
    EXPECT_EQ(a->family, c.family) << c.text;
    EXPECT_EQ(a->to_string(), c.printed) << c.text;
  }
  const uint8_t v4[] = {198, 18, 0, 1};
  EXPECT_EQ(*IpAddr::parse("198.18.0.1"), IpAddr::v4(v4));
  EXPECT_EQ(IpAddr{}.to_string(), "<unset>");
}

TEST(IpAddr, RejectsGarbage) {
  for (const char* text : {"", " ", "198.18.0", "198.18.0.1.2", "198.18.0.256", "198.018.0.1",
                           "0x7f.0.0.1", "198.18.0.1 ", " 198.18.0.1", "1.2.3.4/24", "2001::2::1",
                           "2001:db8::g", ":::", "12345::", "example.com", "198.18.0.1\n",
                           "0000:0000:0000:0000:0000:0000:0000:0000:0000"}) {
    EXPECT_FALSE(IpAddr::parse(text).has_value()) << "'" << text << "'";
  }
}

TEST(Prefix, ParsesNetworks) {
  struct Case {
    const char* text;
    const char* printed;
    uint8_t length;
  };
  const Case cases[] = {
      {"198.18.0.0/15", "198.18.0.0/15", 15},
      {"10.0.0.0/8", "10.0.0.0/8", 8},
      {"0.0.0.0/0", "0.0.0.0/0", 0},
      {"198.18.0.7", "198.18.0.7/32", 32},  // bare address: host prefix
      {"198.18.0.7/32", "198.18.0.7/32", 32},
      {"2001:2::/48", "2001:2::/48", 48},
      {"::/0", "::/0", 0},
      {"2001:db8::1", "2001:db8::1/128", 128},
      {"2001:db8:8000::/33", "2001:db8:8000::/33", 33},
      {"2001:db8::/032", "2001:db8::/32", 32},
  };
  for (const auto& c : cases) {
    std::string err;
    auto p = Prefix::parse(c.text, &err);
    ASSERT_TRUE(p.has_value()) << c.text << ": " << err;
    EXPECT_EQ(p->to_string(), c.printed);
    EXPECT_EQ(p->length, c.length);
  }
}

TEST(Prefix, RejectsWithReason) {
  struct Case {
    const char* text;
    const char* error_contains;
  };
  const Case cases[] = {
      {"198.18.0.1/15", "host bits"},
      {"198.19.0.0/15", "host bits"},  // typo for /16?
      {"2001:db8::1/64", "host bits"},
      {"2001:db8:8000::/32", "host bits"},
      {"198.18.0.0/33", "exceeds 32"},
      {"2001:db8::/129", "exceeds 128"},
      {"198.18.0.0/", "length"},
      {"198.18.0.0/-1", "length"},
      {"198.18.0.0/+8", "length"},
      {"198.18.0.0/8 ", "length"},
      {"198.18.0.0/1000", "length"},
      {"198.18.0.0/16/16", "length"},
      {"/16", "address"},
      {"", "address"},
      {"banana/8", "address"},
      {"198.18.0.0 /16", "address"},
  };
  for (const auto& c : cases) {
    std::string err;
    EXPECT_FALSE(Prefix::parse(c.text, &err).has_value()) << c.text;
    EXPECT_NE(err.find(c.error_contains), std::string::npos)
        << c.text << " -> '" << err << "', want '" << c.error_contains << "'";
  }
  EXPECT_FALSE(Prefix::parse("198.18.0.1/15").has_value());  // null error pointer is fine
}

TEST(Prefix, HostBitsErrorSuggestsNetwork) {
  std::string err;
  EXPECT_FALSE(Prefix::parse("198.19.0.0/15", &err));
  EXPECT_NE(err.find("198.18.0.0/15"), std::string::npos) << err;
}

TEST(Prefix, Contains) {
  struct Case {
    const char* prefix;
    const char* addr;
    bool inside;
  };
  const Case cases[] = {
      {"198.18.0.0/15", "198.18.0.1", true},
      {"198.18.0.0/15", "198.19.255.255", true},
      {"198.18.0.0/15", "198.20.0.0", false},
      {"198.18.0.0/15", "198.17.255.255", false},
      {"198.18.0.0/15", "2001:db8::1", false},  // other family
      {"0.0.0.0/0", "203.0.113.9", true},
      {"0.0.0.0/0", "::", false},
      {"198.18.0.7", "198.18.0.7", true},
      {"198.18.0.7", "198.18.0.6", false},
      {"10.0.0.0/9", "10.127.255.255", true},
      {"10.0.0.0/9", "10.128.0.0", false},
      {"2001:2::/48", "2001:2::1", true},
      {"2001:2::/48", "2001:2:0:ffff::1", true},
      {"2001:2::/48", "2001:2:1::1", false},
      {"2001:db8:8000::/33", "2001:db8:ffff::1", true},
      {"2001:db8:8000::/33", "2001:db8:7fff::1", false},
      {"::/0", "2001:db8::1", true},
      {"::/0", "198.18.0.1", false},
      {"2001:db8::1", "2001:db8::1", true},
      {"2001:db8::1", "2001:db8::2", false},
  };
  for (const auto& c : cases) {
    auto p = Prefix::parse(c.prefix);
    auto a = IpAddr::parse(c.addr);
    ASSERT_TRUE(p && a) << c.prefix << " " << c.addr;
    EXPECT_EQ(p->contains(*a), c.inside) << c.prefix << " contains " << c.addr;
  }
  EXPECT_FALSE(Prefix{}.contains(*IpAddr::parse("1.2.3.4")));  // unset prefix matches nothing
}

// A deadline four bytes wide: pending before its time, not from it on (to its 1.05 ms unit),
// never when unset, and right across the wrap of its 32-bit count (2^52 ns, 52 days of
// uptime), the way TCP sequence numbers are.
TEST(CoarseDeadline, PendingUntilItsTimeAcrossTheWrap) {
  constexpr Nanos kUnit = Nanos{1} << 20;
  for (const Nanos base : {Nanos{0}, 5 * kSecond, (Nanos{1} << 52) - 3 * kSecond,
                           (Nanos{1} << 53) - kUnit, Nanos{1} << 62}) {
    CoarseDeadline d;
    EXPECT_FALSE(d.pending(base)) << "unset, base " << base;
    d.set(base + 10 * kSecond);
    EXPECT_TRUE(d.pending(base)) << base;
    EXPECT_TRUE(d.pending(base + 10 * kSecond - 2 * kUnit)) << base;
    EXPECT_FALSE(d.pending(base + 10 * kSecond + kUnit)) << base;
    EXPECT_FALSE(d.pending(base + 20 * kSecond)) << base;
    EXPECT_FALSE(d.pending(base + 20 * 24 * 3600 * kSecond)) << "20 days after, base " << base;
    d.set(base);  // a deadline now is not pending now
    EXPECT_FALSE(d.pending(base + kUnit)) << base;
  }
}

}  // namespace
}  // namespace rsfc
