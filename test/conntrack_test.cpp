// The ctnetlink client: the GET it builds, what it reads from conntrack's answers (which
// direction's scale counts), the bound on outstanding lookups, and one lookup through the
// kernel.
#include "rsfc/io/conntrack.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_conntrack_tcp.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace rsfc {
namespace {

IpAddr addr(const std::string& s) {
  IpAddr a;
  a.family = s.find(':') != std::string::npos ? 6 : 4;
  EXPECT_EQ(inet_pton(a.family == 6 ? AF_INET6 : AF_INET, s.c_str(), a.bytes.data()), 1);
  return a;
}

FlowKey key(const std::string& sub, const std::string& peer, uint16_t sp, uint16_t pp) {
  FlowKey k;
  const IpAddr s = addr(sub), p = addr(peer);
  k.family = s.family;
  k.sub_addr = s.bytes;
  k.peer_addr = p.bytes;
  k.sub_port = sp;
  k.peer_port = pp;
  return k;
}

void put_tuple(nlmsghdr* nlh, int type, const ConnTuple& t, uint8_t proto = IPPROTO_TCP) {
  nlattr* tuple = mnl_attr_nest_start(nlh, static_cast<uint16_t>(type));
  nlattr* ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
  const bool v4 = t.src.family == 4;
  const uint32_t len = v4 ? 4 : 16;
  mnl_attr_put(nlh, v4 ? CTA_IP_V4_SRC : CTA_IP_V6_SRC, len, t.src.bytes.data());
  mnl_attr_put(nlh, v4 ? CTA_IP_V4_DST : CTA_IP_V6_DST, len, t.dst.bytes.data());
  mnl_attr_nest_end(nlh, ip);
  nlattr* p = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
  mnl_attr_put_u8(nlh, CTA_PROTO_NUM, proto);
  mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(t.sport));
  mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(t.dport));
  mnl_attr_nest_end(nlh, p);
  mnl_attr_nest_end(nlh, tuple);
}

struct Entry {
  ConnTuple original, reply;
  uint8_t proto = IPPROTO_TCP;
  bool protoinfo = true;
  uint8_t state = TCP_CONNTRACK_ESTABLISHED;
  uint8_t orig_scale = 7, reply_scale = 9;
  uint8_t orig_flags = IP_CT_TCP_FLAG_WINDOW_SCALE | IP_CT_TCP_FLAG_SACK_PERM;
  uint8_t reply_flags = IP_CT_TCP_FLAG_WINDOW_SCALE;
};

// A conntrack message as the kernel answers a GET (ctnetlink_fill_info).
std::vector<uint8_t> ct_message(const Entry& e) {
  std::vector<uint8_t> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = e.original.src.family == 4 ? AF_INET : AF_INET6;
  put_tuple(nlh, CTA_TUPLE_ORIG, e.original, e.proto);
  put_tuple(nlh, CTA_TUPLE_REPLY, e.reply, e.proto);
  if (e.protoinfo) {
    nlattr* info = mnl_attr_nest_start(nlh, CTA_PROTOINFO);
    nlattr* tcp = mnl_attr_nest_start(nlh, CTA_PROTOINFO_TCP);
    mnl_attr_put_u8(nlh, CTA_PROTOINFO_TCP_STATE, e.state);
    mnl_attr_put_u8(nlh, CTA_PROTOINFO_TCP_WSCALE_ORIGINAL, e.orig_scale);
    mnl_attr_put_u8(nlh, CTA_PROTOINFO_TCP_WSCALE_REPLY, e.reply_scale);
    const nf_ct_tcp_flags of{e.orig_flags, 0}, rf{e.reply_flags, 0};
    mnl_attr_put(nlh, CTA_PROTOINFO_TCP_FLAGS_ORIGINAL, sizeof of, &of);
    mnl_attr_put(nlh, CTA_PROTOINFO_TCP_FLAGS_REPLY, sizeof rf, &rf);
    mnl_attr_nest_end(nlh, tcp);
    mnl_attr_nest_end(nlh, info);
  }
  buf.resize(nlh->nlmsg_len);
  return buf;
}

Entry server_initiated_v4() {
  Entry e;
  e.original = {addr("198.19.0.2"), addr("198.18.0.2"), 443, 40000};
  e.reply = {addr("198.18.0.2"), addr("198.19.0.2"), 40000, 443};
  return e;
}

TEST(ConntrackParse, ReadsBothTuplesScalesAndWhichFlagsSayTheyWereSeen) {
  const Entry e = server_initiated_v4();
  const auto msg = ct_message(e);
  ConntrackTcp ct;
  bool established = false;
  ASSERT_TRUE(parse_conntrack_tcp(reinterpret_cast<const nlmsghdr*>(msg.data()), ct, &established));
  EXPECT_TRUE(established);
  EXPECT_EQ(ct.original.src.bytes, e.original.src.bytes);
  EXPECT_EQ(ct.original.dst.bytes, e.original.dst.bytes);
  EXPECT_EQ(ct.original.sport, 443);
  EXPECT_EQ(ct.original.dport, 40000);
  EXPECT_EQ(ct.reply.src.bytes, e.reply.src.bytes);
  EXPECT_EQ(ct.reply.sport, 40000);
  EXPECT_EQ(ct.original_scale, 7);
  EXPECT_EQ(ct.reply_scale, 9);
  EXPECT_TRUE(ct.original_scale_seen);
  EXPECT_TRUE(ct.reply_scale_seen);
}

TEST(ConntrackParse, AScaleWithoutItsFlagDoesNotCount) {
  Entry e = server_initiated_v4();
  e.reply_flags = IP_CT_TCP_FLAG_SACK_PERM;  // what a mid-stream pickup by conntrack has
  e.state = TCP_CONNTRACK_TIME_WAIT;
  const auto msg = ct_message(e);
  ConntrackTcp ct;
  bool established = true;
  ASSERT_TRUE(parse_conntrack_tcp(reinterpret_cast<const nlmsghdr*>(msg.data()), ct, &established));
  EXPECT_FALSE(established);
  EXPECT_TRUE(ct.original_scale_seen);
  EXPECT_FALSE(ct.reply_scale_seen);
  Entry none = server_initiated_v4();
  none.protoinfo = false;
  const auto bare = ct_message(none);
  ASSERT_TRUE(parse_conntrack_tcp(reinterpret_cast<const nlmsghdr*>(bare.data()), ct));
  EXPECT_FALSE(ct.original_scale_seen);
  EXPECT_FALSE(ct.reply_scale_seen);
}

TEST(ConntrackParse, Ipv6AndNotTcp) {
  Entry e;
  e.original = {addr("2001:2:0:1::2"), addr("2001:2:0:2::2"), 40000, 443};
  e.reply = {addr("2001:2:0:2::2"), addr("2001:2:0:1::2"), 443, 40000};
  auto msg = ct_message(e);
  ConntrackTcp ct;
  ASSERT_TRUE(parse_conntrack_tcp(reinterpret_cast<const nlmsghdr*>(msg.data()), ct));
  EXPECT_EQ(ct.original.src.family, 6);
  EXPECT_EQ(ct.original.src.bytes, e.original.src.bytes);
  EXPECT_EQ(ct.reply.dst.bytes, e.original.src.bytes);
  e.proto = IPPROTO_UDP;
  msg = ct_message(e);
  EXPECT_FALSE(parse_conntrack_tcp(reinterpret_cast<const nlmsghdr*>(msg.data()), ct));
  msg = ct_message(server_initiated_v4());
  reinterpret_cast<nlmsghdr*>(msg.data())->nlmsg_type = NLMSG_ERROR;
  EXPECT_FALSE(parse_conntrack_tcp(reinterpret_cast<const nlmsghdr*>(msg.data()), ct));
}

// The GET carries the subscriber -> peer tuple of the flow's key as CTA_TUPLE_ORIG.
TEST(ConntrackGet, CarriesTheFlowsTuple) {
  for (const FlowKey& k : {key("198.18.0.2", "198.19.0.2", 40000, 443),
                           key("2001:2:0:1::2", "2001:2:0:2::2", 40001, 80)}) {
    alignas(nlmsghdr) std::array<uint8_t, ConntrackClient::kRequestBytes> buf{};
    const size_t n = build_conntrack_get(buf.data(), buf.size(), k, 77);
    ASSERT_GT(n, 0u);
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.data());
    EXPECT_EQ(nlh->nlmsg_len, n);
    EXPECT_EQ(nlh->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET);
    EXPECT_EQ(nlh->nlmsg_flags, NLM_F_REQUEST);
    EXPECT_EQ(nlh->nlmsg_seq, 77u);
    const auto* nfg = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh));
    EXPECT_EQ(nfg->nfgen_family, k.family == 4 ? AF_INET : AF_INET6);
    // Read back through the answer parser: the GET's tuple, with a reply tuple appended,
    // is an entry's original tuple.
    std::vector<uint8_t> answer(MNL_SOCKET_BUFFER_SIZE);
    std::memcpy(answer.data(), buf.data(), n);
    auto* h = reinterpret_cast<nlmsghdr*>(answer.data());
    h->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
    ConntrackTcp ct;
    EXPECT_FALSE(parse_conntrack_tcp(h, ct)) << "no reply tuple in a GET";
    IpAddr sub, peer;
    sub.family = peer.family = k.family;
    sub.bytes = k.sub_addr;
    peer.bytes = k.peer_addr;
    put_tuple(h, CTA_TUPLE_REPLY, {peer, sub, k.peer_port, k.sub_port});
    ASSERT_TRUE(parse_conntrack_tcp(h, ct));
    EXPECT_EQ(ct.original.src.bytes, k.sub_addr);
    EXPECT_EQ(ct.original.dst.bytes, k.peer_addr);
    EXPECT_EQ(ct.original.sport, k.sub_port);
    EXPECT_EQ(ct.original.dport, k.peer_port);
  }
  alignas(nlmsghdr) std::array<uint8_t, 64> small{};
  EXPECT_EQ(build_conntrack_get(small.data(), small.size(), key("198.18.0.2", "1.2.3.4", 1, 2), 1),
            0u);
}

TEST(ConntrackClient, LookupsBeyondTheBoundAreDroppedAndCounted) {
  ConntrackCounters c;
  auto client = ConntrackClient::open(&c);
  ASSERT_TRUE(client) << client.error().message;
  const FlowKey k = key("198.18.0.2", "198.19.0.2", 40000, 443);
  for (uint32_t i = 0; i < ConntrackClient::kMaxOutstanding; ++i) ASSERT_TRUE(client->lookup(k));
  EXPECT_FALSE(client->lookup(k));
  EXPECT_EQ(c.lookups[static_cast<size_t>(LookupResult::kDropped)].get(), 1u);
}

// One lookup through the kernel, for a connection nobody has: ENOENT with CAP_NET_ADMIN,
// EPERM (an error) without. Either way the answer is read and counted, and an unanswered
// lookup does not linger.
TEST(ConntrackClient, KernelAnswersALookup) {
  ConntrackCounters c;
  auto client = ConntrackClient::open(&c);
  ASSERT_TRUE(client) << client.error().message;
  ASSERT_TRUE(client->lookup(key("198.18.200.201", "198.19.200.202", 1, 2)));
  ASSERT_TRUE(client->flush());
  int entries = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto answered = [&] {
    return c.lookups[static_cast<size_t>(LookupResult::kNotFound)].get() +
           c.lookups[static_cast<size_t>(LookupResult::kError)].get();
  };
  while (answered() == 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{client->fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    ASSERT_TRUE(client->receive([&](const ConntrackTcp&, bool, bool) { ++entries; }));
  }
  EXPECT_EQ(entries, 0);
  const auto counted = geteuid() == 0 ? LookupResult::kNotFound : LookupResult::kError;
  EXPECT_EQ(c.lookups[static_cast<size_t>(counted)].get(), 1u);
  EXPECT_EQ(answered(), 1u);
  client->expire();
  client->expire();
  EXPECT_EQ(answered(), 1u) << "an answered lookup is not given up again";
}

}  // namespace
}  // namespace rsfc
