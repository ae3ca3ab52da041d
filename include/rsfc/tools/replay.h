// rsfc-replay: what rsfcd would have done to the traffic in a pcap taken at a gateway.
//
// Every frame of the capture goes through the daemon's own core (rsfc::Engine, same
// EngineParams from the same YAML), with the capture's timestamps as `now`. The replay books
// what the engine made of each packet (its PacketResult: direction, flow, window scale,
// windows as they came and left; the flow as Engine::flow() has it) per flow (packets,
// bytes, ACKs the knob saw and rewrote, the windows advertised and applied), and collects
// the engine's DecisionRecords. It parses nothing itself. Output:
//  - JSON lines: one {"type":"decision",...} per DecisionRecord as it happens, then one
//    {"type":"flow",...} per flow (in order of first packet) at the end of the capture;
//  - a Summary (JSON and human-readable).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rsfc/core/engine.h"
#include "rsfc/core/expected.h"
#include "rsfc/core/metrics.h"
#include "rsfc/io/config.h"
#include "rsfc/tools/pcap.h"

namespace rsfc::replay {

// "rsfc", "drwa", "observe", "off" or "static:N" (N bytes, as the config's
// static_window_bytes: 1072 .. 1073725440 and >= min_window_bytes). rsfc is uplink only,
// drwa downlink only.
Expected<DirectionParams> parse_policy(std::string_view arg, bool uplink,
                                       uint32_t min_window_bytes);

// The config must let the engine tell subscribers apart and track something.
Expected<void> check_params(const EngineParams& p);

// A multiset of window sizes, run-length encoded (windows repeat for long stretches).
class WindowSamples {
 public:
  void add(uint64_t bytes);
  uint64_t count() const { return count_; }
  std::optional<uint64_t> min() const;
  // Lower median (the element at (n-1)/2 in sorted order); nullopt when empty.
  std::optional<uint64_t> median() const;

 private:
  std::vector<std::pair<uint64_t, uint64_t>> runs_;  // (bytes, repeats) in arrival order
  uint64_t count_ = 0;
};

// Median of doubles (mean of the two middle ones for an even count); nullopt when empty.
std::optional<double> median(std::vector<double> v);

enum class FlowStatus : uint8_t {
  kRegulated,    // the engine knew the window scale (handshake in the capture)
  kUnregulated,  // first seen mid-stream: handshake not in the capture
  kWithoutAcks,  // no ACK went past the engine (e.g. an unanswered SYN)
};
const char* to_string(FlowStatus s);

struct KnobBook {
  uint64_t acks = 0;            // ACKs the knob saw with the window scale known
  uint64_t acks_rewritten = 0;  // ... whose window the engine lowered
  WindowSamples advertised;     // window bytes as the ACK's sender wrote them
  WindowSamples applied;        // window bytes as the engine let them pass
};

// One flow as the engine tracked it (a flow it restarts on reused ports, or tracks again
// after it dropped it, is another book).
struct FlowBook {
  IpAddr subscriber, peer;
  uint16_t subscriber_port = 0, peer_port = 0;
  Nanos first = 0, last = 0;
  uint32_t engine_flow = kNoFlow;            // its slot in the engine's flow table
  std::optional<bool> subscriber_initiated;  // known once a SYN or SYN-ACK was seen
  // [Direction]: 0 to the subscriber, 1 from the subscriber.
  std::array<uint64_t, kDirections> packets{}, payload_bytes{};
  std::array<KnobBook, kDirections> knob{};  // [to_subscriber] = uplink knob, [from] = downlink
  uint64_t unregulated_packets = 0;          // outcome kUnregulated: window scale unknown
  uint64_t regulated_acks = 0;               // ACKs through the knob (window scale known)
  uint64_t decisions = 0;
  std::vector<double> t_buff_ms;  // from DecisionRecords with a known t_buff

  FlowStatus status() const;
  bool clamped() const { return knob[0].acks_rewritten + knob[1].acks_rewritten > 0; }
};

struct KnobSummary {
  DirectionParams params;
  uint64_t acks = 0;
  uint64_t acks_rewritten = 0;
};

struct Summary {
  std::string capture;
  uint32_t linktype = 0;
  uint64_t records = 0;
  uint64_t truncated_records = 0;  // caplen < len (passed on marked truncated)
  // Of those, the ones replayed from their headers (IP and TCP headers with options
  // captured: lengths from the IP header, TCP checksums not checked) and the ones cut inside
  // their headers (not parsed: unparsed or not TCP, as with -s 0 they may not have been).
  uint64_t header_only_records = 0, headers_cut_records = 0;
  uint64_t packets_to_engine = 0;
  Nanos first_time = 0, last_time = 0;  // capture timestamps (ns since the epoch)
  std::array<uint64_t, static_cast<size_t>(pcap::LinkError::kCount)> link_errors{};
  std::array<uint64_t, static_cast<size_t>(ParseError::kCount)> parse_errors{};
  std::array<uint64_t, static_cast<size_t>(Outcome::kCount)> outcomes{};
  uint64_t flows_total = 0, flows_regulated = 0, flows_unregulated = 0, flows_without_acks = 0;
  uint64_t flows_clamped = 0;
  std::array<KnobSummary, kDirections> knobs{};  // [0] uplink, [1] downlink
  uint64_t decision_records = 0;
  std::map<std::string, uint64_t> decision_states;
  uint64_t flows_with_t_buff = 0;
  std::optional<double> median_t_buff_ms;  // median over flows of each flow's median t_buff
  // From the engine's own counters.
  uint64_t engine_flows_created = 0, engine_flows_unregulated = 0, engine_flows_evicted = 0,
           engine_flows_table_full = 0, engine_right_edge_holds = 0, engine_floor_holds = 0,
           engine_rst_ignored = 0;  // RSTs outside their receiver's window (RFC 5961)
  // Downlink steps that came due without a signal to step on (no delivered rate: the phone's
  // ACKs came further apart than the control interval): the window held where it was.
  uint64_t engine_downlink_steps_held = 0;
  // rsfc targets raised by the bytes an ACK's sender had SACKed (a loss being repaired).
  uint64_t engine_sacked_allowances = 0;
  std::optional<std::string> error;  // the capture could not be read to its end

  // ACKs rewritten / ACKs seen, over knobs that enforce (static, rsfc, drwa); nullopt if none.
  std::optional<double> share_acks_clamped() const;
};

std::string to_json(const Summary& s);  // one JSON object, pretty-printed, ending in '\n'
std::string to_text(const Summary& s);  // for a human, several lines

class Replayer {
 public:
  // `params` must pass check_params(). `lines` (may be null) receives the JSON lines.
  Replayer(uint32_t flows_max, const EngineParams& params, std::ostream* lines);
  ~Replayer();
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // One captured frame of the given link type.
  void feed(const pcap::Record& rec, uint32_t linktype);
  // One IP packet (what NFQUEUE would have handed the daemon).
  void feed_ip(std::span<const uint8_t> ip, Nanos time, bool truncated);

  // Writes the per-flow lines and returns the summary (capture/linktype/error left to the
  // caller). Call once, after the last packet.
  Summary finish();

  // What the engine's DecisionSink calls (public so tests can script decisions).
  void on_decision(const DecisionRecord& r);

  const Engine& engine() const { return engine_; }
  const std::vector<FlowBook>& flows() const { return flows_; }

 private:
  class Sink;
  static constexpr size_t kNoBook = SIZE_MAX;
  FlowBook& book_of(const PacketResult& res, Nanos now);
  void account(FlowBook& f, const PacketResult& res, Nanos now);
  void write_flow_line(const FlowBook& f);
  double rel_seconds(Nanos t) const;

  Engine engine_;
  std::ostream* lines_;
  std::unique_ptr<Sink> sink_;
  std::vector<uint8_t> work_;  // the packet the engine may rewrite
  std::vector<FlowBook> flows_;
  std::vector<size_t> book_of_slot_;  // engine flow slot -> flows_ position (kNoBook)
  std::string line_;                  // reused output line
  std::array<char, 1024> record_{};   // one decision line
  bool have_first_ = false;
  Nanos first_ = 0, last_ = 0, next_expire_ = 0;
  Summary s_;
};

// Reads the capture at `path` through a Replayer. An Error only when the file cannot be
// opened or its header is bad; a capture broken later gives a Summary with `error` set
// (everything before the break is counted).
Expected<Summary> replay_file(const std::string& path, uint32_t flows_max,
                              const EngineParams& params, std::ostream* lines);

}  // namespace rsfc::replay
