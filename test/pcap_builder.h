// Test helper (header-only): writes classic pcap files byte by byte, independently of
// src/tools/pcap.cpp, and wraps IP packets in link-layer headers (Ethernet with VLAN tags, Linux
// cooked v1/v2).
//
//   rsfc::testpcap::Writer w({.linktype = 1, .nanosecond = true, .big_endian = true});
//   w.add(1700000000, 5, rsfc::testpcap::ethernet(ip, {0x8100}));
//   write_file(path, w.bytes);
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace rsfc::testpcap {

struct Options {
  uint32_t linktype = 101;
  bool nanosecond = false;
  bool big_endian = false;
  uint32_t snaplen = 262144;
  uint16_t version_major = 2, version_minor = 4;
};

class Writer {
 public:
  explicit Writer(Options o = {}) : o_(o) {
    put32(o.nanosecond ? 0xa1b23c4du : 0xa1b2c3d4u);
    put16(o.version_major);
    put16(o.version_minor);
    put32(0);  // thiszone
    put32(0);  // sigfigs
    put32(o.snaplen);
    put32(o.linktype);
  }
  // `frac` is micro- or nanoseconds as the file says; `orig_len` 0 = frame.size().
  void add(uint32_t sec, uint32_t frac, const std::vector<uint8_t>& frame, uint32_t orig_len = 0) {
    put32(sec);
    put32(frac);
    put32(static_cast<uint32_t>(frame.size()));
    put32(orig_len ? orig_len : static_cast<uint32_t>(frame.size()));
    bytes.insert(bytes.end(), frame.begin(), frame.end());
  }
  // A raw record header (for malformed files).
  void add_header(uint32_t sec, uint32_t frac, uint32_t caplen, uint32_t len) {
    put32(sec);
    put32(frac);
    put32(caplen);
    put32(len);
  }
  std::vector<uint8_t> bytes;

 private:
  void put16(uint16_t v) {
    if (o_.big_endian) {
      bytes.push_back(static_cast<uint8_t>(v >> 8));
      bytes.push_back(static_cast<uint8_t>(v));
    } else {
      bytes.push_back(static_cast<uint8_t>(v));
      bytes.push_back(static_cast<uint8_t>(v >> 8));
    }
  }
  void put32(uint32_t v) {
    if (o_.big_endian) {
      put16(static_cast<uint16_t>(v >> 16));
      put16(static_cast<uint16_t>(v));
    } else {
      put16(static_cast<uint16_t>(v));
      put16(static_cast<uint16_t>(v >> 16));
    }
  }
  Options o_;
};

inline void push16be(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}

inline uint16_t ethertype_of(const std::vector<uint8_t>& ip) {
  if (ip.empty()) return 0;
  return (ip[0] >> 4) == 6 ? 0x86dd : 0x0800;
}

// Ethernet II: dst, src, [TPID TCI]..., ethertype, payload, zero padding to 60 bytes.
inline std::vector<uint8_t> ethernet(const std::vector<uint8_t>& ip,
                                     const std::vector<uint16_t>& vlan_tpids = {},
                                     int ethertype = -1) {
  std::vector<uint8_t> f{0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02};
  uint16_t vid = 100;
  for (uint16_t tpid : vlan_tpids) {
    push16be(f, tpid);
    push16be(f, vid++);
  }
  push16be(f, ethertype >= 0 ? static_cast<uint16_t>(ethertype) : ethertype_of(ip));
  f.insert(f.end(), ip.begin(), ip.end());
  while (f.size() < 60) f.push_back(0);
  return f;
}

// Linux cooked v1: packet type, ARPHRD_ETHER, address length 6, address (8), protocol.
inline std::vector<uint8_t> sll(const std::vector<uint8_t>& ip,
                                const std::vector<uint16_t>& vlan_tpids = {}) {
  std::vector<uint8_t> f{0x00, 0x04, 0x00, 0x01, 0x00, 0x06, 0x02, 0, 0, 0, 0, 0x01, 0, 0};
  if (vlan_tpids.empty()) {
    push16be(f, ethertype_of(ip));
  } else {
    push16be(f, vlan_tpids[0]);
    uint16_t vid = 200;
    for (size_t i = 0; i < vlan_tpids.size(); ++i) {
      push16be(f, vid++);
      push16be(f, i + 1 < vlan_tpids.size() ? vlan_tpids[i + 1] : ethertype_of(ip));
    }
  }
  f.insert(f.end(), ip.begin(), ip.end());
  return f;
}

// Linux cooked v2: protocol, reserved, ifindex, ARPHRD_ETHER, packet type, addr len, addr (8).
inline std::vector<uint8_t> sll2(const std::vector<uint8_t>& ip) {
  std::vector<uint8_t> f;
  push16be(f, ethertype_of(ip));
  f.insert(f.end(), {0, 0, 0, 0, 0, 3, 0x00, 0x01, 0x04, 0x06, 0x02, 0, 0, 0, 0, 0x01, 0, 0});
  f.insert(f.end(), ip.begin(), ip.end());
  return f;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  if (n != bytes.size()) throw std::runtime_error("short write " + path);
}

}  // namespace rsfc::testpcap
