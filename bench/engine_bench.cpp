// Per-packet cost of the core: parse + flow lookup + decide + rewrite, in ns/packet, with
// baselines measured in the same run (copy only, parse only, both knobs off).
//   build/rsfc_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "../test/packet_builder.h"
#include "rsfc/core/engine.h"
#include "rsfc/core/pacer.h"
#include "rsfc/io/config.h"

namespace {

using namespace rsfc;

EngineParams params(Policy up) {
  EngineParams p;
  p.subscriber_networks = {*Prefix::parse("198.18.0.0/16"), *Prefix::parse("2001:2:0:1::/64")};
  p.uplink = {.policy = up, .static_window_bytes = 16384};
  p.downlink = {.policy = Policy::kOff};
  return p;
}

std::string phone_addr(uint32_t i, bool v6) {
  if (v6) {
    char b[64];
    std::snprintf(b, sizeof b, "2001:2:0:1::%x:%x", (i >> 16) & 0xffff, i & 0xffff);
    return b;
  }
  return "198.18." + std::to_string((i >> 8) & 0xff) + "." + std::to_string(i & 0xff);
}

uint16_t flow_port(uint32_t i) {
  return static_cast<uint16_t>(10000 + i % 4);
}

// Flow i's handshake fed to `e`: SYN from its phone (phone_addr(i / 4), port flow_port(i)),
// SYN-ACK from the server, window scale 7 and timestamps both ways.
void open_flow(Engine& e, uint32_t i, bool v6) {
  const std::string phone = phone_addr(i / 4, v6);
  const std::string server = v6 ? "2001:2:0:2::2" : "198.19.0.2";
  auto syn = testpkt::build({.src = phone,
                             .dst = server,
                             .sport = flow_port(i),
                             .dport = 443,
                             .seq = 1,
                             .flags = tcpflag::kSyn,
                             .window = 64240,
                             .wscale = 7,
                             .timestamps = true});
  auto synack = testpkt::build({.src = server,
                                .dst = phone,
                                .sport = 443,
                                .dport = flow_port(i),
                                .seq = 100,
                                .ack = 2,
                                .flags = tcpflag::kSyn | tcpflag::kAck,
                                .window = 65535,
                                .wscale = 7,
                                .timestamps = true});
  e.process(syn, 0);
  e.process(synack, 0);
}

// `flows` established connections (handshake fed to `e`) and one server ACK per flow. With
// `upload` each phone has sent a first data segment: the uplink knob steers the flow (under
// rsfc it takes a regulator, while the pool has one).
std::vector<std::vector<uint8_t>> make_flows(Engine* e, uint32_t flows, bool v6,
                                             bool upload = false) {
  std::vector<std::vector<uint8_t>> acks;
  const std::string server = v6 ? "2001:2:0:2::2" : "198.19.0.2";
  for (uint32_t i = 0; i < flows; ++i) {
    const std::string phone = phone_addr(i / 4, v6);
    const uint16_t port = flow_port(i);
    if (e) {
      open_flow(*e, i, v6);
      if (upload) {
        auto data = testpkt::build({.src = phone,
                                    .dst = server,
                                    .sport = port,
                                    .dport = 443,
                                    .seq = 2,
                                    .ack = 101,
                                    .window = 1000,
                                    .timestamps = true,
                                    .tsval = 3,
                                    .tsecr = 1,
                                    .payload_len = 1000});
        e->process(data, 0);
      }
    }
    acks.push_back(testpkt::build({.src = server,
                                   .dst = phone,
                                   .sport = 443,
                                   .dport = port,
                                   .seq = 101,
                                   .ack = 2 + 1000000,
                                   .window = 3000,
                                   .timestamps = true,
                                   .tsval = 5,
                                   .tsecr = 7}));
  }
  return acks;
}

enum class Mode { kCopyOnly, kParseOnly, kEngine };

void run(benchmark::State& state, Mode mode, Policy up, bool v6, bool upload = false) {
  const uint32_t flows = static_cast<uint32_t>(state.range(0));
  Engine engine(std::max<uint32_t>(flows, 16), params(up));
  auto acks = make_flows(mode == Mode::kEngine ? &engine : nullptr, flows, v6, upload);
  std::vector<uint8_t> buf(2048);
  size_t i = 0;
  Nanos now = kSecond;
  uint64_t modified = 0;
  for (auto _ : state) {
    const auto& a = acks[i];
    std::memcpy(buf.data(), a.data(), a.size());
    std::span<uint8_t> pkt(buf.data(), a.size());
    if (mode == Mode::kParseOnly) {
      PacketView v;
      benchmark::DoNotOptimize(parse_packet(pkt, v));
      benchmark::DoNotOptimize(v);
    } else if (mode == Mode::kEngine) {
      modified += engine.process(pkt, now).modified;
      now += 1000;
    }
    benchmark::DoNotOptimize(buf.data());
    if (++i == acks.size()) i = 0;
  }
  state.counters["rewritten_share"] =
      mode == Mode::kEngine
          ? static_cast<double>(modified) / static_cast<double>(state.iterations())
          : 0;
  state.counters["bytes_per_flow"] = static_cast<double>(Engine::bytes_per_flow());
  state.counters["regulated_flows"] = static_cast<double>(
      engine.counters().regulator_pool_used[static_cast<size_t>(Knob::kUplink)].get());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_Baseline_CopyOnly(benchmark::State& s) {
  run(s, Mode::kCopyOnly, Policy::kOff, false);
}
void BM_Baseline_ParseOnly(benchmark::State& s) {
  run(s, Mode::kParseOnly, Policy::kOff, false);
}
void BM_Engine_BothOff(benchmark::State& s) {
  run(s, Mode::kEngine, Policy::kOff, false);
}
void BM_Engine_ObserveV4(benchmark::State& s) {
  run(s, Mode::kEngine, Policy::kObserve, false);
}
void BM_Engine_StaticRewriteV4(benchmark::State& s) {
  run(s, Mode::kEngine, Policy::kStatic, false);
}
void BM_Engine_StaticRewriteV6(benchmark::State& s) {
  run(s, Mode::kEngine, Policy::kStatic, true);
}
void BM_Engine_RsfcV4(benchmark::State& s) {
  run(s, Mode::kEngine, Policy::kRsfc, false);
}
// Every phone uploads: regulated flows (up to the default pool, 60000).
void BM_Engine_RsfcUploadV4(benchmark::State& s) {
  run(s, Mode::kEngine, Policy::kRsfc, false, true);
}

// Both knobs steering, as the shipped configuration runs (uplink and downlink rsfc, downlink
// pacing): traffic both ways, so that the phone's own segments run the per-packet work the
// cases above never reach (the uplink delay and tick estimators, the phone's shared tick,
// the downlink regulator's ACK path, the pacer). Even flows are downloads (server data, phone
// ACKs), odd ones uploads (phone data, server ACKs), four flows per phone address (two of
// each); one 1448-byte segment per flow per round, in rotation, and the ACK of the flow's
// previous round with it, so that with `flows` flows an ACK comes `flows` packets of 1 us
// after its data. Both clocks tick 1 ms. The packets are patched in place (addresses, ports,
// sequence numbers, timestamps, window): no copy of a data segment per packet, and no
// checksum (the engine checks none). Counters: the regulators each knob holds.
class TwoWayTraffic {
 public:
  static constexpr uint32_t kSeg = 1448;
  explicit TwoWayTraffic(Engine& e, uint32_t flows) : flows_(flows), round_(flows, 0) {
    const auto tpl = [](bool from_phone, size_t payload) {
      return testpkt::build({.src = from_phone ? "198.18.0.1" : "198.19.0.2",
                             .dst = from_phone ? "198.19.0.2" : "198.18.0.1",
                             .sport = 1,
                             .dport = 1,
                             .window = 4000,
                             .timestamps = true,
                             .payload_len = payload});
    };
    data_from_phone_ = tpl(true, kSeg);
    data_to_phone_ = tpl(false, kSeg);
    ack_from_phone_ = tpl(true, 0);
    ack_to_phone_ = tpl(false, 0);
    for (uint32_t i = 0; i < flows; ++i) open_flow(e, i, false);
  }
  // The next packet at `now`.
  std::span<uint8_t> next(Nanos now) {
    const uint32_t i = flow_;
    const bool download = i % 2 == 0;
    const bool ack = half_;
    const bool from_phone = download == ack;
    const uint32_t r = round_[i];
    std::vector<uint8_t>& b = from_phone ? (ack ? ack_from_phone_ : data_from_phone_)
                                         : (ack ? ack_to_phone_ : data_to_phone_);
    // The data of round r starts where the ACK of round r - 1's data ends; the other side
    // sends nothing but ACKs.
    const uint32_t phone_next = 2, server_next = 101;  // ISN + 1 (open_flow)
    const uint32_t data_at = (download ? server_next : phone_next) + r * kSeg;
    const uint32_t other = download ? phone_next : server_next;
    const uint32_t seq = ack ? other : data_at;
    const uint32_t acked = ack ? data_at : other;
    const auto ms = static_cast<uint32_t>(now / kMilli);
    const uint32_t addr = (198u << 24) | (18u << 16) | (i / 4);  // 198.18.x.y: phone_addr(i / 4)
    put32(b, from_phone ? 12 : 16, addr);
    put32(b, from_phone ? 16 : 12, (198u << 24) | (19u << 16) | 2u);
    put16(b, from_phone ? 20 : 22, flow_port(i));
    put16(b, from_phone ? 22 : 20, 443);
    put32(b, 24, seq);
    put32(b, 28, acked);
    put16(b, 34, 4000);                         // the window, as the engine may rewrite it
    put32(b, 44, ms + (from_phone ? 7 : 100));  // TSval: the sender's 1 ms clock
    put32(b, 48, ms + (from_phone ? 100 : 7));  // TSecr: about the other's latest
    if (ack) {
      ++round_[i];
      if (++flow_ == flows_) flow_ = 0;
    }
    half_ = !half_;
    return {b.data(), b.size()};
  }

 private:
  static void put16(std::vector<uint8_t>& b, size_t at, uint32_t x) {
    testpkt::detail::put16(b, at, x);
  }
  static void put32(std::vector<uint8_t>& b, size_t at, uint32_t x) {
    put16(b, at, x >> 16);
    put16(b, at + 2, x);
  }
  uint32_t flows_;
  std::vector<uint32_t> round_;
  uint32_t flow_ = 0;
  bool half_ = false;  // the flow's ACK next (after its data)
  std::vector<uint8_t> data_from_phone_, data_to_phone_, ack_from_phone_, ack_to_phone_;
};

void BM_Engine_ShippedTwoWayV4(benchmark::State& state) {
  const uint32_t flows = static_cast<uint32_t>(state.range(0));
  EngineParams p = params(Policy::kRsfc);
  p.downlink.policy = Policy::kRsfc;
  p.pacing.enabled = true;                 // conf/rsfcd.yaml:
  p.pacing.next_to_upload_only = true;     //   the download paced while its phone uploads
  p.rsfc.threshold_ceiling = 30 * kMilli;  //   each knob's auto T at most 30 ms,
  p.rsfc.threshold_ceiling_steady =        //   10 while its queue holds (the daemon's default)
      daemon_params().rsfc.threshold_ceiling_steady;
  Engine engine(std::max<uint32_t>(flows, 16), p);
  TwoWayTraffic traffic(engine, flows);
  Nanos now = kSecond;
  for (auto _ : state) {
    benchmark::DoNotOptimize(engine.process(traffic.next(now), now));
    now += 1000;
  }
  state.counters["uplink_regulators"] = static_cast<double>(
      engine.counters().regulator_pool_used[static_cast<size_t>(Knob::kUplink)].get());
  state.counters["downlink_regulators"] = static_cast<double>(
      engine.counters().regulator_pool_used[static_cast<size_t>(Knob::kDownlink)].get());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// Downlink pacing (DESIGN.md §4b): what a paced flow adds per packet, against the engine's
// own cost above. A phone ACK (rate sample) and a data segment's release time, per call.
// The phone's ACKs: 2896 bytes every 4 ms of its 1 ms clock (724 KB/s), arriving as sent.
struct PhoneAcks {
  PacingParams pp;
  TcpSegment seg;
  Nanos now = kSecond;
  PhoneAcks() {
    pp.enabled = true;
    seg.flags = tcpflag::kAck;
    seg.has_ts = true;
  }
  void next(DownlinkPacer& p) {
    seg.ack += 2896;
    seg.tsval += 4;
    p.on_phone_ack(now, seg, 1e6, pp);
    now += 4 * kMilli;
  }
};

void BM_Pacer_PhoneAck(benchmark::State& s) {
  DownlinkPacer p;
  PhoneAcks acks;
  for (auto _ : s) {
    acks.next(p);
    benchmark::DoNotOptimize(p);
  }
  s.SetItemsProcessed(static_cast<int64_t>(s.iterations()));
}
void BM_Pacer_ReleaseAt(benchmark::State& s) {
  DownlinkPacer p;
  PhoneAcks acks;
  for (int i = 0; i < 200; ++i) acks.next(p);
  Nanos now = acks.now;
  for (auto _ : s) {
    benchmark::DoNotOptimize(p.release_at(now, 1448, true, true, acks.pp));
    now += 2 * kMilli;  // arrivals just under the release rate: the schedule keeps up
  }
  s.SetItemsProcessed(static_cast<int64_t>(s.iterations()));
}

BENCHMARK(BM_Baseline_CopyOnly)->Arg(1000);
BENCHMARK(BM_Baseline_ParseOnly)->Arg(1000);
BENCHMARK(BM_Engine_BothOff)->Arg(1000);
BENCHMARK(BM_Engine_ObserveV4)->Arg(1000);
BENCHMARK(BM_Engine_StaticRewriteV4)->Arg(1)->Arg(1000)->Arg(100000)->Arg(1000000);
BENCHMARK(BM_Engine_StaticRewriteV6)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Engine_RsfcV4)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Engine_RsfcUploadV4)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Engine_ShippedTwoWayV4)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Pacer_PhoneAck);
BENCHMARK(BM_Pacer_ReleaseAt);

}  // namespace

BENCHMARK_MAIN();
