// Per-packet cost of the core: parse + flow lookup + decide + rewrite, in ns/packet, with
// baselines measured in the same run (copy only, parse only, both knobs off).
//   build/rsfc_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "../test/packet_builder.h"
#include "rsfc/core/engine.h"
#include "rsfc/core/pacer.h"

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

// `flows` established connections (handshake fed to `e`) and one server ACK per flow. With
// `upload` each phone has sent a first data segment: the uplink knob steers the flow (under
// rsfc it takes a regulator, while the pool has one).
std::vector<std::vector<uint8_t>> make_flows(Engine* e, uint32_t flows, bool v6,
                                             bool upload = false) {
  std::vector<std::vector<uint8_t>> acks;
  const std::string server = v6 ? "2001:2:0:2::2" : "198.19.0.2";
  Nanos now = 0;
  for (uint32_t i = 0; i < flows; ++i) {
    const std::string phone = phone_addr(i / 4, v6);
    const uint16_t port = static_cast<uint16_t>(10000 + i % 4);
    if (e) {
      auto syn = testpkt::build({.src = phone,
                                 .dst = server,
                                 .sport = port,
                                 .dport = 443,
                                 .seq = 1,
                                 .flags = tcpflag::kSyn,
                                 .window = 64240,
                                 .wscale = 7,
                                 .timestamps = true});
      auto synack = testpkt::build({.src = server,
                                    .dst = phone,
                                    .sport = 443,
                                    .dport = port,
                                    .seq = 100,
                                    .ack = 2,
                                    .flags = tcpflag::kSyn | tcpflag::kAck,
                                    .window = 65535,
                                    .wscale = 7,
                                    .timestamps = true});
      e->process(syn, now);
      e->process(synack, now);
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
        e->process(data, now);
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
BENCHMARK(BM_Pacer_PhoneAck);
BENCHMARK(BM_Pacer_ReleaseAt);

}  // namespace

BENCHMARK_MAIN();
