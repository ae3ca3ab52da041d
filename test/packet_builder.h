// Test helper (header-only): builds IPv4/IPv6 TCP packets from a designated-initialiser
// friendly spec, with valid IPv4 header and TCP checksums, and renders them one-line like
// tcpdump or as a scapy expression for failure messages.
//
//   auto bytes = rsfc::testpkt::build({.src = "198.18.0.2", .dst = "198.19.0.2",
//                                      .sport = 40000, .dport = 443,
//                                      .flags = rsfc::tcpflag::kSyn, .window = 64240,
//                                      .mss = 1460, .wscale = 7, .sack_permitted = true});
//
// The address family follows the address strings (a ':' means IPv6). The checksum code
// here is deliberately a naive byte-wise implementation, independent of src/core/packet.cpp.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rsfc/core/packet.h"

namespace rsfc::testpkt {

// One IPv6 extension header. `body` is everything after the two bytes (next header,
// length) that the builder fills in; for generic headers it is zero-padded to a multiple
// of 8 bytes (zeros are Pad1 options in hop-by-hop / destination options).
struct Ipv6Ext {
  uint8_t type = 0;  // 0 hop-by-hop, 43 routing, 44 fragment, 51 AH, 60 destination options
  std::vector<uint8_t> body{};

  static Ipv6Ext hop_by_hop(std::vector<uint8_t> b = {}) { return {0, std::move(b)}; }
  static Ipv6Ext dest_opts(std::vector<uint8_t> b = {}) { return {60, std::move(b)}; }
  // Fragment header: offset in 8-byte units, more-fragments flag.
  static Ipv6Ext fragment(uint16_t offset = 0, bool more = true, uint32_t id = 0x1234) {
    auto off = static_cast<uint16_t>((offset << 3) | (more ? 1 : 0));
    return {
        44,
        {static_cast<uint8_t>(off >> 8), static_cast<uint8_t>(off), static_cast<uint8_t>(id >> 24),
         static_cast<uint8_t>(id >> 16), static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id)}};
  }
  // Authentication header with `icv_len` bytes of ICV (total = 12 + icv_len, multiple of 4).
  static Ipv6Ext ah(size_t icv_len = 12) {
    std::vector<uint8_t> b(10 + icv_len, 0);
    b[5] = 0x01;  // SPI 1
    return {51, std::move(b)};
  }
  // Routing header of type 0 or 2 (address list) or 4 (segment routing: list[0] is the
  // final segment). `addrs` are address strings.
  static Ipv6Ext routing(uint8_t routing_type, uint8_t segments_left,
                         const std::vector<std::string>& addrs) {
    std::vector<uint8_t> b{routing_type, segments_left};
    if (routing_type == 4) {
      b.push_back(static_cast<uint8_t>(addrs.empty() ? 0 : addrs.size() - 1));  // last entry
      b.insert(b.end(), {0, 0, 0});                                             // flags, tag
    } else {
      b.insert(b.end(), {0, 0, 0, 0});  // reserved
    }
    for (const auto& s : addrs) {
      uint8_t a[16];
      if (inet_pton(AF_INET6, s.c_str(), a) != 1) throw std::invalid_argument("bad v6: " + s);
      b.insert(b.end(), a, a + 16);
    }
    return {43, std::move(b)};
  }
};

struct TcpSpec {
  std::string src = "198.18.0.2";
  std::string dst = "198.19.0.2";
  uint16_t sport = 40000;
  uint16_t dport = 443;
  uint32_t seq = 1000;
  uint32_t ack = 0;
  uint8_t flags = tcpflag::kAck;
  uint16_t window = 65535;
  // TCP options, emitted in this order (Linux-like layout, NOP-padded to 4-byte words).
  std::optional<uint16_t> mss{};
  std::optional<uint8_t> wscale{};
  bool sack_permitted = false;
  bool timestamps = false;
  uint32_t tsval = 0;
  uint32_t tsecr = 0;
  std::vector<std::pair<uint32_t, uint32_t>> sack{};  // SACK blocks (left, right)
  std::vector<uint8_t> raw_options{};                 // appended verbatim after the above
  // Payload: `payload` if not empty, else `payload_len` bytes of a counting pattern.
  size_t payload_len = 0;
  std::vector<uint8_t> payload{};
  // IP layer.
  std::vector<uint8_t> ipv4_options{};  // raw, zero-padded (EOL) to a multiple of 4
  std::vector<Ipv6Ext> ipv6_ext{};      // in order, before TCP
  uint8_t ip_proto = 6;                 // transport protocol number stated (TCP header still built)
  uint8_t ttl = 64;
  uint8_t tos = 0;
  uint16_t ipv4_id = 0x1234;
  uint16_t ipv4_frag = 0x4000;  // flags + fragment offset field: DF by default
  uint32_t ipv6_flow = 0;
  uint16_t urgent = 0;
  // Checksum overrides.
  std::optional<uint16_t> checksum{};  // force this TCP checksum (e.g. a deliberately wrong one)
  bool partial_checksum = false;       // store only the folded pseudo-header sum (CHECKSUM_PARTIAL)
  size_t trailing_padding = 0;         // extra zero bytes after the IP packet (link padding)

  bool is_v6() const { return src.find(':') != std::string::npos; }
};

namespace detail {

inline void put16(std::vector<uint8_t>& v, size_t at, uint32_t x) {
  v[at] = static_cast<uint8_t>(x >> 8);
  v[at + 1] = static_cast<uint8_t>(x);
}
inline void push16(std::vector<uint8_t>& v, uint32_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
inline void push32(std::vector<uint8_t>& v, uint32_t x) {
  push16(v, x >> 16);
  push16(v, x & 0xffff);
}
// Naive one's complement sum over bytes (big-endian words, odd byte padded with zero).
inline uint32_t sum_bytes(const uint8_t* p, size_t n, uint32_t acc = 0) {
  for (size_t i = 0; i < n; ++i) acc += (i % 2 == 0) ? (uint32_t{p[i]} << 8) : uint32_t{p[i]};
  return acc;
}
inline uint16_t fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}
inline std::vector<uint8_t> addr_bytes(const std::string& s, bool v6) {
  std::vector<uint8_t> a(v6 ? 16 : 4);
  if (inet_pton(v6 ? AF_INET6 : AF_INET, s.c_str(), a.data()) != 1) {
    throw std::invalid_argument("testpkt: bad address " + s);
  }
  return a;
}

inline std::vector<uint8_t> tcp_options(const TcpSpec& s) {
  std::vector<uint8_t> o;
  o.reserve(40);  // the most TCP options take; without it GCC 12 at -O3 reports a false
                  // -Wstringop-overflow on the first insert into the empty vector
  if (s.mss) {
    o.insert(o.end(), {2, 4});
    push16(o, *s.mss);
  }
  if (s.sack_permitted && s.timestamps) {
    o.insert(o.end(), {4, 2, 8, 10});
    push32(o, s.tsval);
    push32(o, s.tsecr);
  } else if (s.timestamps) {
    o.insert(o.end(), {1, 1, 8, 10});
    push32(o, s.tsval);
    push32(o, s.tsecr);
  } else if (s.sack_permitted) {
    o.insert(o.end(), {1, 1, 4, 2});
  }
  if (s.wscale) o.insert(o.end(), {1, 3, 3, *s.wscale});
  if (!s.sack.empty()) {
    o.insert(o.end(), {1, 1, 5, static_cast<uint8_t>(2 + 8 * s.sack.size())});
    for (auto [l, r] : s.sack) {
      push32(o, l);
      push32(o, r);
    }
  }
  o.insert(o.end(), s.raw_options.begin(), s.raw_options.end());
  while (o.size() % 4) o.push_back(0);  // EOL padding
  if (o.size() > 40) throw std::invalid_argument("testpkt: TCP options exceed 40 bytes");
  return o;
}

inline std::string flags_str(uint8_t f) {
  std::string s;
  if (f & tcpflag::kSyn) s += 'S';
  if (f & tcpflag::kFin) s += 'F';
  if (f & tcpflag::kRst) s += 'R';
  if (f & tcpflag::kPsh) s += 'P';
  if (f & tcpflag::kUrg) s += 'U';
  if (f & tcpflag::kEce) s += 'E';
  if (f & tcpflag::kCwr) s += 'W';
  if (f & tcpflag::kAck) s += '.';
  return s.empty() ? "none" : s;
}

}  // namespace detail

// Final destination for the TCP pseudo-header (RFC 8200 8.1): the last routing-header
// address while segments are left (list[0] for segment routing), else the IPv6 dst.
inline std::vector<uint8_t> pseudo_dst(const TcpSpec& s) {
  auto dst = detail::addr_bytes(s.dst, s.is_v6());
  for (const auto& e : s.ipv6_ext) {
    if (e.type != 43 || e.body.size() < 6 || e.body[1] == 0) continue;
    size_t n = (e.body.size() - 6) / 16;
    if (n == 0) continue;
    size_t idx = e.body[0] == 4 ? 0 : (e.body[0] == 0 || e.body[0] == 2) ? n - 1 : SIZE_MAX;
    if (idx == SIZE_MAX) continue;
    dst.assign(e.body.begin() + 6 + 16 * static_cast<long>(idx),
               e.body.begin() + 6 + 16 * static_cast<long>(idx + 1));
  }
  return dst;
}

inline std::vector<uint8_t> build(const TcpSpec& s) {
  using namespace detail;
  const bool v6 = s.is_v6();
  auto src = addr_bytes(s.src, v6);
  auto dst = addr_bytes(s.dst, v6);

  // TCP segment.
  std::vector<uint8_t> tcp;
  push16(tcp, s.sport);
  push16(tcp, s.dport);
  push32(tcp, s.seq);
  push32(tcp, s.ack);
  auto opts = tcp_options(s);
  tcp.push_back(static_cast<uint8_t>(((20 + opts.size()) / 4) << 4));
  tcp.push_back(s.flags);
  push16(tcp, s.window);
  push16(tcp, 0);  // checksum
  push16(tcp, s.urgent);
  tcp.insert(tcp.end(), opts.begin(), opts.end());
  if (!s.payload.empty()) {
    tcp.insert(tcp.end(), s.payload.begin(), s.payload.end());
  } else {
    for (size_t i = 0; i < s.payload_len; ++i) tcp.push_back(static_cast<uint8_t>(i * 7 + 1));
  }

  // Pseudo-header + checksum.
  uint32_t acc = 0;
  auto pdst = v6 ? pseudo_dst(s) : dst;
  acc = sum_bytes(src.data(), src.size(), acc);
  acc = sum_bytes(pdst.data(), pdst.size(), acc);
  if (v6) {
    acc += static_cast<uint32_t>(tcp.size() >> 16) + static_cast<uint32_t>(tcp.size() & 0xffff);
  } else {
    acc += static_cast<uint32_t>(tcp.size());
  }
  acc += 6;  // the pseudo-header always says TCP
  uint16_t csum;
  if (s.checksum) {
    csum = *s.checksum;
  } else if (s.partial_checksum) {
    csum = fold(acc);
  } else {
    csum = static_cast<uint16_t>(~fold(sum_bytes(tcp.data(), tcp.size(), acc)));
  }
  put16(tcp, 16, csum);

  std::vector<uint8_t> pkt;
  if (!v6) {
    auto ipopt = s.ipv4_options;
    while (ipopt.size() % 4) ipopt.push_back(0);
    if (ipopt.size() > 40) throw std::invalid_argument("testpkt: IPv4 options exceed 40 bytes");
    size_t hl = 20 + ipopt.size();
    pkt.push_back(static_cast<uint8_t>(0x40 | (hl / 4)));
    pkt.push_back(s.tos);
    push16(pkt, static_cast<uint32_t>(hl + tcp.size()));
    push16(pkt, s.ipv4_id);
    push16(pkt, s.ipv4_frag);
    pkt.push_back(s.ttl);
    pkt.push_back(s.ip_proto);
    push16(pkt, 0);
    pkt.insert(pkt.end(), src.begin(), src.end());
    pkt.insert(pkt.end(), dst.begin(), dst.end());
    pkt.insert(pkt.end(), ipopt.begin(), ipopt.end());
    put16(pkt, 10, static_cast<uint16_t>(~fold(sum_bytes(pkt.data(), hl))));
  } else {
    std::vector<uint8_t> ext;
    for (size_t i = 0; i < s.ipv6_ext.size(); ++i) {
      const auto& e = s.ipv6_ext[i];
      uint8_t next = i + 1 < s.ipv6_ext.size() ? s.ipv6_ext[i + 1].type : s.ip_proto;
      std::vector<uint8_t> h{next, 0};
      h.insert(h.end(), e.body.begin(), e.body.end());
      if (e.type == 51) {
        while (h.size() % 4) h.push_back(0);
        h[1] = static_cast<uint8_t>(h.size() / 4 - 2);
      } else {
        while (h.size() % 8) h.push_back(0);
        h[1] = e.type == 44 ? 0 : static_cast<uint8_t>(h.size() / 8 - 1);
      }
      ext.insert(ext.end(), h.begin(), h.end());
    }
    push32(pkt, 0x60000000u | (uint32_t{s.tos} << 20) | (s.ipv6_flow & 0xfffff));
    push16(pkt, static_cast<uint32_t>(ext.size() + tcp.size()));
    pkt.push_back(s.ipv6_ext.empty() ? s.ip_proto : s.ipv6_ext[0].type);
    pkt.push_back(s.ttl);
    pkt.insert(pkt.end(), src.begin(), src.end());
    pkt.insert(pkt.end(), dst.begin(), dst.end());
    pkt.insert(pkt.end(), ext.begin(), ext.end());
  }
  pkt.insert(pkt.end(), tcp.begin(), tcp.end());
  pkt.insert(pkt.end(), s.trailing_padding, uint8_t{0});
  return pkt;
}

// A random valid TCP spec (IPv4 or IPv6, random options within 40 bytes, IPv4 options or
// IPv6 extension headers without fragment/AH, odd and even payload lengths, sometimes link
// padding). Deterministic for a given generator state: seed it and print describe() on
// failure.
inline TcpSpec random_spec(std::mt19937& rng) {
  auto pick = [&rng](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto u16 = [&rng] { return static_cast<uint16_t>(rng()); };
  TcpSpec s;
  const bool v6 = pick(2) == 1;
  char buf[INET6_ADDRSTRLEN];
  auto rand_addr = [&](bool six) {
    uint8_t a[16];
    for (auto& b : a) b = static_cast<uint8_t>(rng());
    if (six) {
      a[0] = 0x20, a[1] = 0x01, a[2] = 0x0d, a[3] = 0xb8;
    } else {
      a[0] = 198, a[1] = static_cast<uint8_t>(18 + pick(2));
    }
    inet_ntop(six ? AF_INET6 : AF_INET, a, buf, sizeof buf);
    return std::string(buf);
  };
  s.src = rand_addr(v6);
  s.dst = rand_addr(v6);
  s.sport = u16();
  s.dport = u16();
  s.seq = static_cast<uint32_t>(rng());
  s.ack = static_cast<uint32_t>(rng());
  s.flags = static_cast<uint8_t>(rng());
  const uint16_t edge_windows[] = {0, 1, 0xffff, 0xfffe, 0x8000};
  s.window = pick(8) == 0 ? edge_windows[pick(5)] : u16();
  size_t room = 40;
  if (pick(3) == 0) {
    s.mss = u16();
    room -= 4;
  }
  s.sack_permitted = pick(3) == 0;
  s.timestamps = pick(2) == 0;
  if (s.timestamps) {
    s.tsval = static_cast<uint32_t>(rng());
    s.tsecr = static_cast<uint32_t>(rng());
    room -= 12;
  } else if (s.sack_permitted) {
    room -= 4;
  }
  if (pick(3) == 0) {
    s.wscale = static_cast<uint8_t>(pick(16));
    room -= 4;
  }
  if (pick(3) == 0 && room >= 12) {
    const size_t blocks = 1 + pick(static_cast<uint32_t>(std::min<size_t>((room - 4) / 8, 4)));
    for (size_t i = 0; i < blocks; ++i) {
      s.sack.emplace_back(static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()));
    }
    room -= 4 + 8 * blocks;
  }
  if (pick(4) == 0 && room >= 4) {  // an option we do not interpret (MPTCP-like kind 30)
    const auto len = static_cast<uint8_t>(2 + pick(static_cast<uint32_t>(room - 1)));
    s.raw_options = {30, len};
    for (size_t i = 2; i < len; ++i) s.raw_options.push_back(static_cast<uint8_t>(rng()));
  }
  s.payload_len = pick(3) == 0 ? pick(4) : pick(1501);
  if (pick(4) == 0) s.trailing_padding = pick(7);
  if (!v6 && pick(4) == 0) {
    s.ipv4_options = pick(2) ? std::vector<uint8_t>{148, 4, 0, 0}       // router alert
                             : std::vector<uint8_t>{1, 1, 1, 1, 1, 1};  // NOPs (+ EOL pad)
  }
  if (v6) {
    if (pick(3) == 0) s.ipv6_ext.push_back(Ipv6Ext::hop_by_hop(std::vector<uint8_t>(pick(20))));
    for (uint32_t n = pick(3); n > 0; --n) {
      if (pick(2)) {
        s.ipv6_ext.push_back(Ipv6Ext::dest_opts(std::vector<uint8_t>(pick(20))));
      } else {
        const uint8_t types[] = {0, 2, 4};
        const uint8_t type = types[pick(3)];
        std::vector<std::string> addrs;
        for (uint32_t k = type == 2 ? 1 : 1 + pick(3); k > 0; --k) addrs.push_back(rand_addr(true));
        s.ipv6_ext.push_back(Ipv6Ext::routing(
            type, static_cast<uint8_t>(pick(static_cast<uint32_t>(addrs.size()) + 1)), addrs));
      }
    }
  }
  return s;
}

// tcpdump-like one-line rendering of a spec.
inline std::string describe(const TcpSpec& s) {
  std::string o = s.is_v6() ? "IP6 " : "IP ";
  o += s.src + "." + std::to_string(s.sport) + " > " + s.dst + "." + std::to_string(s.dport);
  o += ": Flags [" + detail::flags_str(s.flags) + "], seq " + std::to_string(s.seq);
  if (s.flags & tcpflag::kAck) o += ", ack " + std::to_string(s.ack);
  o += ", win " + std::to_string(s.window);
  std::vector<std::string> opts;
  if (s.mss) opts.push_back("mss " + std::to_string(*s.mss));
  if (s.sack_permitted) opts.push_back("sackOK");
  if (s.timestamps) {
    opts.push_back("TS val " + std::to_string(s.tsval) + " ecr " + std::to_string(s.tsecr));
  }
  if (s.wscale) opts.push_back("wscale " + std::to_string(*s.wscale));
  if (!s.sack.empty()) {
    std::string sk = "sack " + std::to_string(s.sack.size());
    for (auto [l, r] : s.sack) sk += " {" + std::to_string(l) + ":" + std::to_string(r) + "}";
    opts.push_back(sk);
  }
  if (!s.raw_options.empty()) opts.push_back(std::to_string(s.raw_options.size()) + " raw bytes");
  if (!opts.empty()) {
    o += ", options [";
    for (size_t i = 0; i < opts.size(); ++i) o += (i ? "," : "") + opts[i];
    o += "]";
  }
  size_t len = s.payload.empty() ? s.payload_len : s.payload.size();
  o += ", length " + std::to_string(len);
  if (s.ip_proto != 6) o += " (ip proto " + std::to_string(s.ip_proto) + ")";
  if (!s.ipv6_ext.empty()) o += " (" + std::to_string(s.ipv6_ext.size()) + " ext hdrs)";
  if (!s.ipv4_options.empty()) o += " (IP options)";
  return o;
}

// The matching scapy expression (for reproducing a case in the Python integration tests).
inline std::string to_scapy(const TcpSpec& s) {
  std::string o = s.is_v6() ? "IPv6(src='" + s.src + "', dst='" + s.dst + "')"
                            : "IP(src='" + s.src + "', dst='" + s.dst + "')";
  o += "/TCP(sport=" + std::to_string(s.sport) + ", dport=" + std::to_string(s.dport) +
       ", seq=" + std::to_string(s.seq) + ", ack=" + std::to_string(s.ack) +
       ", flags=" + std::to_string(s.flags) + ", window=" + std::to_string(s.window) +
       ", options=[";
  std::vector<std::string> opts;
  if (s.mss) opts.push_back("('MSS', " + std::to_string(*s.mss) + ")");
  if (s.sack_permitted) opts.push_back("('SAckOK', b'')");
  if (s.timestamps) {
    opts.push_back("('Timestamp', (" + std::to_string(s.tsval) + ", " + std::to_string(s.tsecr) +
                   "))");
  }
  if (s.wscale) opts.push_back("('WScale', " + std::to_string(*s.wscale) + ")");
  if (!s.sack.empty()) {
    std::string sk = "('SAck', (";
    for (auto [l, r] : s.sack) sk += std::to_string(l) + ", " + std::to_string(r) + ", ";
    opts.push_back(sk + "))");
  }
  for (size_t i = 0; i < opts.size(); ++i) o += (i ? ", " : "") + opts[i];
  o += "])";
  size_t len = s.payload.empty() ? s.payload_len : s.payload.size();
  if (len) o += "/Raw(b'\\x00' * " + std::to_string(len) + ")";
  return o;
}

// tcpdump-like rendering of raw bytes (e.g. a packet the engine rewrote), via parse_packet.
inline std::string describe(std::span<const uint8_t> pkt) {
  PacketView v;
  ParseError e = parse_packet(pkt, v);
  if (e != ParseError::kNone) {
    return std::string("<unparsed: ") + to_string(e) + ", " + std::to_string(pkt.size()) +
           " bytes>";
  }
  std::string o = v.ip_version == 6 ? "IP6 " : "IP ";
  o += v.src.to_string() + "." + std::to_string(v.sport) + " > " + v.dst.to_string() + "." +
       std::to_string(v.dport) + ": Flags [" + detail::flags_str(v.flags) + "], seq " +
       std::to_string(v.seq);
  if (v.ack_flag()) o += ", ack " + std::to_string(v.ack);
  o += ", win " + std::to_string(v.window);
  if (v.opts.has_wscale) o += ", wscale " + std::to_string(v.opts.wscale);
  char cs[16];
  std::snprintf(cs, sizeof cs, "0x%04x", v.checksum);
  o += ", cksum " + std::string(cs) + ", length " + std::to_string(v.payload_len);
  return o;
}

}  // namespace rsfc::testpkt
