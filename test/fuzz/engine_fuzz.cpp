// libFuzzer harness over the pure core: parse + Engine::process on a sequence of packets
// with times, under the policies, flow-table size and reloads the input chooses (format in
// engine_fuzz.h). After every packet it checks what rsfcd promises the gateway:
//   - every packet gets a result, and the engine counts each exactly once;
//   - the packet keeps its length, and an unmodified packet keeps every byte;
//   - a modified packet (only when rewritten, never a truncated copy) differs only in the
//     TCP window and checksum, its window is lower than it came with but not below the
//     floor, and its checksum is exactly as valid as before (the full one when the kernel
//     flagged CSUMNOTREADY);
//   - an unparsed packet is what parse_packet refuses; flow slots are within the table;
//   - decision records format within a bounded buffer.
// A broken invariant aborts with a message (libFuzzer saves the input as a crash).
#include "engine_fuzz.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "rsfc/core/decision_record.h"
#include "rsfc/core/engine.h"
#include "rsfc/core/packet.h"
#include "rsfc/core/window.h"

namespace rsfc::fuzz {
namespace {

[[noreturn]] void fail(const char* what, size_t packet) {
  std::fprintf(stderr, "engine_fuzz: invariant broken at packet %zu: %s\n", packet, what);
  std::abort();
}
#define FUZZ_CHECK(cond, packet)      \
  do {                                \
    if (!(cond)) fail(#cond, packet); \
  } while (0)

EngineParams params_from(uint8_t cfg, uint8_t knobs) {
  static const Policy kUp[] = {Policy::kOff, Policy::kObserve, Policy::kStatic, Policy::kRsfc};
  static const Policy kDown[] = {Policy::kOff, Policy::kStatic, Policy::kDrwa, Policy::kOff};
  EngineParams p;
  p.subscriber_networks = {*Prefix::parse(kSubscriberV4), *Prefix::parse(kSubscriberV6)};
  const uint32_t kib = 1024u * (1u + (knobs & 0x3fu));
  p.uplink = {.policy = kUp[cfg & 3], .static_window_bytes = kib};
  p.downlink = {.policy = kDown[(cfg >> 2) & 3], .static_window_bytes = 2 * kib};
  p.rsfc.per_subscriber = (cfg & config::kPerSubscriber) != 0;
  if (knobs & 0x40) p.rsfc.threshold = 40 * kMilli;
  if (knobs & 0x80) p.drwa.rtt_min_horizon = 5 * kSecond;
  return p;
}

uint32_t flows_from(uint8_t cfg) {
  static const uint32_t kFlows[] = {4, 16, 64, 256};
  return kFlows[cfg >> 6];
}

// Formats every record in both forms, as the daemon and rsfc-replay would.
class FormattingSink : public DecisionSink {
 public:
  explicit FormattingSink(uint32_t flows_max) : flows_max_(flows_max) {}
  void on_decision(const DecisionRecord& r) override {
    char buf[2048];
    for (DecisionJson form : {DecisionJson::kLog, DecisionJson::kReplay}) {
      const size_t n = format_decision_json(r, buf, sizeof buf, form);
      FUZZ_CHECK(n > 0 && n < sizeof buf && buf[n] == '\0' && buf[n - 1] == '\n', 0);
    }
    FUZZ_CHECK(r.flow < flows_max_, 0);
  }

 private:
  uint32_t flows_max_;
};

uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}

void put_checksum(std::span<uint8_t> pkt, const PacketView& v, uint16_t c) {
  pkt[v.tcp_offset + 16u] = static_cast<uint8_t>(c >> 8);
  pkt[v.tcp_offset + 17u] = static_cast<uint8_t>(c);
}

// How far the stored checksum is from the right one, as a one's complement sum (0 = valid;
// the two zeros are one). The incremental update (RFC 1624) keeps it; a full one clears it.
uint16_t checksum_residual(std::span<const uint8_t> pkt, const PacketView& v) {
  uint32_t s = static_cast<uint16_t>(~tcp_checksum(pkt, v)) + uint32_t{v.checksum};
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return s == 0xffff ? 0 : static_cast<uint16_t>(s);
}

struct Run {
  uint8_t cfg;
  uint32_t flows_max;
  Engine engine;
  FormattingSink sink;
  Nanos now = 1'000 * kSecond;
  size_t packets = 0;
  // ENGINE_FUZZ_TRACE=1: one line per packet (to see what a seed or a crash exercises).
  const bool trace = std::getenv("ENGINE_FUZZ_TRACE") != nullptr;

  Run(uint8_t c, uint8_t knobs)
      : cfg(c),
        flows_max(flows_from(c)),
        engine(flows_max, params_from(c, knobs)),
        sink(flows_max) {
    if (cfg & config::kSink) engine.set_decision_sink(&sink);
  }

  uint64_t counted() const {
    const CoreCounters& c = engine.counters();
    uint64_t n = c.packets_unknown_direction.get();
    for (const auto& dir : c.packets) {
      for (const Counter& o : dir) n += o.get();
    }
    return n;
  }

  void packet(uint8_t flags, std::span<uint8_t> pkt) {
    const size_t at = packets++;
    PacketMeta meta;
    meta.checksum = (flags & flag::kNotReady) ? ChecksumState::kNotReady : ChecksumState::kComplete;
    meta.truncated = (flags & flag::kTruncated) != 0;
    PacketView in;  // a truncated copy parses from its headers, as the engine parses it
    const ParseError parsed = parse_packet(pkt, in, meta.truncated);
    if (parsed == ParseError::kNone && !meta.truncated && (flags & flag::kFixChecksum)) {
      put_checksum(pkt, in, tcp_checksum(pkt, in));
      in.checksum = tcp_checksum(pkt, in);
    }
    const std::vector<uint8_t> before(pkt.begin(), pkt.end());

    const PacketResult r = engine.process(pkt, now, meta);
    if (trace) {
      std::fprintf(stderr, "engine_fuzz: packet %zu t=%.6f s flags 0x%02x %zu B: %s%s\n", at,
                   static_cast<double>(now) / 1e9, flags, pkt.size(), to_string(r.outcome),
                   r.knob_ack ? (r.modified ? " (window lowered)" : " (knob ack)") : "");
    }

    FUZZ_CHECK(static_cast<size_t>(r.outcome) < static_cast<size_t>(Outcome::kCount), at);
    FUZZ_CHECK(counted() == packets, at);
    FUZZ_CHECK((r.outcome == Outcome::kUnparsed) == (parsed != ParseError::kNone), at);
    FUZZ_CHECK(r.flow == kNoFlow || r.flow < flows_max, at);
    FUZZ_CHECK(engine.active_flows() <= flows_max, at);
    FUZZ_CHECK(r.modified == (r.outcome == Outcome::kRewritten), at);
    if (r.knob_ack) {
      FUZZ_CHECK(parsed == ParseError::kNone && r.scale <= kMaxWindowScale, at);
      FUZZ_CHECK(r.window_in == window_bytes(in.window, r.scale), at);
      FUZZ_CHECK(r.window_out <= r.window_in, at);
    }
    if (!r.modified) {
      FUZZ_CHECK(std::equal(before.begin(), before.end(), pkt.begin()), at);
      return;
    }
    // A knob ACK's window, or a SYN's or SYN-ACK's: an rsfc knob holds the handshake's window
    // (never scaled) to the startup floor.
    const bool syn = in.syn();
    FUZZ_CHECK(!meta.truncated && parsed == ParseError::kNone && (r.knob_ack || syn), at);
    PacketView out;
    FUZZ_CHECK(parse_packet(pkt, out) == ParseError::kNone, at);
    FUZZ_CHECK(out.tcp_offset == in.tcp_offset && out.payload_len == in.payload_len, at);
    for (size_t i = 0; i < pkt.size(); ++i) {
      const bool window_or_checksum = i >= in.tcp_offset + 14u && i < in.tcp_offset + 18u;
      FUZZ_CHECK(window_or_checksum || pkt[i] == before[i], at);
    }
    FUZZ_CHECK(out.window < in.window, at);
    const uint64_t floor = engine.params().min_window_bytes;
    if (syn) {
      const uint64_t held =
          std::max<uint64_t>(startup_floor_bytes(engine.params().rsfc.initial_window_bytes), floor);
      FUZZ_CHECK(out.window == held, at);
    } else {
      FUZZ_CHECK(r.window_out == window_bytes(out.window, r.scale), at);
      FUZZ_CHECK(r.window_out >= std::min<uint64_t>(r.window_in, floor), at);
    }
    if (meta.checksum == ChecksumState::kNotReady) {
      FUZZ_CHECK(checksum_residual(pkt, out) == 0, at);
    } else {
      FUZZ_CHECK(checksum_residual(pkt, out) == checksum_residual(before, in), at);
    }
  }
};

}  // namespace
}  // namespace rsfc::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rsfc;
  using namespace rsfc::fuzz;
  if (size < kConfigBytes) return 0;
  Run run(data[0], data[1]);
  size_t pos = kConfigBytes;
  std::vector<uint8_t> pkt;
  Nanos next_expire = run.now + kSecond;
  while (pos + kRecordHeader <= size) {
    const uint8_t flags = data[pos];
    size_t len = get16(data + pos + 1) % (kMaxPacket + 1);
    const Nanos dt = get16(data + pos + 3) * ((flags & flag::kSlowClock) ? 10 * kMilli : kMicro);
    pos += kRecordHeader;
    if ((flags & flag::kReload) && pos < size) {
      run.engine.set_params(params_from(data[pos], data[1]));
      run.cfg = static_cast<uint8_t>((run.cfg & 0xc0) | (data[pos] & 0x3f));
      run.engine.set_decision_sink((run.cfg & config::kSink) ? &run.sink : nullptr);
      ++pos;
    }
    len = std::min(len, size - pos);
    pkt.assign(data + pos, data + pos + len);
    pos += len;
    run.now += dt;
    if (run.now >= next_expire || (flags & flag::kExpire)) {  // the daemon: about once a second
      run.engine.expire(run.now);
      next_expire = run.now + kSecond;
    }
    run.packet(flags, pkt);
  }
  return 0;
}
