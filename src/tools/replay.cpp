#include "rsfc/tools/replay.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "rsfc/core/window.h"

namespace rsfc::replay {

namespace {

constexpr size_t kTo = static_cast<size_t>(Direction::kToSubscriber);
constexpr size_t kFrom = static_cast<size_t>(Direction::kFromSubscriber);

bool enforces(Policy p) {
  return p == Policy::kStatic || p == Policy::kRsfc || p == Policy::kDrwa;
}

std::string policy_text(const DirectionParams& d) {
  if (d.policy == Policy::kStatic) return "static:" + std::to_string(d.static_window_bytes);
  return to_string(d.policy);
}

// ---- JSON bits ---------------------------------------------------------------------------
void put_str(std::string& o, std::string_view s) {
  o += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", unsigned{c});
      o += b;
    } else {
      o += ch;
    }
  }
  o += '"';
}
void put_key(std::string& o, std::string_view k) {
  if (!o.empty() && o.back() != '{' && o.back() != '\n' && o.back() != ' ') o += ',';
  put_str(o, k);
  o += ':';
}
void put_num(std::string& o, double v, const char* fmt = "%.6g") {
  if (!std::isfinite(v)) {
    o += "null";
    return;
  }
  char b[64];
  std::snprintf(b, sizeof(b), fmt, v);
  o += b;
}
void put_uint(std::string& o, uint64_t v) {
  o += std::to_string(v);
}
void put_opt(std::string& o, std::optional<uint64_t> v) {
  if (v)
    put_uint(o, *v);
  else
    o += "null";
}
void put_opt(std::string& o, std::optional<double> v, const char* fmt) {
  if (v)
    put_num(o, *v, fmt);
  else
    o += "null";
}
void kv(std::string& o, std::string_view k, std::string_view s) {
  put_key(o, k);
  put_str(o, s);
}
void kv(std::string& o, std::string_view k, uint64_t v) {
  put_key(o, k);
  put_uint(o, v);
}
void kv_num(std::string& o, std::string_view k, double v, const char* fmt) {
  put_key(o, k);
  put_num(o, v, fmt);
}
}  // namespace

// ---- arguments -------------------------------------------------------------------------

Expected<DirectionParams> parse_policy(std::string_view arg, bool uplink,
                                       uint32_t min_window_bytes) {
  const char* knob = uplink ? "uplink" : "downlink";
  DirectionParams d;
  if (arg == "off") {
    d.policy = Policy::kOff;
  } else if (arg == "observe") {
    d.policy = Policy::kObserve;
  } else if (arg == "rsfc") {  // both knobs (downlink: the queue regulator, DESIGN §4a)
    d.policy = Policy::kRsfc;
  } else if (arg == "drwa") {
    if (uplink) return Error::msg("policy drwa is for the downlink knob only");
    d.policy = Policy::kDrwa;
  } else if (arg.starts_with("static:")) {
    const std::string_view num = arg.substr(7);
    uint64_t n = 0;
    const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
    if (num.empty() || ec != std::errc() || ptr != num.data() + num.size()) {
      return Error::msg(std::string(knob) + " policy " + std::string(arg) +
                        ": static:N needs N as a plain decimal byte count");
    }
    if (n < kMinWindowFloor || n > kMaxWindowBytes) {  // as the config accepts
      return Error::msg(std::string(knob) + " policy " + std::string(arg) + ": N must be " +
                        std::to_string(kMinWindowFloor) + " .. " + std::to_string(kMaxWindowBytes));
    }
    if (n < min_window_bytes) {
      return Error::msg(std::string(knob) + " policy " + std::string(arg) +
                        ": N is below min_window_bytes (" + std::to_string(min_window_bytes) +
                        ") of the config");
    }
    d.policy = Policy::kStatic;
    d.static_window_bytes = static_cast<uint32_t>(n);
  } else {
    return Error::msg(std::string(knob) + " policy " + std::string(arg) +
                      ": expected rsfc, drwa, static:N, observe or off");
  }
  return d;
}

Expected<void> check_params(const EngineParams& p) {
  if (p.uplink.policy == Policy::kOff && p.downlink.policy == Policy::kOff) {
    return Error::msg(
        "both knobs are off: the engine would not even track flows "
        "(use --policy-uplink observe|static:N|rsfc)");
  }
  if (p.subscriber_networks.empty()) {
    return Error::msg(
        "the config has no subscriber_networks: uplink and downlink cannot be told apart");
  }
  return {};
}

// ---- small statistics --------------------------------------------------------------------

void WindowSamples::add(uint64_t bytes) {
  ++count_;
  if (!runs_.empty() && runs_.back().first == bytes) {
    ++runs_.back().second;
  } else {
    runs_.emplace_back(bytes, 1);
  }
}

std::optional<uint64_t> WindowSamples::min() const {
  if (runs_.empty()) return std::nullopt;
  uint64_t m = runs_.front().first;
  for (const auto& r : runs_) m = std::min(m, r.first);
  return m;
}

std::optional<uint64_t> WindowSamples::median() const {
  if (count_ == 0) return std::nullopt;
  std::vector<std::pair<uint64_t, uint64_t>> sorted = runs_;
  std::sort(sorted.begin(), sorted.end());
  const uint64_t want = (count_ - 1) / 2;  // 0-based rank of the lower median
  uint64_t seen = 0;
  for (const auto& [bytes, n] : sorted) {
    seen += n;
    if (seen > want) return bytes;
  }
  return sorted.back().first;  // not reached
}

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

const char* to_string(FlowStatus s) {
  switch (s) {
    case FlowStatus::kRegulated:
      return "regulated";
    case FlowStatus::kUnregulated:
      return "unregulated";
    case FlowStatus::kWithoutAcks:
      return "without_acks";
  }
  return "?";
}

FlowStatus FlowBook::status() const {
  if (regulated_acks > 0) return FlowStatus::kRegulated;
  if (unregulated_packets > 0) return FlowStatus::kUnregulated;
  return FlowStatus::kWithoutAcks;
}

std::optional<double> Summary::share_acks_clamped() const {
  uint64_t acks = 0, rewritten = 0;
  for (const KnobSummary& k : knobs) {
    if (!enforces(k.params.policy)) continue;
    acks += k.acks;
    rewritten += k.acks_rewritten;
  }
  if (acks == 0) return std::nullopt;
  return static_cast<double>(rewritten) / static_cast<double>(acks);
}

// ---- the replayer ------------------------------------------------------------------------

class Replayer::Sink final : public DecisionSink {
 public:
  explicit Sink(Replayer& r) : r_(r) {}
  void on_decision(const DecisionRecord& rec) override { r_.on_decision(rec); }

 private:
  Replayer& r_;
};

Replayer::Replayer(uint32_t flows_max, const EngineParams& params, std::ostream* lines)
    : engine_(flows_max, params), lines_(lines) {
  sink_ = std::make_unique<Sink>(*this);
  engine_.set_decision_sink(sink_.get());
  s_.knobs[kTo].params = params.uplink;
  s_.knobs[kFrom].params = params.downlink;
}

Replayer::~Replayer() {
  engine_.set_decision_sink(nullptr);
}

double Replayer::rel_seconds(Nanos t) const {
  return static_cast<double>(t - first_) / static_cast<double>(kSecond);
}

void Replayer::feed(const pcap::Record& rec, uint32_t linktype) {
  ++s_.records;
  if (rec.truncated()) ++s_.truncated_records;
  const pcap::LinkResult lr = pcap::ip_packet(linktype, rec.data);
  if (lr.error != pcap::LinkError::kNone) {
    ++s_.link_errors[static_cast<size_t>(lr.error)];
    if (!have_first_) {
      have_first_ = true;
      first_ = rec.header.time;
    }
    last_ = rec.header.time;
    return;
  }
  feed_ip(lr.ip, rec.header.time, rec.truncated());
}

void Replayer::feed_ip(std::span<const uint8_t> ip, Nanos now, bool truncated) {
  if (!have_first_) {
    have_first_ = true;
    first_ = now;
    next_expire_ = now + kSecond;
  }
  last_ = now;
  if (now >= next_expire_) {  // the daemon expires about once a second
    engine_.expire(now);
    next_expire_ = now + kSecond;
  }
  ++s_.packets_to_engine;
  work_.assign(ip.begin(), ip.end());
  const PacketResult res = engine_.process(work_, now, {.truncated = truncated, .replay = true});
  ++s_.outcomes[static_cast<size_t>(res.outcome)];
  if (truncated)
    ++(res.outcome == Outcome::kUnparsed ? s_.headers_cut_records : s_.header_only_records);
  if (res.flow == kNoFlow) return;  // no flow tracks it: nothing to book
  account(book_of(res, now), res, now);
}

// The book of the packet's flow: a new one when the engine started a flow (its first
// packet, a SYN on reused ports, or a flow again after the engine dropped it).
FlowBook& Replayer::book_of(const PacketResult& res, Nanos now) {
  if (res.flow >= book_of_slot_.size()) book_of_slot_.resize(res.flow + 1, kNoBook);
  size_t& b = book_of_slot_[res.flow];
  if (res.new_flow || b == kNoBook) {
    const FlowKey& k = engine_.flow(res.flow).key;
    FlowBook nf;
    nf.subscriber.family = nf.peer.family = k.family;
    nf.subscriber.bytes = k.sub_addr;
    nf.peer.bytes = k.peer_addr;
    nf.subscriber_port = k.sub_port;
    nf.peer_port = k.peer_port;
    nf.engine_flow = res.flow;
    nf.first = nf.last = now;
    b = flows_.size();
    flows_.push_back(std::move(nf));
  }
  return flows_[b];
}

// Books one packet as the engine saw it.
void Replayer::account(FlowBook& f, const PacketResult& res, Nanos now) {
  const Flow& ef = engine_.flow(res.flow);
  const auto d = static_cast<size_t>(res.direction);
  f.last = now;
  ++f.packets[d];
  f.payload_bytes[kTo] = ef.bytes_to_sub;
  f.payload_bytes[kFrom] = ef.bytes_from_sub;
  // Who opened is known once a SYN or SYN-ACK went by.
  if (ef.sub.syn_seen || ef.peer.syn_seen) f.subscriber_initiated = ef.sub_initiated;
  if (res.outcome == Outcome::kUnregulated) ++f.unregulated_packets;
  if (!res.knob_ack) return;
  ++f.regulated_acks;
  const EngineParams& p = engine_.params();
  if ((d == kTo ? p.uplink : p.downlink).policy == Policy::kOff) return;
  KnobBook& k = f.knob[d];
  ++k.acks;
  if (res.outcome == Outcome::kRewritten) ++k.acks_rewritten;
  k.advertised.add(res.window_in);
  k.applied.add(res.window_out);
}

void Replayer::on_decision(const DecisionRecord& r) {
  ++s_.decision_records;
  ++s_.decision_states[r.state != nullptr ? r.state : ""];
  if (r.flow < book_of_slot_.size() && book_of_slot_[r.flow] != kNoBook) {
    FlowBook& f = flows_[book_of_slot_[r.flow]];
    ++f.decisions;
    if (r.t_buff_ms >= 0 && std::isfinite(r.t_buff_ms)) f.t_buff_ms.push_back(r.t_buff_ms);
  }
  if (lines_ == nullptr) return;
  const size_t n =
      format_decision_json(r, record_.data(), record_.size(), DecisionJson::kReplay, first_);
  lines_->write(record_.data(), static_cast<std::streamsize>(n));
}

void Replayer::write_flow_line(const FlowBook& f) {
  std::string& o = line_;
  o.clear();  // not assign("{"): GCC 12 at -O3 reports a false -Wrestrict there
  o += '{';
  kv(o, "type", "flow");
  kv_num(o, "time_s", rel_seconds(f.last), "%.6f");
  kv_num(o, "start_s", rel_seconds(f.first), "%.6f");
  kv(o, "subscriber", f.subscriber.to_string());
  kv(o, "subscriber_port", f.subscriber_port);
  kv(o, "peer", f.peer.to_string());
  kv(o, "peer_port", f.peer_port);
  kv(o, "status", to_string(f.status()));
  put_key(o, "initiator");
  if (f.subscriber_initiated)
    put_str(o, *f.subscriber_initiated ? "subscriber" : "peer");
  else
    o += "null";
  kv(o, "packets_to_subscriber", f.packets[kTo]);
  kv(o, "packets_from_subscriber", f.packets[kFrom]);
  kv(o, "bytes_to_subscriber", f.payload_bytes[kTo]);
  kv(o, "bytes_from_subscriber", f.payload_bytes[kFrom]);
  for (size_t d : {kTo, kFrom}) {
    const KnobBook& k = f.knob[d];
    put_key(o, d == kTo ? "uplink" : "downlink");
    o += '{';
    kv(o, "policy", policy_text(d == kTo ? engine_.params().uplink : engine_.params().downlink));
    kv(o, "acks", k.acks);
    kv(o, "acks_rewritten", k.acks_rewritten);
    put_key(o, "window_min");
    put_opt(o, k.applied.min());
    put_key(o, "window_median");
    put_opt(o, k.applied.median());
    put_key(o, "advertised_min");
    put_opt(o, k.advertised.min());
    put_key(o, "advertised_median");
    put_opt(o, k.advertised.median());
    o += '}';
  }
  kv(o, "decisions", f.decisions);
  put_key(o, "t_buff_median_ms");
  put_opt(o, median(f.t_buff_ms), "%.3f");
  o += "}\n";
  lines_->write(o.data(), static_cast<std::streamsize>(o.size()));
}

Summary Replayer::finish() {
  std::vector<double> per_flow_tbuff;
  for (const FlowBook& f : flows_) {
    if (lines_ != nullptr) write_flow_line(f);
    ++s_.flows_total;
    switch (f.status()) {
      case FlowStatus::kRegulated:
        ++s_.flows_regulated;
        break;
      case FlowStatus::kUnregulated:
        ++s_.flows_unregulated;
        break;
      case FlowStatus::kWithoutAcks:
        ++s_.flows_without_acks;
        break;
    }
    if (f.clamped()) ++s_.flows_clamped;
    for (size_t d : {kTo, kFrom}) {
      s_.knobs[d].acks += f.knob[d].acks;
      s_.knobs[d].acks_rewritten += f.knob[d].acks_rewritten;
    }
    if (auto m = median(f.t_buff_ms)) per_flow_tbuff.push_back(*m);
  }
  s_.flows_with_t_buff = per_flow_tbuff.size();
  s_.median_t_buff_ms = median(std::move(per_flow_tbuff));
  if (lines_ != nullptr) lines_->flush();
  const CoreCounters& c = engine_.counters();
  for (size_t i = 0; i < s_.parse_errors.size(); ++i) s_.parse_errors[i] = c.parse_errors[i].get();
  s_.engine_flows_created = c.flows_created.get();
  s_.engine_flows_unregulated = c.flows_unregulated.get();
  s_.engine_flows_evicted = c.flows_evicted.get();
  s_.engine_flows_table_full = c.flows_table_full.get();
  s_.engine_right_edge_holds = c.right_edge_holds[0].get() + c.right_edge_holds[1].get();
  s_.engine_floor_holds = c.floor_holds[0].get() + c.floor_holds[1].get();
  s_.engine_rst_ignored = c.rst_ignored.get();
  s_.engine_downlink_steps_held = c.downlink_steps_held.get();
  s_.engine_sacked_allowances = c.sacked_allowances[0].get() + c.sacked_allowances[1].get();
  s_.first_time = first_;
  s_.last_time = last_;
  return s_;
}

Expected<Summary> replay_file(const std::string& path, uint32_t flows_max,
                              const EngineParams& params, std::ostream* lines) {
  if (auto ok = check_params(params); !ok) return ok.error();
  auto reader = pcap::PcapReader::open(path);
  if (!reader) return reader.error();
  const uint32_t lt = reader->header().linktype;
  Replayer r(flows_max, params, lines);
  pcap::Record rec;
  std::optional<std::string> error;
  for (;;) {
    auto more = reader->next(rec);
    if (!more) {
      error = more.error().message;
      break;
    }
    if (!*more) break;
    r.feed(rec, lt);
  }
  Summary s = r.finish();
  s.capture = path;
  s.linktype = lt;
  s.error = std::move(error);
  return s;
}

// ---- summary rendering -------------------------------------------------------------------

namespace {

std::string json_str(std::string_view v) {
  std::string o;
  put_str(o, v);
  return o;
}
std::string json_num(double v, const char* fmt) {
  std::string o;
  put_num(o, v, fmt);
  return o;
}
std::string json_opt(std::optional<double> v, const char* fmt) {
  std::string o;
  put_opt(o, v, fmt);
  return o;
}
// {"name":count,...}
std::string json_counts(std::initializer_list<std::pair<std::string_view, uint64_t>> counts) {
  std::string o = "{";
  for (const auto& [name, n] : counts) kv(o, name, n);
  return o + '}';
}
std::string json_counts(const std::map<std::string, uint64_t>& counts) {
  std::string o = "{";
  for (const auto& [name, n] : counts) kv(o, name, n);
  return o + '}';
}
// {"name":count,...} of an array indexed by `Enum`, from index `first` on.
template <typename Enum, size_t N>
std::string json_counts_by(const std::array<uint64_t, N>& counts, size_t first) {
  std::string o = "{";
  for (size_t i = first; i < N; ++i) kv(o, to_string(static_cast<Enum>(i)), counts[i]);
  return o + '}';
}
std::string json_knob(const KnobSummary& k) {
  std::string o = "{";
  kv(o, "policy", policy_text(k.params));
  kv(o, "acks", k.acks);
  kv(o, "clamped", k.acks_rewritten);
  return o + '}';
}

}  // namespace

std::string to_json(const Summary& s) {
  std::string o = "{\n";
  auto line = [&o](std::string_view key, std::string_view value) {
    o += "  ";
    put_key(o, key);  // no comma after the indent
    o += value;
    o += ",\n";
  };
  line("capture", json_str(s.capture));
  line("linktype", json_str(pcap::linktype_name(s.linktype)));
  line("complete", s.error ? "false" : "true");
  line("error", s.error ? json_str(*s.error) : "null");
  line("records", std::to_string(s.records));
  line("truncated_records", std::to_string(s.truncated_records));
  line("header_only_records", std::to_string(s.header_only_records));
  line("headers_cut_records", std::to_string(s.headers_cut_records));
  line("packets_to_engine", std::to_string(s.packets_to_engine));
  line("first_time_s", json_num(static_cast<double>(s.first_time) / 1e9, "%.6f"));
  line("duration_s", json_num(static_cast<double>(s.last_time - s.first_time) / 1e9, "%.6f"));
  line("policies", "{\"uplink\":" + json_str(policy_text(s.knobs[kTo].params)) +
                       ",\"downlink\":" + json_str(policy_text(s.knobs[kFrom].params)) + "}");
  line("flows", json_counts({{"total", s.flows_total},
                             {"regulated", s.flows_regulated},
                             {"unregulated", s.flows_unregulated},
                             {"without_acks", s.flows_without_acks},
                             {"clamped", s.flows_clamped}}));
  line("acks", "{\"uplink\":" + json_knob(s.knobs[kTo]) +
                   ",\"downlink\":" + json_knob(s.knobs[kFrom]) +
                   ",\"clamped_share\":" + json_opt(s.share_acks_clamped(), "%.6f") + "}");
  line("decision_records", std::to_string(s.decision_records));
  line("decision_states", json_counts(s.decision_states));
  line("flows_with_t_buff", std::to_string(s.flows_with_t_buff));
  line("median_t_buff_ms", json_opt(s.median_t_buff_ms, "%.3f"));
  line("parse_errors", json_counts_by<ParseError>(s.parse_errors, 1));
  line("link_errors", json_counts_by<pcap::LinkError>(s.link_errors, 1));
  line("outcomes", json_counts_by<Outcome>(s.outcomes, 0));
  line("engine", json_counts({{"flows_created", s.engine_flows_created},
                              {"flows_unregulated", s.engine_flows_unregulated},
                              {"flows_evicted", s.engine_flows_evicted},
                              {"flows_table_full", s.engine_flows_table_full},
                              {"right_edge_holds", s.engine_right_edge_holds},
                              {"floor_holds", s.engine_floor_holds},
                              {"rst_ignored", s.engine_rst_ignored},
                              {"downlink_steps_held", s.engine_downlink_steps_held},
                              {"sacked_allowances", s.engine_sacked_allowances}}));
  o.resize(o.size() - 2);  // the last line has no comma
  o += "\n}\n";
  return o;
}

std::string to_text(const Summary& s) {
  std::string o;
  char b[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(b, sizeof(b), fmt, args...);
    o += b;
  };
  add("rsfc-replay: %s (%s): %llu records over %.3f s, %llu IP packets to the engine\n",
      s.capture.c_str(), pcap::linktype_name(s.linktype),
      static_cast<unsigned long long>(s.records),
      static_cast<double>(s.last_time - s.first_time) / 1e9,
      static_cast<unsigned long long>(s.packets_to_engine));
  if (s.error) add("  CAPTURE BROKEN, stopped early: %s\n", s.error->c_str());
  add("  policies: uplink %s, downlink %s\n", policy_text(s.knobs[kTo].params).c_str(),
      policy_text(s.knobs[kFrom].params).c_str());
  add("  flows: %llu total, %llu regulated, %llu unregulated (handshake not in capture), "
      "%llu without ACKs\n",
      static_cast<unsigned long long>(s.flows_total),
      static_cast<unsigned long long>(s.flows_regulated),
      static_cast<unsigned long long>(s.flows_unregulated),
      static_cast<unsigned long long>(s.flows_without_acks));
  add("  would have been clamped: %llu flows", static_cast<unsigned long long>(s.flows_clamped));
  if (auto share = s.share_acks_clamped()) {
    uint64_t acks = 0, rew = 0;
    for (const auto& k : s.knobs) {
      if (!enforces(k.params.policy)) continue;
      acks += k.acks;
      rew += k.acks_rewritten;
    }
    add("; %llu of %llu ACKs (%.1f%%)\n", static_cast<unsigned long long>(rew),
        static_cast<unsigned long long>(acks), *share * 100);
  } else {
    add("; no ACKs under an enforcing policy\n");
  }
  if (s.median_t_buff_ms) {
    add("  median t_buff over %llu flows: %.3f ms (%llu decision records)\n",
        static_cast<unsigned long long>(s.flows_with_t_buff), *s.median_t_buff_ms,
        static_cast<unsigned long long>(s.decision_records));
  } else {
    add("  median t_buff: none (%llu decision records)\n",
        static_cast<unsigned long long>(s.decision_records));
  }
  std::string errs;
  for (size_t i = 1; i < s.parse_errors.size(); ++i) {
    if (s.parse_errors[i] == 0) continue;
    std::snprintf(b, sizeof(b), "%s%s %llu", errs.empty() ? "" : ", ",
                  to_string(static_cast<ParseError>(i)),
                  static_cast<unsigned long long>(s.parse_errors[i]));
    errs += b;
  }
  for (size_t i = 1; i < s.link_errors.size(); ++i) {
    if (s.link_errors[i] == 0) continue;
    std::snprintf(b, sizeof(b), "%s%s %llu", errs.empty() ? "" : ", ",
                  to_string(static_cast<pcap::LinkError>(i)),
                  static_cast<unsigned long long>(s.link_errors[i]));
    errs += b;
  }
  add("  parse errors: %s\n", errs.empty() ? "none" : errs.c_str());
  if (s.truncated_records > 0) {
    add("  %llu records were cut by the capture's snap length: %llu replayed from their "
        "headers (lengths from the IP header; TCP checksums not checked), %llu cut inside "
        "their IP or TCP headers (or not TCP) and not parsed (-s 128 keeps TCP options whole)\n",
        static_cast<unsigned long long>(s.truncated_records),
        static_cast<unsigned long long>(s.header_only_records),
        static_cast<unsigned long long>(s.headers_cut_records));
  }
  if (s.engine_rst_ignored > 0) {
    add("  %llu RSTs outside their receiver's window passed without closing their flows "
        "(RFC 5961: blind or stale resets)\n",
        static_cast<unsigned long long>(s.engine_rst_ignored));
  }
  if (s.engine_downlink_steps_held > 0) {
    add("  %llu downlink control steps came due without a delivered rate to step on (the "
        "phone's ACKs further apart than the control interval): each held its window\n",
        static_cast<unsigned long long>(s.engine_downlink_steps_held));
  }
  if (s.engine_sacked_allowances > 0) {
    add("  %llu ACKs SACKed bytes above their cumulative ACK (a loss being repaired): their "
        "rsfc targets counted those bytes out of the network\n",
        static_cast<unsigned long long>(s.engine_sacked_allowances));
  }
  const uint64_t not_sub = s.outcomes[static_cast<size_t>(Outcome::kNotSubscriber)];
  if (not_sub > 0) {
    add("  %llu packets had no end (or both ends) in subscriber_networks: ignored\n",
        static_cast<unsigned long long>(not_sub));
  }
  return o;
}

}  // namespace rsfc::replay
