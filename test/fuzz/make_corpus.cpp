// Writes the engine fuzzer's seed corpus (format in engine_fuzz.h): a few short scripted
// conversations built with the unit tests' packet builder, one file each, so that every
// seed can be explained and regenerated:
//   rsfc-fuzz-corpus DIR      (test/fuzz/run.sh --regen-corpus)
#include <cstdio>
#include <string>
#include <vector>

#include "../packet_builder.h"
#include "engine_fuzz.h"

namespace rsfc::fuzz {
namespace {

using testpkt::Ipv6Ext;
using testpkt::TcpSpec;

class Seed {
 public:
  Seed(uint8_t cfg, uint8_t knobs) : bytes_{cfg, knobs} {}

  // One record: `dt` microseconds (or 10 ms units with flag::kSlowClock) after the last.
  void add(const std::vector<uint8_t>& pkt, uint16_t dt = 1000, uint8_t flags = 0,
           int reload_cfg = -1) {
    if (reload_cfg >= 0) flags |= flag::kReload;
    bytes_.push_back(flags);
    push16(static_cast<uint16_t>(pkt.size()));
    push16(dt);
    if (reload_cfg >= 0) bytes_.push_back(static_cast<uint8_t>(reload_cfg));
    bytes_.insert(bytes_.end(), pkt.begin(), pkt.end());
  }
  void add(const TcpSpec& s, uint16_t dt = 1000, uint8_t flags = 0, int reload_cfg = -1) {
    add(testpkt::build(s), dt, flags, reload_cfg);
  }
  bool write(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    const bool ok = std::fwrite(bytes_.data(), 1, bytes_.size(), f) == bytes_.size();
    return std::fclose(f) == 0 && ok;
  }

 private:
  void push16(uint16_t v) {
    bytes_.push_back(static_cast<uint8_t>(v >> 8));
    bytes_.push_back(static_cast<uint8_t>(v));
  }
  std::vector<uint8_t> bytes_;
};

// A phone (subscriber) and a server, as the gateway sees their packets.
struct Ends {
  std::string phone, server;
  uint16_t phone_port = 40000, server_port = 443;
  TcpSpec from_phone(TcpSpec s) const {
    s.src = phone, s.dst = server, s.sport = phone_port, s.dport = server_port;
    return s;
  }
  TcpSpec from_server(TcpSpec s) const {
    s.src = server, s.dst = phone, s.sport = server_port, s.dport = phone_port;
    return s;
  }
};
const Ends kV4{"198.18.0.2", "198.19.0.2"};
const Ends kV6{"2001:2:0:1::2", "2001:2:0:2::2"};

constexpr uint32_t kPhoneIsn = 1000, kServerIsn = 500000;
constexpr uint8_t kSynAck = tcpflag::kSyn | tcpflag::kAck;

void handshake(Seed& s, const Ends& e, bool ts, uint8_t wscale = 7) {
  s.add(e.from_phone({.seq = kPhoneIsn,
                      .flags = tcpflag::kSyn,
                      .window = 64240,
                      .mss = 1460,
                      .wscale = wscale,
                      .sack_permitted = true,
                      .timestamps = ts,
                      .tsval = 100}));
  s.add(e.from_server({.seq = kServerIsn,
                       .ack = kPhoneIsn + 1,
                       .flags = kSynAck,
                       .window = 65160,
                       .mss = 1460,
                       .wscale = wscale,
                       .sack_permitted = true,
                       .timestamps = ts,
                       .tsval = 7000,
                       .tsecr = 100}),
        30000);
  s.add(e.from_phone({.seq = kPhoneIsn + 1,
                      .ack = kServerIsn + 1,
                      .window = 502,
                      .timestamps = ts,
                      .tsval = 130,
                      .tsecr = 7000}),
        30000);
}

// The phone uploads `rounds` segments of `mss` bytes; the server ACKs each with a large
// window (what the uplink knob clamps). `reload_at`: that round's data reloads to `reload`.
void upload(Seed& s, const Ends& e, bool ts, int rounds, uint16_t mss = 200, int reload_at = -1,
            int reload = -1) {
  uint32_t sent = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto tsval = static_cast<uint32_t>(140 + 10 * i);
    s.add(e.from_phone({.seq = kPhoneIsn + 1 + sent,
                        .ack = kServerIsn + 1,
                        .flags = tcpflag::kAck | tcpflag::kPsh,
                        .window = 502,
                        .timestamps = ts,
                        .tsval = tsval,
                        .tsecr = 7000,
                        .payload_len = mss}),
          10000, 0, i == reload_at ? reload : -1);
    sent += mss;
    s.add(e.from_server({.seq = kServerIsn + 1,
                         .ack = kPhoneIsn + 1 + sent,
                         .window = 8000,
                         .timestamps = ts,
                         .tsval = 7000 + 30 * static_cast<uint32_t>(i),
                         .tsecr = tsval}),
          30000);
  }
  s.add(e.from_phone({.seq = kPhoneIsn + 1 + sent,
                      .ack = kServerIsn + 1,
                      .flags = tcpflag::kFin | tcpflag::kAck,
                      .window = 502}));
  s.add(e.from_server({.seq = kServerIsn + 1,
                       .ack = kPhoneIsn + 2 + sent,
                       .flags = tcpflag::kFin | tcpflag::kAck,
                       .window = 8000}),
        30000);
}

// The server sends data; the phone ACKs it (what the downlink knob clamps).
void download(Seed& s, const Ends& e, bool ts, int rounds) {
  uint32_t got = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto tsval = static_cast<uint32_t>(7100 + 10 * i);
    s.add(e.from_server({.seq = kServerIsn + 1 + got,
                         .ack = kPhoneIsn + 1,
                         .window = 8000,
                         .timestamps = ts,
                         .tsval = tsval,
                         .tsecr = 130,
                         .payload_len = 300}),
          5000);
    got += 300;
    s.add(e.from_phone({.seq = kPhoneIsn + 1,
                        .ack = kServerIsn + 1 + got,
                        .window = 60000,
                        .timestamps = ts,
                        .tsval = 140 + static_cast<uint32_t>(i),
                        .tsecr = tsval}),
          40000);
  }
}

std::vector<std::pair<std::string, Seed>> seeds() {
  using namespace config;
  std::vector<std::pair<std::string, Seed>> out;

  Seed v4_static(kUpStatic | kDownStatic | kFlows16, 15);  // 16 KiB up, 32 KiB down
  handshake(v4_static, kV4, false);
  upload(v4_static, kV4, false, 8);
  out.emplace_back("v4_upload_static", v4_static);

  Seed v4_rsfc(kUpRsfc | kPerSubscriber | kSink | kFlows64, 3);
  handshake(v4_rsfc, kV4, true);
  upload(v4_rsfc, kV4, true, 24, 1000);
  out.emplace_back("v4_upload_rsfc_ts", v4_rsfc);

  // SIGHUP mid-upload: rsfc -> static uplink with drwa downlink.
  Seed v6_reload(kUpRsfc | kSink | kFlows16, 0x40 | 7);
  handshake(v6_reload, kV6, true, 9);
  upload(v6_reload, kV6, true, 16, 500, 8, kUpStatic | kDownDrwa | kSink);
  out.emplace_back("v6_upload_rsfc_reload", v6_reload);

  Seed v4_drwa(kUpObserve | kDownDrwa | kSink | kFlows16, 0x80 | 3);
  handshake(v4_drwa, kV4, true, 2);
  download(v4_drwa, kV4, true, 16);
  out.emplace_back("v4_download_drwa", v4_drwa);

  // IPv6 extension headers and a routing header (pseudo-header destination), no wscale.
  Seed v6_ext(kUpStatic | kDownStatic | kFlows4, 1);
  Ends ext = kV6;
  auto with_ext = [](TcpSpec t) {
    t.ipv6_ext = {Ipv6Ext::hop_by_hop({1, 2, 0, 0}), Ipv6Ext::routing(0, 1, {"2001:2:0:2::2"}),
                  Ipv6Ext::dest_opts()};
    return t;
  };
  v6_ext.add(with_ext(ext.from_phone({.seq = kPhoneIsn, .flags = tcpflag::kSyn, .mss = 1440})));
  v6_ext.add(with_ext(ext.from_server(
      {.seq = kServerIsn, .ack = kPhoneIsn + 1, .flags = kSynAck, .window = 65535, .mss = 1440})));
  v6_ext.add(with_ext(ext.from_server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1})));
  v6_ext.add(with_ext(ext.from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1})));
  out.emplace_back("v6_ext_headers_no_wscale", v6_ext);

  // Flows picked up mid-stream (no handshake seen), then a SYN-ACK and a SYN on them.
  Seed midstream(kUpStatic | kDownStatic | kFlows4, 0);
  midstream.add(kV4.from_server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1, .window = 900}));
  midstream.add(kV4.from_phone({.seq = kPhoneIsn + 1, .ack = kServerIsn + 1, .payload_len = 50}));
  midstream.add(kV4.from_server(
      {.seq = kServerIsn, .ack = kPhoneIsn + 1, .flags = kSynAck, .window = 9000, .wscale = 14}));
  midstream.add(kV4.from_phone({.seq = 77, .flags = tcpflag::kSyn, .wscale = 14}));
  midstream.add(kV4.from_server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 51, .window = 900}));
  midstream.add(kV4.from_server({.seq = kServerIsn + 1, .flags = tcpflag::kRst}));
  out.emplace_back("midstream_and_spoofed_syn", midstream);

  // What the parser refuses (the checksum fixed where it parses).
  Seed bad(kUpRsfc | kDownDrwa | kFlows4, 0);
  auto good = testpkt::build(kV4.from_server({.ack = 5, .wscale = 3}));
  bad.add(std::vector<uint8_t>{});                                   // empty
  bad.add(std::vector<uint8_t>(good.begin(), good.begin() + 30));    // truncated TCP
  bad.add(std::vector<uint8_t>{0x50, 0, 0, 20});                     // IP version 5
  bad.add(testpkt::build(kV4.from_phone({.ipv4_frag = 0x2000})));    // fragment (MF)
  bad.add(testpkt::build(kV4.from_phone({.ip_proto = 17})));         // UDP
  bad.add(testpkt::build(kV4.from_phone({.raw_options = {8, 1}})));  // option length 1
  bad.add(testpkt::build(kV6.from_phone({.ipv6_ext = {Ipv6Ext::fragment(0, false)}})));
  bad.add(testpkt::build(kV4.from_phone({.ipv4_options = {148, 4, 0, 0}, .trailing_padding = 6})),
          1, flag::kFixChecksum);
  out.emplace_back("malformed", bad);

  // The kernel's flags: CSUMNOTREADY (partial checksum) and a cut copy, on clamped ACKs.
  Seed meta(kUpStatic | kDownOff | kFlows16, 0);
  handshake(meta, kV4, false, 5);
  meta.add(
      kV4.from_server(
          {.seq = kServerIsn + 1, .ack = kPhoneIsn + 1, .window = 60000, .partial_checksum = true}),
      1000, flag::kNotReady);
  meta.add(kV4.from_server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1, .window = 60000}), 1000,
           flag::kTruncated);
  meta.add(kV4.from_server(
      {.seq = kServerIsn + 1, .ack = kPhoneIsn + 1, .window = 60000, .checksum = 0xdead}));
  meta.add(kV4.from_server(
      {.seq = kServerIsn + 1, .ack = kPhoneIsn + 1, .window = 60000, .payload_len = 333}));
  out.emplace_back("checksum_states", meta);

  // More flows than the table holds, then idle, embryonic and closed timeouts.
  Seed churn(kUpRsfc | kDownStatic | kPerSubscriber | kFlows4, 1);
  for (uint16_t i = 0; i < 6; ++i) {
    Ends e = kV4;
    e.phone_port = static_cast<uint16_t>(40000 + i);
    e.phone = i % 2 ? "198.18.0.2" : "198.18.7.9";
    handshake(churn, e, i % 3 != 0);
  }
  churn.add(kV4.from_phone({.seq = 1, .flags = tcpflag::kSyn}), 4000, flag::kSlowClock);
  churn.add(kV4.from_server({.seq = kServerIsn + 1, .ack = kPhoneIsn + 1}), 40000,
            flag::kSlowClock | flag::kExpire);
  out.emplace_back("flow_churn_and_timeouts", churn);
  return out;
}

}  // namespace
}  // namespace rsfc::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  for (const auto& [name, seed] : rsfc::fuzz::seeds()) {
    const std::string path = std::string(argv[1]) + "/" + name;
    if (!seed.write(path)) {
      std::perror(path.c_str());
      return 1;
    }
  }
  return 0;
}
